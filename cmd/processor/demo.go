package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// demoScripts are the simulator scripts (POST /subscribe?script=) of the
// demo's subscriptions, in turn. Half the subscriptions just work (and meet
// whatever failure fractions the simulator runs with); the others fail their
// first sends in the ways the retry ladders exist for, so retries, dead
// letters and unsubscribe events show up within seconds of the first event.
var demoScripts = []string{
	"",
	"503,201", // one retry: the tier's first step
	"",
	"429:1,201", // throttled, Retry-After 1s: the smallest step of at least 1s
	"",
	"500,503,201", // two retries: first and second step
	"",
	"410", // gone: an unsubscribe event in push.gone; later events end gone without a send
	"",
	"429:30,201", // Retry-After 30s: skips to the 60s step
	"",
	"503*", // never recovers: the whole ladder, then push.dlq (max_attempts)
}

// demoConfig is the configuration of `processor demo`.
type demoConfig struct {
	Kafka         kafkaFlags
	Sim           string
	Rate          float64
	Subscriptions int
	Count         int
	Wait          time.Duration
}

func defaultDemoConfig() demoConfig {
	return demoConfig{
		Kafka:         kafkaFlags{TopicPrefix: topology.DefaultPrefix},
		Sim:           "http://127.0.0.1:8443",
		Rate:          20,
		Subscriptions: 48,
		Wait:          2 * time.Minute,
	}
}

// validate names the flag at fault.
func (c demoConfig) validate() error {
	var errs []error
	if u, err := url.Parse(c.Sim); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		errs = append(errs, fmt.Errorf("--sim: %q, want the simulator's http(s)://host:port", c.Sim))
	}
	if !(c.Rate > 0 && c.Rate <= 10_000) { // also catches NaN
		errs = append(errs, fmt.Errorf("--rate: %g, want more than 0 and at most 10000 events per second", c.Rate))
	}
	if c.Subscriptions < 1 || c.Subscriptions > 100_000 {
		errs = append(errs, fmt.Errorf("--subscriptions: %d, want 1..100000", c.Subscriptions))
	}
	if c.Count < 0 {
		errs = append(errs, fmt.Errorf("--count: %d, want 0 (until interrupted) or more", c.Count))
	}
	if c.Wait < 0 {
		errs = append(errs, fmt.Errorf("--wait: %s, want 0 or more", c.Wait))
	}
	if c.Kafka.TopicPrefix == "" || strings.ContainsAny(c.Kafka.TopicPrefix, " /\\") {
		errs = append(errs, fmt.Errorf("--topic-prefix: %q is not a valid topic prefix", c.Kafka.TopicPrefix))
	}
	return errors.Join(errs...)
}

// runDemo is `processor demo`: it subscribes --subscriptions subscriptions
// at the push simulator, some of them scripted to fail, then produces
// sample events across the three tiers at --rate per second until --count
// events or until interrupted. It is the workload of docker-compose.yml.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := defaultDemoConfig()
	fs := newFlagSet("processor demo", stderr)
	cfg.Kafka.register(fs)
	fs.StringVar(&cfg.Sim, "sim", cfg.Sim, "base URL of the push simulator (processor pushsim) to subscribe at")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "events produced per second, spread over the tiers (tier1 20%, tier2 30%, tier3 50%)")
	fs.IntVar(&cfg.Subscriptions, "subscriptions", cfg.Subscriptions, "subscriptions to create at the simulator; every 2nd one fails its first sends")
	fs.IntVar(&cfg.Count, "count", cfg.Count, "events to produce, then exit (0 = until interrupted)")
	fs.DurationVar(&cfg.Wait, "wait", cfg.Wait, "how long to wait for the simulator and the tier topics to appear")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return usageError(err)
	}
	log := newLogger(stderr, "text", "info")

	subs, err := demoSubscribe(ctx, cfg, log)
	if err != nil || ctx.Err() != nil {
		return err
	}
	cl, err := cfg.Kafka.client(kgo.ClientID("tierpush-demo"))
	if err != nil {
		return err
	}
	defer cl.Close()
	names := cfg.Kafka.names()
	if err := demoWaitTopics(ctx, cfg, kadm.NewClient(cl), names, log); err != nil || ctx.Err() != nil {
		return err
	}
	return demoProduce(ctx, cfg, cl, names, subs, stdout, log)
}

// demoSubscribe creates the subscriptions, retrying while the simulator is
// not up yet (compose starts everything at once).
func demoSubscribe(ctx context.Context, cfg demoConfig, log *slog.Logger) ([]pushsim.Subscription, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	deadline := time.Now().Add(cfg.Wait)
	subs := make([]pushsim.Subscription, 0, cfg.Subscriptions)
	for i := 0; i < cfg.Subscriptions; {
		sub, err := demoSubscribeAt(ctx, hc, cfg.Sim, demoScripts[i%len(demoScripts)])
		switch {
		case err == nil:
			subs = append(subs, sub)
			i++
			continue
		case ctx.Err() != nil:
			return nil, nil
		case errors.Is(err, errDemoSimRefused) || time.Now().After(deadline):
			return nil, fmt.Errorf("subscribe at %s: %w", cfg.Sim, err)
		}
		log.Info("waiting for the push simulator", "sim", cfg.Sim, "err", err)
		if !demoPause(ctx, time.Second) {
			return nil, nil
		}
	}
	log.Info("subscribed", "subscriptions", len(subs), "sim", cfg.Sim)
	return subs, nil
}

