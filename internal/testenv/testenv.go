// Package testenv starts a whole tierpush pipeline for tests and
// benchmarks: the embedded broker (kfake), the push simulator and a
// processor, on loopback or, for testing/synctest, on kfake's in-memory
// VirtualNetwork so that minutes of retry delays pass in milliseconds. It is
// imported only by tests and benchmarks.
package testenv

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"sync"
	"testing"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/tierpush/tierpush/internal/admin"
	"github.com/tierpush/tierpush/internal/broker"
	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/netguard"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// HMACKey is the retry-record key of test environments.
var HMACKey = []byte("testenv-hmac-key-0123456789abcdef")

// Options shape an Env.
type Options struct {
	// Virtual runs everything on an in-memory network: required inside a
	// testing/synctest bubble.
	Virtual bool
	// Sim configures the push simulator; zero means pushsim.DefaultConfig.
	Sim *pushsim.Config
	// MoreSims starts further simulators, each its own push service
	// origin (Env.Sims[1:]).
	MoreSims []pushsim.Config
	// Partitions of every topic; default 4.
	Partitions int
	// Brokers runs a cluster of this many brokers on loopback, each
	// leading some partitions, with the embedded broker's group settings
	// (broker.GroupConfigs); default 1, the embedded broker itself. Not
	// with Virtual, KafkaTLS or SASL.
	Brokers int
	// Pipeline adjusts the processor's config.
	Pipeline func(*pipeline.Config)
	// NoProcessor starts only the broker and the simulator.
	NoProcessor bool
	// Log receives logs; default discard.
	Log io.Writer
	// Hooks observe the processor.
	Hooks deliver.Hooks
	// ProcessorOptions are passed to pipeline.New.
	ProcessorOptions []pipeline.Option
	// LogLevel is the level of what Log receives; default slog.LevelWarn.
	LogLevel slog.Leveler
	// KafkaTLS serves the broker over mutual TLS with a throwaway PKI
	// (Env.PKI); every client of the Env dials with TLS and the client
	// certificate.
	KafkaTLS bool
	// SASL, when set, turns on SASL at the broker with this one user, and
	// every client of the Env authenticates as it.
	SASL *broker.User
	// BrokerConfigs are broker-level configs such as "message.max.bytes".
	BrokerConfigs map[string]string
	// GuardDial makes the push client dial through the processor's SSRF
	// policy (Rules.Guard.DialContext), as the processor command does, so
	// the address is checked again at dial time. Loopback only: the policy
	// dials real sockets, not the in-memory network.
	GuardDial bool
	// GuardOptions add to the processor's SSRF policy, which allows the
	// simulators insecure.
	GuardOptions []netguard.Option
	// KafkaLogs sends the processor's kgo client logs to Log too, as the
	// processor command does.
	KafkaLogs bool
	// Apps are named apps given a VAPID identity each (Env.Apps), beside
	// the default one (Env.VAPID), as --vapid-keys gives them.
	Apps []string
	// Policy are the retry ladders (Env.Policy): the topics are created
	// for them and the processor follows them. Default tiers.DefaultPolicy.
	Policy *tiers.Policy
}

// Env is a running pipeline.
type Env struct {
	tb      testing.TB
	VN      *kfake.VirtualNetwork
	Cluster *kfake.Cluster
	Sim     *pushsim.Server   // Sims[0]
	Sims    []*pushsim.Server // one per origin
	Names   topology.Names
	Policy  tiers.Policy
	Brokers []string
	Client  *kgo.Client // for producing events and reading results
	Signer  *topology.Signer
	VAPID   dispatch.VAPID
	// Apps are the identities of Options.Apps, by name.
	Apps     map[string]dispatch.VAPID
	SimAddr  string
	SimAddrs []string
	// PKI signed the broker's certificate when Options.KafkaTLS is set.
	PKI *PKI

	// clientTLS is every Kafka client's TLS config (PKI's client
	// certificate), built once; dialers clone it.
	clientTLS *tls.Config
	proc      *pipeline.Processor
	stop      func() error
	log       *slog.Logger
	opts      Options
}

