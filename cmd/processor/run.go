package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/admin"
	"github.com/tierpush/tierpush/internal/broker"
	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// runProcessor is `processor run`: the pipeline.
func runProcessor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	fs := newFlagSet("processor run", stderr)
	cfg.register(fs)
	fs.Usage = runUsage(fs)
	if err := parseFlags(fs, args, withTiers(&cfg.Tiers)); err != nil {
		return err
	}
	fs.Visit(func(f *flag.Flag) { cfg.Embedded = cfg.Embedded || f.Name == "embedded-addr" })
	if err := cfg.finish(); err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	warnDeprecated(fs, log)
	if cfg.Dev {
		return runDev(ctx, cfg, log, stdout)
	}
	return serve(ctx, cfg, log, nil)
}

// serve runs the pipeline until ctx ends. ready, when set, is called with
// the running processor (the dev mode's status table reads it).
func serve(ctx context.Context, cfg Config, log *slog.Logger, ready func(*pipeline.Processor)) error {
	names := topology.Names{Prefix: cfg.TopicPrefix}
	policy := cfg.Tiers

	// Every address the processor serves, for the start line.
	var serving []any
	if len(cfg.Brokers) == 0 {
		c, err := broker.Start(broker.Config{Addr: cfg.EmbeddedAddr, DataDir: cfg.DataDir, Partitions: int(cfg.Topics.Partitions)}, log)
		if err != nil {
			return err
		}
		defer c.Close()
		cfg.Brokers = c.ListenAddrs()
		serving = append(serving, "embedded_broker", strings.Join(cfg.Brokers, ","))
	}
	kopts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID("tierpush"),
		kgo.WithLogger(newKafkaLogger(log.With("component", "kafka"))),
	}
	sec, err := cfg.Kafka.opts() // TLS and SASL (kafka.go)
	if err != nil {
		return usageError(err)
	}
	kopts = append(kopts, sec...)
	if cfg.Kafka.TLSInsecureSkipVerify {
		log.Warn("kafka TLS certificates are not verified (--kafka-tls-insecure-skip-verify): test clusters only")
	}
	if err := ensureTopics(ctx, kopts, names, &policy, cfg.Topics, log); err != nil {
		return err
	}
	dropped, err := droppedSteps(ctx, kopts, names, &policy, cfg.Group, log)
	if err != nil {
		return err
	}

	guard, err := cfg.Endpoints.guard(cfg.AllowInsecure)
	if err != nil {
		return usageError(err)
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{DialContext: guard.DialContext(dialer), SendTimeout: cfg.SendTimeout})
	defer hc.CloseIdleConnections()
	sender, err := dispatch.New(dispatch.Config{VAPID: cfg.vapid(), Apps: cfg.apps, Timeout: cfg.SendTimeout}, hc)
	if err != nil {
		return usageError(err)
	}
	if len(cfg.apps) > 0 {
		log.Info("vapid identities", "default", cfg.hasDefaultVAPID(), "apps", appNames(cfg.apps))
	}
	keys, err := cfg.hmacKeys()
	if err != nil {
		return usageError(err)
	}
	signer, err := topology.NewSigner(keys...)
	if err != nil {
		return usageError(fmt.Errorf("--hmac-key: %w", err))
	}

	pc := pipeline.DefaultConfig()
	pc.Names = names
	pc.Policy = policy
	pc.ExtraInputs = dropped
	pc.Group = cfg.Group
	cfg.Membership.apply(&pc, cfg.InstanceID)
	pc.SharePacing = cfg.SharePacing
	pc.Instance = cfg.InstanceID
	pc.MaxInFlight = cfg.MaxInFlight
	pc.MaxHeld = cfg.MaxHeld
	pc.RetryLateness = cfg.RetryLateness
	pc.Jitter = cfg.RetryJitter
	pc.DrainTimeout = cfg.DrainTimeout
	pc.CommitInterval = cfg.CommitInterval
	pc.Pacing = cfg.Pacing
	pc.Rules = event.DefaultRules()
	pc.Rules.DefaultTTL = cfg.DefaultTTL
	pc.Rules.Guard = guard
	tp, stopTracing, err := telemetry.NewTracerProvider(ctx)
	if err != nil {
		return usageError(err)
	}
	defer flush(stopTracing, log)
	metrics, err := telemetry.NewMetrics(ctx)
	if err != nil {
		return err
	}
	identities := slices.Sorted(maps.Keys(cfg.apps))
	if cfg.hasDefaultVAPID() {
		identities = append(identities, "default")
	}
	metrics.VAPIDIdentities(identities...)
	if err := metrics.BuildInfo(version, buildCommit(), runtime.Version()); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	defer flush(metrics.Shutdown, log)
	// The pacer is made with the pipeline; the gauges read it once it is.
	var lanes atomic.Pointer[func() []pacing.LaneState]
	pacingTelemetry, err := metrics.NewPacing(log, func() []pacing.LaneState {
		if f := lanes.Load(); f != nil {
			return (*f)()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	popts := []pipeline.Option{pipeline.WithHooks(metrics), pipeline.WithPacingObserver(pacingTelemetry.Observe)}
	if telemetry.TracingEnabled() {
		popts = append(popts, telemetry.PipelineTracing(tp, "tierpush", cfg.Group)...)
		log.Info("tracing on", "endpoint", firstEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	// The consumer's client only: kprom registers its collectors once, and
	// the pacing topic's client is not worth a second set.
	popts = append(popts, pipeline.WithClientOpts(kgo.WithHooks(metrics.KafkaMeter())))
	p, err := pipeline.New(pc, log, sender, signer, kopts, popts...)
	if err != nil {
		return fmt.Errorf("start pipeline: %w", err)
	}
	pacerLanes := p.Pacer().Lanes
	lanes.Store(&pacerLanes)
	if err := metrics.Observe(telemetry.Gauges{
		Lanes:           p.Pacer().Lanes,
		InFlight:        p.InFlight,
		InFlightLimit:   p.InFlightLimit,
		ProduceFailures: p.ProduceFailures,
		Stuck:           p.Stuck,
		Lag:             p.Lag,
		Held:            p.Held,
	}); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if cfg.HTTPAddr != "" {
		stopHTTP, addr, err := serveHTTP(cfg.HTTPAddr, p, metrics.Handler(), log)
		if err != nil {
			return usageError(fmt.Errorf("--http-addr: %w", err))
		}
		defer stopHTTP()
		serving = append(serving, "http", "http://"+addr+" (/metrics /healthz /readyz)")
	}
	if ready != nil {
		ready(p)
	}
	log.Info("processor running", append([]any{"brokers", cfg.Brokers, "group", cfg.Group,
		"topics", len(names.Inputs(&policy)) + len(dropped)}, serving...)...)
	if err := p.Run(ctx); err != nil {
		return err
	}
	log.Info("processor stopped cleanly")
	return nil
}

// ensureTopics creates missing topics before the consumer starts, so it
// finds them on its first metadata fetch.
func ensureTopics(ctx context.Context, kopts []kgo.Opt, names topology.Names, p *tiers.Policy, spec admin.Spec, log *slog.Logger) error {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	states, err := admin.Ensure(ctx, kadm.NewClient(cl), names, p, spec)
	if err != nil {
		return fmt.Errorf("ensure topics: %w", err)
	}
	for _, s := range states {
		if s.Created {
			log.Info("created topic", "topic", s.Topic, "partitions", s.Partitions)
		}
		if s.Drift != "" {
			log.Warn("topic drift", "topic", s.Topic, "drift", s.Drift)
		}
	}
	return nil
}

// droppedSteps are the retry topics of steps no longer on a ladder that
// still hold records the group has not consumed: the pipeline consumes them
// too, so that changing a ladder loses nothing that waits on an old step.
func droppedSteps(ctx context.Context, kopts []kgo.Opt, names topology.Names, p *tiers.Policy, group string, log *slog.Logger) ([]string, error) {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	steps, err := admin.DroppedSteps(ctx, kadm.NewClient(cl), names, p, group)
	if err != nil {
		return nil, fmt.Errorf("find steps dropped from the ladders: %w", err)
	}
	var topics []string
	for _, s := range steps {
		log.Info("consuming a step dropped from its ladder until it is empty; its records continue on the current ladder",
			"topic", s.Topic, "records", s.Pending)
		topics = append(topics, s.Topic)
	}
	return topics, nil
}

// serveHTTP serves /healthz, /readyz and /metrics on addr; bound is the
// address it listens on (a port 0 resolved).
func serveHTTP(addr string, p *pipeline.Processor, metrics http.Handler, log *slog.Logger) (stop func(), bound string, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !p.Ready() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", metrics)
	if os.Getenv("TIERPUSH_PPROF") != "" {
		// CPU and heap profiles for `go run ./cmd/bench --profile`. Off by
		// default; never /debug/pprof/cmdline, which would show secret flags.
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		for _, name := range []string{"heap", "allocs", "goroutine"} {
			mux.Handle("GET /debug/pprof/"+name, pprof.Handler(name))
		}
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, ln.Addr().String(), nil
}

// newDevIdentity makes a throwaway VAPID key pair and HMAC key for --dev.
func newDevIdentity(cfg *Config) error {
	if cfg.VAPIDPrivateKey == "" {
		priv, pub, err := webpush.GenerateVAPIDKeys()
		if err != nil {
			return fmt.Errorf("generate vapid keys: %w", err)
		}
		cfg.VAPIDPrivateKey, cfg.VAPIDPublicKey = priv, pub
		if cfg.VAPIDSubject == "" {
			cfg.VAPIDSubject = "mailto:dev@tierpush.invalid"
		}
	}
	if cfg.HMACKey == "" {
		k := make([]byte, 32)
		rand.Read(k)
		cfg.HMACKey = fmt.Sprintf("%x", k)
	}
	return nil
}

// flush runs a telemetry shutdown with a bound, logging a failure.
func flush(shutdown func(context.Context) error, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		log.Warn("telemetry flush", "err", err)
	}
}

func firstEnv(keys ...string) string {
	for _, k := range keys {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return ""
}
