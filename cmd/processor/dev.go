package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// runDev is `processor --dev`: the embedded broker, two simulated push
// services, a sample workload over the three tiers with a realistic failure
// mix, and a live status table until ctx ends. Logs go to processor.log in
// the data dir; the table says where everything listens.
func runDev(ctx context.Context, cfg Config, _ *slog.Logger, stdout io.Writer) error {
	state := loadDevState(cfg.DataDir)
	if cfg.HMACKey == "" {
		cfg.HMACKey = state.HMACKey
	}
	if err := newDevIdentity(&cfg); err != nil {
		return err
	}
	cfg.Brokers = nil
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	// Logs would scroll the status table away: they go to a file.
	logPath := filepath.Join(cfg.DataDir, "processor.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	defer logFile.Close()
	log := newLogger(logFile, cfg.LogFormat, cfg.LogLevel)

	// One push service with a failure mix, one that allows 50 requests/s
	// and is offered 80/s (half the workload), so pacing has work to do.
	mix := pushsim.DefaultConfig()
	mix.Fail503, mix.Fail429, mix.Fail410, mix.Fail500 = 0.05, 0.03, 0.01, 0.01
	mix.Latency, mix.LatencyJitter = 15*time.Millisecond, 40*time.Millisecond
	limited := pushsim.DefaultConfig()
	limited.RateLimit, limited.Burst = devLimit, devLimit
	limited.Latency, limited.LatencyJitter = 10*time.Millisecond, 20*time.Millisecond

	var sims []*pushsim.Server
	where := devWhere{Broker: cfg.EmbeddedAddr, HTTP: cfg.HTTPAddr, Logs: logPath}
	what := []string{
		fmt.Sprintf("failure mix: %g%% 503, %g%% 429, %g%% 410, %g%% 500", 100*mix.Fail503, 100*mix.Fail429, 100*mix.Fail410, 100*mix.Fail500),
		fmt.Sprintf("allows %d requests/s, offered %d/s", devLimit, devRate/2),
	}
	for i, sc := range []pushsim.Config{mix, limited} {
		sc.KeepDeliveries = 1000 // a long dev run must not grow without bound
		s, err := pushsim.New(sc, log)
		if err != nil {
			return fmt.Errorf("push simulator: %w", err)
		}
		ln, err := state.listenSim(i)
		if err != nil {
			return fmt.Errorf("push simulator: %w", err)
		}
		go s.Serve(ln)
		defer s.Close(context.Background())
		sims = append(sims, s)
		cfg.AllowInsecure = append(cfg.AllowInsecure, ln.Addr().String())
		where.Sims = append(where.Sims, fmt.Sprintf("http://%s (%s)", ln.Addr(), what[i]))
	}
	if err := state.save(cfg.DataDir); err != nil {
		return err
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = serve(ctx, cfg, log, func(p *pipeline.Processor) {
		names := topology.Names{Prefix: cfg.TopicPrefix}
		wg.Go(func() { devWorkload(ctx, p.Client(), names, sims, devRate) })
		wg.Go(func() { statusTable(ctx, stdout, p, sims, where) })
	})
	if err != nil {
		fmt.Fprintf(stdout, "processor --dev stopped: %v (logs: %s)\n", err, logPath)
	}
	return err
}

// The dev workload's rate, events/s over both simulators, and the limited
// simulator's limit, requests/s: it is offered half the rate, more than it
// takes, so the table shows pacing hold its sends near the limit.
const (
	devRate  = 160
	devLimit = 50
)

// devWhere is where the parts of a dev run listen and log.
type devWhere struct {
	Broker, HTTP, Logs string
	// Sims are the simulators' URLs, each with what it does.
	Sims []string
}

func (w devWhere) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  broker     %s (kcat -b %s -L)\n", w.Broker, w.Broker)
	if w.HTTP != "" {
		fmt.Fprintf(&b, "  metrics    http://%s/metrics\n", w.HTTP)
	}
	for _, s := range w.Sims {
		fmt.Fprintf(&b, "  simulator  %s\n", s)
	}
	fmt.Fprintf(&b, "  logs       %s\n", w.Logs)
	return b.String()
}

// devWorkload produces rate events/s: tier1 20%, tier2 30%, tier3 50%, 1%
// of them malformed.
func devWorkload(ctx context.Context, cl *kgo.Client, names topology.Names, sims []*pushsim.Server, rate int) {
	var subs []pushsim.Subscription
	for i := range 400 {
		subs = append(subs, sims[i%len(sims)].Subscribe())
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t := tiers.Tier3
		switch r := rand.IntN(10); {
		case r < 2:
			t = tiers.Tier1
		case r < 5:
			t = tiers.Tier2
		}
		sub := subs[rand.IntN(len(subs))]
		v := sampleEvent(fmt.Sprintf("dev-%d-%d", time.Now().Unix(), n), sub, rand.IntN(100) == 0)
		cl.Produce(ctx, &kgo.Record{Topic: names.Tier(t), Key: []byte(sub.ID), Value: v}, nil)
	}
}

func sampleEvent(id string, sub pushsim.Subscription, malformed bool) []byte {
	auth := sub.Auth
	if malformed {
		auth = auth[:10] // a 12-byte auth secret: invalid_event
	}
	v, _ := json.Marshal(map[string]any{
		"id":           id,
		"subscription": map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256dh, "auth": auth}},
		"payload":      `{"title":"Hello from tierpush","body":"event ` + id + `"}`,
		"ttl":          600,
		"urgency":      "normal",
	})
	return v
}