// Start starts an Env and registers its cleanup.
func Start(tb testing.TB, o Options) *Env {
	tb.Helper()
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	w := o.Log
	if w == nil {
		w = io.Discard
	}
	e := &Env{tb: tb, Names: topology.Names{Prefix: topology.DefaultPrefix}, Policy: tiers.DefaultPolicy(), opts: o}
	if o.Policy != nil {
		e.Policy = *o.Policy
	}
	level := o.LogLevel
	if level == nil {
		level = slog.LevelWarn
	}
	e.log = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
	listen := net.Listen
	if o.Virtual {
		e.VN = new(kfake.VirtualNetwork)
		listen = e.VN.Listen
	}

	addr := "127.0.0.1:0"
	if o.Virtual {
		addr = "127.0.0.1:9092" // the virtual network has no ephemeral ports
	}
	bc := broker.Config{Addr: addr, Partitions: o.Partitions, Listen: listen, Configs: o.BrokerConfigs}
	if o.KafkaTLS {
		e.PKI = NewPKI(tb)
		e.clientTLS = e.PKI.ClientConfig(tb)
		bc.TLS = e.PKI.ServerConfig(tb, true)
	}
	if o.SASL != nil {
		bc.Users = []broker.User{*o.SASL}
	}
	var c *kfake.Cluster
	var err error
	if o.Brokers > 1 {
		if o.Virtual || o.KafkaTLS || o.SASL != nil {
			tb.Fatal("testenv: Brokers > 1 runs plain brokers on loopback")
		}
		configs := maps.Clone(broker.GroupConfigs)
		maps.Copy(configs, o.BrokerConfigs)
		c, err = kfake.NewCluster(kfake.NumBrokers(o.Brokers), kfake.DefaultNumPartitions(o.Partitions), kfake.BrokerConfigs(configs))
	} else {
		c, err = broker.Start(bc, e.log)
	}
	if err != nil {
		tb.Fatalf("start broker: %v", err)
	}
	e.Cluster = c
	tb.Cleanup(c.Close)
	e.Brokers = c.ListenAddrs()
	if o.Virtual {
		e.Brokers = []string{"127.0.0.1:9092"}
	}

	simCfg := pushsim.DefaultConfig()
	if o.Sim != nil {
		simCfg = *o.Sim
	}
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		tb.Fatal(err)
	}
	e.VAPID = dispatch.VAPID{PublicKey: pub, PrivateKey: priv, Subject: "mailto:ops@tierpush.test"}
	for _, app := range o.Apps {
		priv, pub, err := webpush.GenerateVAPIDKeys()
		if err != nil {
			tb.Fatal(err)
		}
		if e.Apps == nil {
			e.Apps = make(map[string]dispatch.VAPID)
		}
		e.Apps[app] = dispatch.VAPID{PublicKey: pub, PrivateKey: priv, Subject: "mailto:" + app + "@tierpush.test"}
	}
	for i, sc := range append([]pushsim.Config{simCfg}, o.MoreSims...) {
		sc.VAPIDPublicKey = pub
		sim, err := pushsim.New(sc, e.log)
		if err != nil {
			tb.Fatalf("push simulator: %v", err)
		}
		addr := "127.0.0.1:0"
		if o.Virtual {
			addr = fmt.Sprintf("127.0.0.1:%d", 8080+i)
		}
		ln, err := listen("tcp", addr)
		if err != nil {
			tb.Fatalf("simulator listen: %v", err)
		}
		if !o.Virtual {
			addr = ln.Addr().String()
		}
		sim.SetBaseURL("http://" + addr)
		go sim.Serve(ln)
		tb.Cleanup(func() { sim.Close(context.Background()) })
		e.Sims = append(e.Sims, sim)
		e.SimAddrs = append(e.SimAddrs, addr)
	}
	e.Sim, e.SimAddr = e.Sims[0], e.SimAddrs[0]

	e.Signer, err = topology.NewSigner(HMACKey)
	if err != nil {
		tb.Fatal(err)
	}
	e.Client, err = kgo.NewClient(e.kgoOpts()...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Client.Close)
	e.ensureTopics()
	if !o.NoProcessor {
		e.StartProcessor()
	}
	return e
}

