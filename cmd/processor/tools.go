package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/admin"
	"github.com/tierpush/tierpush/internal/broker"
	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/netguard"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// kafkaFlags are the connection flags every tool shares.
type kafkaFlags struct {
	Brokers     listFlag
	TopicPrefix string
	Security    kafkaSecurity // TLS and SASL (kafka.go)
}

func (k *kafkaFlags) register(fs *flag.FlagSet) {
	fs.Var(&k.Brokers, "brokers", "Kafka seed brokers (default 127.0.0.1:9092, the embedded broker)")
	fs.StringVar(&k.TopicPrefix, "topic-prefix", topology.DefaultPrefix, "prefix of every topic name")
	k.Security.register(fs)
}

// brokers are the seed brokers: --brokers, or the embedded broker's
// default address.
func (k *kafkaFlags) brokers() []string {
	if len(k.Brokers) == 0 {
		return []string{"127.0.0.1:9092"}
	}
	return k.Brokers
}

func (k *kafkaFlags) client(extra ...kgo.Opt) (*kgo.Client, error) {
	brokers := k.brokers()
	sec, err := k.security()
	if err != nil {
		return nil, err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("tierpush-cli")}, sec...)
	cl, err := kgo.NewClient(append(opts, extra...)...)
	if err != nil {
		return nil, usageError(fmt.Errorf("--brokers: %w", err))
	}
	return cl, nil
}

func (k *kafkaFlags) names() topology.Names { return topology.Names{Prefix: k.TopicPrefix} }

// runBroker is `processor broker`: only the embedded broker, with every
// topic created, until ctx ends.
func runBroker(ctx context.Context, args []string, _, stderr io.Writer) error {
	cfg := DefaultConfig()
	fs := newFlagSet("processor broker", stderr)
	fs.StringVar(&cfg.EmbeddedAddr, "embedded-addr", cfg.EmbeddedAddr, "where the embedded broker listens")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "embedded broker storage (survives restarts)")
	fs.StringVar(&cfg.TopicPrefix, "topic-prefix", cfg.TopicPrefix, "prefix of every topic name")
	fs.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "text or json")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	registerTopicFlags(fs, &cfg.Topics)
	if err := parseFlags(fs, args, withTiers(&cfg.Tiers)); err != nil {
		return err
	}
	if err := cfg.Topics.Validate(); err != nil {
		return usageError(err)
	}
	log := newLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	c, err := broker.Start(broker.Config{Addr: cfg.EmbeddedAddr, DataDir: cfg.DataDir, Partitions: int(cfg.Topics.Partitions)}, log)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := ensureTopics(ctx, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, topology.Names{Prefix: cfg.TopicPrefix}, &cfg.Tiers, cfg.Topics, log); err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("embedded broker stopping")
	return nil
}

// runVAPID is `processor vapid`: a new key pair as env lines, or with
// --app as an entry of the --vapid-keys file.
func runVAPID(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("processor vapid", stderr)
	subject := fs.String("subject", "mailto:ops@example.com", "VAPID subject to print alongside: mailto:address or an https URL (without --app a bare address also, read as mailto:)")
	app := fs.String("app", "", "print the pair as this app's entry of a --vapid-keys file instead of env lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// What it prints must be what the processor takes: the default
	// identity's subject may be a bare address, an app's may not.
	if err := dispatch.ValidateSubject(*subject, *app != ""); err != nil {
		return usageError(fmt.Errorf("--subject %q: %w", truncateFlag(*subject), err))
	}
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		return fmt.Errorf("generate vapid keys: %w", err)
	}
	v := dispatch.VAPID{PublicKey: pub, PrivateKey: priv, Subject: *subject}
	if *app == "" {
		if err := dispatch.ValidateVAPID(v); err != nil {
			return fmt.Errorf("generated key pair: %w", err)
		}
		fmt.Fprintf(stdout, "VAPID_PUBLIC_KEY=%s\nVAPID_PRIVATE_KEY=%s\nVAPID_SUBJECT=%s\n", pub, priv, *subject)
		return nil
	}
	if err := dispatch.ValidateApp(*app, v); err != nil {
		return usageError(fmt.Errorf("--app: %w", err))
	}
	fmt.Fprintf(stdout, "%s:\n  public_key: %s\n  private_key: %s\n  subject: %q\n", *app, pub, priv, *subject)
	return nil
}