// statusTable redraws the live status every second.
func statusTable(ctx context.Context, w io.Writer, p *pipeline.Processor, sims []*pushsim.Server, where devWhere) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		fmt.Fprint(w, "\033[H\033[2J")
		fmt.Fprint(w, renderStatus(p.Stats().Snapshot(), p.Held(), p.Pacer().Lanes(), time.Since(start), where))
	}
}

func renderStatus(s deliver.Snapshot, held map[string]int, lanes []pacing.LaneState, up time.Duration, where devWhere) string {
	byOrigin := make(map[string]pacing.LaneState, len(lanes))
	for _, l := range lanes {
		byOrigin[l.Origin] = l
	}
	var b strings.Builder
	fmt.Fprintf(&b, "tierpush --dev   up %s   (Ctrl-C to stop)\n\n%s\n", up.Truncate(time.Second), where)
	fmt.Fprintf(&b, "  delivered %-10d gone %-10d\n\n", s.Delivered, s.Gone)
	fmt.Fprintf(&b, "  %-32s %12s %10s\n", "retry step", "routed", "held now")
	for _, t := range deliver.SortedKeys(s.Retries) {
		fmt.Fprintf(&b, "  %-32s %12d %10d\n", t, s.Retries[t], held[t])
	}
	fmt.Fprintf(&b, "\n  %-32s %12s\n", "dead letters by reason", "count")
	for _, r := range deliver.SortedKeys(s.DLQ) {
		fmt.Fprintf(&b, "  %-32s %12d\n", r, s.DLQ[r])
	}
	if showApps(s.Apps) {
		fmt.Fprintf(&b, "\n  %-32s %12s %10s %12s\n", "app (VAPID identity)", "sends", "delivered", "key refused")
		for _, a := range deliver.SortedKeys(s.Apps) {
			st := s.Apps[a]
			fmt.Fprintf(&b, "  %-32s %12d %10d %12d\n", a, st.Sends, st.Delivered, st.VAPIDRejected)
		}
	}
	fmt.Fprintf(&b, "\n  %-24s %9s %9s %8s %8s %8s %7s %10s\n", "push service", "sends", "429 rate", "errors", "deferred", "rate/s", "limit", "breaker")
	for _, o := range deliver.SortedKeys(s.Origins) {
		st := s.Origins[o]
		rate := 0.0
		if st.Sends > 0 {
			rate = 100 * float64(st.Rate429s) / float64(st.Sends)
		}
		host := o
		if u, err := url.Parse(o); err == nil {
			host = u.Host
		}
		l := byOrigin[o]
		fmt.Fprintf(&b, "  %-24s %9d %8.1f%% %8d %8d %8.1f %7d %10s\n", host, st.Sends, rate, st.Errors, st.Deferred, l.Rate+l.PeerRate, l.Limit, l.Breaker)
	}
	return b.String()
}

// showApps reports whether the apps section is worth its lines: more than
// one identity sends, or a push service refused a key.
func showApps(apps map[string]deliver.AppStats) bool {
	if len(apps) > 1 {
		return true
	}
	for _, a := range apps {
		if a.VAPIDRejected > 0 {
			return true
		}
	}
	return false
}