// ensureTopics creates the topics of the Env's ladders.
func (e *Env) ensureTopics() {
	e.tb.Helper()
	spec := admin.DefaultSpec()
	spec.Partitions = int32(e.opts.Partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.Ensure(ctx, kadmClient(e.Client), e.Names, &e.Policy, spec); err != nil {
		e.tb.Fatalf("ensure topics: %v", err)
	}
}

// SetPolicy changes the ladders, as a new --config would: the topics of
// their steps are created, and the next StartProcessor follows them (and
// consumes the steps dropped from them that still hold records).
func (e *Env) SetPolicy(p tiers.Policy) {
	e.tb.Helper()
	e.Policy = p
	e.ensureTopics()
}

// KafkaOpts are the options of every Kafka client of the Env: seed brokers,
// the in-memory dialer, TLS and SASL as the Options asked.
func (e *Env) KafkaOpts() []kgo.Opt { return e.kgoOpts() }

func (e *Env) kgoOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(e.Brokers...), kgo.FetchMaxWait(250 * time.Millisecond)}
	tc := e.clientTLS
	switch {
	case e.VN != nil && tc != nil:
		// kgo.DialTLSConfig cannot be combined with kgo.Dialer: wrap the
		// in-memory connection in TLS ourselves.
		opts = append(opts, kgo.Dialer(e.DialTLS))
	case e.VN != nil:
		opts = append(opts, kgo.Dialer(e.VN.DialContext))
	case tc != nil:
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if u := e.opts.SASL; u != nil {
		opts = append(opts, kgo.SASL(saslMechanism(e.tb, *u)))
	}
	return opts
}

// DialTLS dials the virtual network's broker with the Env's client
// certificate, for a Kafka client of a KafkaTLS Env.
//
// Closing the connection drops it at once, as a reset TCP connection
// would, without TLS's close_notify first. net.Pipe has no socket buffer:
// the alert is written only once the broker reads, and kfake reads a
// connection's next request only after writing its last response, which
// a client closing mid-fetch no longer reads. crypto/tls bounds that write
// with a 5 s write deadline, but kgo clears the connection's write
// deadline when the write before it returns; when Close came between that
// write's return and the clear, the alert had no deadline left and the
// client's Close, kgo's Close with it, waited for good (about one
// TestLedgerTLSSCRAM in 300 with the race detector).
func (e *Env) DialTLS(ctx context.Context, network, host string) (net.Conn, error) {
	if e.VN == nil || e.clientTLS == nil {
		return nil, errors.New("testenv: DialTLS needs a Virtual, KafkaTLS Env")
	}
	raw, err := e.VN.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	c := e.clientTLS.Clone()
	c.ServerName, _, _ = net.SplitHostPort(host)
	return resetOnClose{tls.Client(raw, c), raw}, nil
}

// resetOnClose is a TLS connection whose Close closes the connection under
// it first (DialTLS).
type resetOnClose struct {
	*tls.Conn
	raw net.Conn
}

func (c resetOnClose) Close() error {
	err := c.raw.Close()
	_ = c.Conn.Close() // its close_notify fails at once on the closed pipe
	return err
}

func saslMechanism(tb testing.TB, u broker.User) sasl.Mechanism {
	switch u.Method {
	case "PLAIN":
		return plain.Auth{User: u.Name, Pass: u.Password}.AsMechanism()
	case "SCRAM-SHA-256":
		return scram.Auth{User: u.Name, Pass: u.Password}.AsSha256Mechanism()
	case "SCRAM-SHA-512":
		return scram.Auth{User: u.Name, Pass: u.Password}.AsSha512Mechanism()
	}
	tb.Fatalf("testenv: unknown SASL method %q", u.Method)
	return nil
}

// HTTPClient returns a push client that reaches the simulator.
func (e *Env) HTTPClient() dispatch.HTTPConfig {
	if e.VN != nil {
		return dispatch.HTTPConfig{DialContext: e.VN.DialContext}
	}
	return dispatch.HTTPConfig{}
}

// PipelineConfig is the processor configuration of this Env.
func (e *Env) PipelineConfig() pipeline.Config {
	pc := pipeline.DefaultConfig()
	guard, err := netguard.New(append([]netguard.Option{netguard.AllowInsecure(e.SimAddrs...)}, e.opts.GuardOptions...)...)
	if err != nil {
		e.tb.Fatal(err)
	}
	pc.Rules.Guard = guard
	pc.Policy = e.Policy
	if e.opts.Pipeline != nil {
		e.opts.Pipeline(&pc)
	}
	return pc
}

// StartProcessor starts a processor (again, after StopProcessor).
func (e *Env) StartProcessor() *pipeline.Processor {
	e.tb.Helper()
	p, stop := e.StartMember()
	e.proc, e.stop = p, stop
	return p
}