// errDemoSimRefused marks an answer of the simulator that retrying cannot fix.
var errDemoSimRefused = errors.New("simulator refused the subscription")

func demoSubscribeAt(ctx context.Context, hc *http.Client, sim, script string) (pushsim.Subscription, error) {
	u := strings.TrimRight(sim, "/") + "/subscribe"
	if script != "" {
		u += "?script=" + url.QueryEscape(script)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return pushsim.Subscription{}, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return pushsim.Subscription{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return pushsim.Subscription{}, err
	}
	if resp.StatusCode != http.StatusCreated {
		return pushsim.Subscription{}, fmt.Errorf("%w: %s: %s", errDemoSimRefused, resp.Status, strings.TrimSpace(string(body)))
	}
	var s struct {
		ID       string `json:"id"`
		Endpoint string `json:"endpoint"`
		Keys     struct {
			P256dh string `json:"p256dh"`
			Auth   string `json:"auth"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(body, &s); err != nil || s.Endpoint == "" || s.Keys.P256dh == "" || s.Keys.Auth == "" {
		return pushsim.Subscription{}, fmt.Errorf("%w: not a subscription: %.80q", errDemoSimRefused, body)
	}
	return pushsim.Subscription{ID: s.ID, Endpoint: s.Endpoint, P256dh: s.Keys.P256dh, Auth: s.Keys.Auth}, nil
}

// demoWaitTopics waits until the tier topics exist: the processor or
// `processor topics ensure` creates them, with the partitions and retention
// the operator chose; the demo does not.
func demoWaitTopics(ctx context.Context, cfg demoConfig, adm *kadm.Client, names topology.Names, log *slog.Logger) error {
	deadline := time.Now().Add(cfg.Wait)
	var want []string
	for _, t := range tiers.All {
		want = append(want, names.Tier(t))
	}
	for {
		// A fresh metadata request each time, not kadm's cached answer.
		details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), want...)
		missing := want
		if err == nil {
			missing = nil
			for _, t := range want {
				if d, ok := details[t]; !ok || d.Err != nil {
					missing = append(missing, t)
				}
			}
			if len(missing) == 0 {
				return nil
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("topics %s do not exist (start the processor or run processor topics ensure)", strings.Join(missing, ", "))
			}
			return fmt.Errorf("wait for tier topics: %w", err)
		}
		log.Info("waiting for the tier topics", "missing", missing, "err", err)
		if !demoPause(ctx, time.Second) {
			return nil
		}
	}
}

// demoProduce produces events at cfg.Rate until cfg.Count or ctx ends, then
// flushes and prints what it produced.
func demoProduce(ctx context.Context, cfg demoConfig, cl *kgo.Client, names topology.Names, subs []pushsim.Subscription, stdout io.Writer, log *slog.Logger) error {
	var (
		perTier  [3]int // by tier, tier1 first
		failed   atomic.Int64
		firstMu  sync.Mutex
		firstErr error
	)
	done := func(_ *kgo.Record, err error) {
		if err == nil {
			return
		}
		if failed.Add(1) == 1 {
			firstMu.Lock()
			firstErr = err
			firstMu.Unlock()
			log.Warn("produce failed", "err", err)
		}
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.Rate))
	defer tick.Stop()
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
	start := time.Now().Unix()
	n := 0
loop:
	for cfg.Count == 0 || n < cfg.Count {
		select {
		case <-ctx.Done():
			break loop
		case <-progress.C:
			log.Info("producing", "events", n, "failed", failed.Load())
			continue
		case <-tick.C:
		}
		t := demoTier(n)
		// Round robin: every subscription, and so every script, gets an
		// event within the first len(subs) events.
		sub := subs[n%len(subs)]
		v := sampleEvent(fmt.Sprintf("demo-%d-%d", start, n), sub, false)
		cl.Produce(ctx, &kgo.Record{Topic: names.Tier(t), Key: []byte(sub.ID), Value: v}, done)
		perTier[t-tiers.Tier1]++
		n++
	}
	// Interrupted or done: deliver what was handed to the client.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return fmt.Errorf("flush produced events: %w", err)
	}
	fmt.Fprintf(stdout, "produced %d events (tier1 %d, tier2 %d, tier3 %d) for %d subscriptions\n",
		int64(n)-failed.Load(), perTier[0], perTier[1], perTier[2], len(subs))
	if f := failed.Load(); f > 0 {
		firstMu.Lock()
		defer firstMu.Unlock()
		return fmt.Errorf("%d of %d events failed to produce: %w", f, n, firstErr)
	}
	return nil
}

// demoTier spreads events over the tiers like upstream traffic: tier1 20%,
// tier2 30%, tier3 50%, deterministically in every run of 10.
func demoTier(n int) tiers.Tier {
	switch r := n % 10; {
	case r < 2:
		return tiers.Tier1
	case r < 5:
		return tiers.Tier2
	}
	return tiers.Tier3
}

// demoPause waits d, or less when ctx ends first; it reports whether ctx is
// still live.
func demoPause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