// runSend is `processor send`: produce one event into a tier topic, from a
// JSON file or from flags.
func runSend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var k kafkaFlags
	fs := newFlagSet("processor send", stderr)
	k.register(fs)
	tier := fs.String("tier", "tier1", "tier1, tier2 or tier3")
	file := fs.String("file", "", "JSON event file (- for stdin); otherwise the event is built from the flags below")
	id := fs.String("id", "", "event id (default: generated)")
	endpoint := fs.String("endpoint", "", "subscription endpoint URL")
	p256dh := fs.String("p256dh", "", "subscription p256dh key, base64url")
	auth := fs.String("auth", "", "subscription auth secret, base64url")
	payload := fs.String("payload", "", "message text")
	ttl := fs.Int("ttl", 3600, "TTL in seconds")
	urgency := fs.String("urgency", "", "very-low, low, normal or high")
	topic := fs.String("topic", "", "RFC 8030 topic (collapse key)")
	app := fs.String("app", "", "the app whose VAPID identity signs it (--vapid-keys of the processor); default: the default identity")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the broker to take the event")
	// The processor's endpoint policy, so that send refuses what the
	// processor would dead-letter as endpoint_blocked.
	var insecure listFlag
	var endpoints endpointPolicy
	fs.Var(&insecure, "allow-insecure-endpoint", "host:port that may be reached over http or on a private address (tests, the simulator); repeatable")
	endpoints.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := endpoints.validate(); err != nil {
		return usageError(err)
	}
	guard, err := endpoints.guard(insecure)
	if err != nil {
		return usageError(err)
	}
	if *timeout <= 0 {
		return usageError(fmt.Errorf("--timeout: %s, want a positive duration like 10s", *timeout))
	}
	t, err := tiers.Parse(*tier)
	if err != nil {
		return usageError(fmt.Errorf("--tier: %w", err))
	}
	if *app != "" {
		if *file != "" {
			return usageError(errors.New(`--app: give "app" in the --file event instead`))
		}
		if err := event.CheckApp(*app); err != nil {
			return usageError(fmt.Errorf("--app: %w", err))
		}
	}
	var value []byte
	switch {
	case *file == "-":
		value, err = io.ReadAll(io.LimitReader(os.Stdin, event.MaxEventSize+1))
	case *file != "":
		value, err = os.ReadFile(*file)
	default:
		if *id == "" {
			*id = fmt.Sprintf("send-%d", time.Now().UnixNano())
		}
		e := map[string]any{
			"id":           *id,
			"subscription": map[string]any{"endpoint": *endpoint, "keys": map[string]string{"p256dh": *p256dh, "auth": *auth}},
			"payload":      *payload,
			"ttl":          *ttl,
		}
		if *urgency != "" {
			e["urgency"] = *urgency
		}
		if *topic != "" {
			e["topic"] = *topic
		}
		if *app != "" {
			e["app"] = *app
		}
		value, err = json.Marshal(e)
	}
	if err != nil {
		return usageError(fmt.Errorf("--file: %w", err))
	}
	// Check it here as the processor will, so a typo or a blocked
	// endpoint fails now, not in the DLQ.
	rules := event.DefaultRules()
	rules.Guard = guard
	ev, err := event.Decode(value, time.Now(), rules)
	var blocked *netguard.BlockedError
	switch {
	case errors.As(err, &blocked):
		return usageError(fmt.Errorf("event: %w: the processor would dead-letter it as endpoint_blocked (a test server or the simulator: --allow-insecure-endpoint host:port)", err))
	case err != nil:
		return usageError(fmt.Errorf("event: %w", err))
	}
	cl, err := k.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	rec := &kgo.Record{Topic: k.names().Tier(t), Key: []byte(ev.EndpointHash()), Value: value}
	pctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if err := cl.ProduceSync(pctx, rec).FirstErr(); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("produce to %s: no broker of %s took it within %s (--timeout)", rec.Topic, strings.Join(k.brokers(), ","), *timeout)
		}
		return fmt.Errorf("produce to %s: %w", rec.Topic, err)
	}
	fmt.Fprintf(stdout, "produced %s to %s/%d@%d\n", ev.ID, rec.Topic, rec.Partition, rec.Offset)
	return nil
}

// runTopics is `processor topics ensure`.
func runTopics(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stdout, "usage: processor topics ensure [flags]; processor topics ensure --help lists the flags")
		return nil
	}
	if len(args) == 0 || args[0] != "ensure" {
		return usageError(errors.New("usage: processor topics ensure [flags]"))
	}
	var k kafkaFlags
	var policy tiers.Policy
	spec := admin.DefaultSpec()
	fs := newFlagSet("processor topics ensure", stderr)
	k.register(fs)
	registerTopicFlags(fs, &spec)
	if err := parseFlags(fs, args[1:], withTiers(&policy)); err != nil {
		return err
	}
	if err := spec.Validate(); err != nil {
		return usageError(err)
	}
	cl, err := k.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	states, err := admin.Ensure(ctx, kadm.NewClient(cl), k.names(), &policy, spec)
	if err != nil {
		return err
	}
	drift := 0
	for _, s := range states {
		status := "ok"
		switch {
		case s.Created:
			status = "created"
		case s.Drift != "":
			status, drift = "drift: "+s.Drift, drift+1
		}
		fmt.Fprintf(stdout, "%-32s %4d partitions  %s\n", s.Topic, s.Partitions, status)
	}
	if drift > 0 {
		return fmt.Errorf("%d topics differ from the spec", drift)
	}
	return nil
}

// runPushsim is `processor pushsim`: the push service simulator.
func runPushsim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := pushsim.DefaultConfig()
	cfg.KeepDeliveries = 10_000 // bounded memory for a long-running simulator
	fs := newFlagSet("processor pushsim", stderr)
	cfg.RegisterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError(err)
	}
	s, err := pushsim.New(cfg, newLogger(stderr, "text", "info"))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "push simulator on %s (POST /subscribe for a subscription, GET /stats)\n", cfg.Addr)
	return s.ListenAndServe(ctx)
}