// StartMember starts one more processor in the group, beside the Env's
// own; stop shuts it down gracefully (also at the end of the test) and
// returns Run's error.
func (e *Env) StartMember() (p *pipeline.Processor, stop func() error) {
	e.tb.Helper()
	pc := e.PipelineConfig()
	pc.ExtraInputs = append(pc.ExtraInputs, e.droppedSteps(pc)...)
	hcfg := e.HTTPClient()
	if e.opts.GuardDial {
		if e.VN != nil {
			e.tb.Fatal("testenv: GuardDial needs the loopback network, not Virtual")
		}
		hcfg.DialContext = pc.Rules.Guard.DialContext(&net.Dialer{Timeout: 5 * time.Second})
	}
	hc := dispatch.NewHTTPClient(hcfg)
	e.tb.Cleanup(hc.CloseIdleConnections)
	sender, err := dispatch.New(dispatch.Config{VAPID: e.VAPID, Apps: e.Apps}, hc)
	if err != nil {
		e.tb.Fatal(err)
	}
	opts := append([]pipeline.Option(nil), e.opts.ProcessorOptions...)
	if e.opts.Hooks != nil {
		opts = append(opts, pipeline.WithHooks(e.opts.Hooks))
	}
	kopts := e.kgoOpts()
	if e.opts.KafkaLogs {
		kopts = append(kopts, kgo.WithLogger(kslog.New(e.log.With("component", "kafka"))))
	}
	p, err = pipeline.New(pc, e.log, sender, e.Signer, kopts, opts...)
	if err != nil {
		e.tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() { cancel(); runErr = <-done })
		return runErr
	}
	e.tb.Cleanup(func() { _ = stop() })
	return p, stop
}

// droppedSteps are the steps no longer on pc's ladders that still hold
// records for its group, as the processor command finds them at start.
func (e *Env) droppedSteps(pc pipeline.Config) []string {
	e.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	steps, err := admin.DroppedSteps(ctx, kadmClient(e.Client), pc.Names, &pc.Policy, pc.Group)
	if err != nil {
		e.tb.Fatalf("dropped steps: %v", err)
	}
	var topics []string
	for _, s := range steps {
		topics = append(topics, s.Topic)
	}
	return topics
}

// Processor is the running processor.
func (e *Env) Processor() *pipeline.Processor { return e.proc }

// StopProcessor shuts the processor down gracefully and returns Run's error.
func (e *Env) StopProcessor() error {
	if e.stop == nil {
		return nil
	}
	stop := e.stop
	e.stop = nil
	return stop()
}

// Event builds an event JSON for sub. extra overrides or adds fields.
func Event(id string, sub pushsim.Subscription, payload string, extra map[string]any) []byte {
	m := map[string]any{
		"id":           id,
		"subscription": map[string]any{"endpoint": sub.Endpoint, "keys": map[string]string{"p256dh": sub.P256dh, "auth": sub.Auth}},
		"payload":      payload,
		"ttl":          3600,
	}
	for k, v := range extra {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// Produce produces records synchronously.
func (e *Env) Produce(ctx context.Context, rs ...*kgo.Record) {
	e.tb.Helper()
	if err := e.Client.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		e.tb.Fatalf("produce: %v", err)
	}
}

// Outcome is a record read from push.outcomes.
type Outcome struct {
	topology.OutcomeRecord
	Headers map[string]string
}

// ReadOutcomes reads push.outcomes from the start until want distinct ids
// are seen or ctx ends, and returns every outcome record per id.
func (e *Env) ReadOutcomes(ctx context.Context, want int) (map[string][]Outcome, error) {
	return e.ReadTopic(ctx, e.Names.Outcomes(), want)
}

// ReadTopic reads a JSON-valued output topic until want distinct keys.
func (e *Env) ReadTopic(ctx context.Context, topic string, want int) (map[string][]Outcome, error) {
	cl, err := kgo.NewClient(append(e.kgoOpts(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	got := make(map[string][]Outcome)
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return got, fmt.Errorf("read %s: %d of %d keys: %w", topic, len(got), want, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var o Outcome
			_ = json.Unmarshal(r.Value, &o.OutcomeRecord)
			o.Headers = make(map[string]string)
			for _, h := range r.Headers {
				o.Headers[h.Key] = string(h.Value)
			}
			got[string(r.Key)] = append(got[string(r.Key)], o)
		})
	}
	return got, nil
}

// ReadRecords reads every record of topic until want records or ctx ends.
func (e *Env) ReadRecords(ctx context.Context, topic string, want int) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(append(e.kgoOpts(), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return got, fmt.Errorf("read %s: %d of %d records: %w", topic, len(got), want, err)
		}
		got = append(got, fs.Records()...)
	}
	return got, nil
}
