// Package pipeline assembles the processor's engine from its parts:
// internal/consume (the group, partition workers, hold until due, window,
// produce, commits), internal/deliver (one record: verify, decode, admit,
// send, decide, build), internal/checkpoint and internal/pacing. It holds
// the engine's configuration and wiring; it owns no goroutine, no record
// path, no flags and no HTTP server (docs/design.md).
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/consume"
	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/members"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/share"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Config tunes a Processor. Zero fields take the documented defaults.
type Config struct {
	Names  topology.Names
	Policy tiers.Policy
	Group  string
	Rules  event.Rules

	// GroupInstanceID makes the processor a static member of the group
	// (group.instance.id); empty is a dynamic member.
	GroupInstanceID string
	// GroupProtocol is consume.ProtocolAuto (the default: KIP-848 where
	// the brokers serve it, for a dynamic member), ProtocolClassic or
	// ProtocolConsumer.
	GroupProtocol string
	// SessionTimeout and HeartbeatInterval are the classic protocol's
	// session (KIP-848 takes the broker's): a crashed member's partitions
	// wait this long for another. Defaults 6s and 1s.
	SessionTimeout, HeartbeatInterval time.Duration
	// RemoveSilentAfter removes from the group a member whose beats on
	// the members topic stopped this long ago while this processor's
	// went through (internal/members): a killed processor's partitions
	// wait this long, not its session. 0 leaves it to the session.
	// Default 3s.
	RemoveSilentAfter time.Duration

	// ExtraInputs are the retry topics of steps dropped from a ladder
	// (admin.DroppedSteps finds those that still hold records), consumed
	// besides the ladder's until the processor restarts: their records
	// continue on the current ladder. Nothing else may be listed.
	ExtraInputs []string
	// MaxInFlight bounds the records being sent or awaiting their produce
	// acknowledgements across all partitions. Default 1024.
	MaxInFlight int
	// Jitter is the share of a step's delay added at random to a retry's
	// due time, so failures that happen together do not come back
	// together. Default 0.1, at most MaxJitter (default 5s).
	Jitter    float64
	MaxJitter time.Duration
	// MaxHeld bounds the retry records in memory, held until due or
	// waiting for a window slot, across all retry partitions: at it, the
	// retry topics stop fetching until some are started, so memory does
	// not grow with the partitions or with how many records come due
	// together. A poll can take it past by 256 (pollSize). Default 20,000.
	MaxHeld int
	// RetryLateness is how long a due retry record may wait to run, waits
	// for a window slot aside (notePickup): while more than 1 % wait
	// longer, the window of records in flight shrinks below MaxInFlight
	// (adapt.go). 0 keeps it at MaxInFlight. Default 10ms.
	RetryLateness time.Duration
	// Prefetch is how long before the records after the last held one
	// of a retry partition can be due that fetching resumes: the last
	// held record's due time less the step's jitter span. Default 250ms.
	Prefetch time.Duration
	// CommitInterval is how often finished offsets are committed: what a
	// crash can make the next owner send again. Default 100ms.
	CommitInterval time.Duration
	// DrainTimeout is how long shutdown and a partition revoke keep trying
	// a produce the broker refuses, and the least they wait for the sends
	// under way: those are waited for until they finish, up to three
	// quarters of the group's rebalance timeout (kgo's default 60s), since
	// a send left to the next owner is sent twice. Default 20s.
	DrainTimeout time.Duration
	// StuckAfter: a partition whose produce has failed for this long
	// makes the processor unready (/readyz). Default 1m.
	StuckAfter time.Duration
	// SigLifetime is how long after its due time a signed retry record is
	// still accepted. Default 7 days.
	SigLifetime time.Duration
	// TombstoneSize and TombstoneTTL bound the LRU of endpoints answered
	// 404/410. Defaults 100,000 and 24h.
	TombstoneSize int
	TombstoneTTL  time.Duration
	// Pacing paces sends per push service; its Weights come from Policy.
	Pacing pacing.Config
	// SharePacing shares pacing with the other processors sending to the
	// same push services, through the pacing topic (internal/share).
	// Default true.
	SharePacing bool
	// Instance names this processor in the signals it shares; it must
	// differ between processors. Default host name, process id and a
	// random suffix.
	Instance string
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// DefaultConfig returns the defaults of the public contract.
func DefaultConfig() Config {
	return Config{
		Names:          topology.Names{Prefix: topology.DefaultPrefix},
		Policy:         tiers.DefaultPolicy(),
		Group:          "tierpush",
		Rules:          event.DefaultRules(),
		MaxInFlight:    1024,
		MaxHeld:        20_000,
		RetryLateness:  10 * time.Millisecond,
		Jitter:         0.1,
		MaxJitter:      5 * time.Second,
		Prefetch:       250 * time.Millisecond,
		DrainTimeout:   20 * time.Second,
		StuckAfter:     time.Minute,
		CommitInterval: 100 * time.Millisecond,
		SigLifetime:    7 * 24 * time.Hour,
		TombstoneSize:  100_000,
		TombstoneTTL:   24 * time.Hour,
		Pacing:         pacing.DefaultConfig(),
		SharePacing:    true,
		Now:            time.Now,

		GroupProtocol:     consume.ProtocolAuto,
		SessionTimeout:    6 * time.Second,
		HeartbeatInterval: time.Second,
		RemoveSilentAfter: 3 * time.Second,
	}
}

// Validate names the first field out of range.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxInFlight < 1 {
		errs = append(errs, fmt.Errorf("max-in-flight: %d, want at least 1", c.MaxInFlight))
	}
	if c.MaxHeld < 1 {
		errs = append(errs, fmt.Errorf("max-held: %d, want at least 1", c.MaxHeld))
	}
	if c.RetryLateness < 0 {
		errs = append(errs, fmt.Errorf("retry-lateness: %s, want 0 (off) or more", c.RetryLateness))
	}
	if c.Jitter < 0 || c.Jitter > 1 {
		errs = append(errs, fmt.Errorf("retry-jitter: %g, want 0..1", c.Jitter))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("group: empty"))
	}
	if c.CommitInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("commit-interval: %s, want at least 10ms", c.CommitInterval))
	}
	if c.TombstoneSize < 1 {
		errs = append(errs, fmt.Errorf("tombstone-size: %d, want at least 1", c.TombstoneSize))
	}
	if err := c.Policy.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Pacing.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Processor is the engine: a consumer whose records a deliver.Handler
// handles, pacing sends per push service.
type Processor struct {
	*consume.Consumer
	pacer *pacing.Pacer
	share *share.Exchange // nil when pacing is not shared
	watch *members.Watch  // nil when silent members are left to the session
	stats *deliver.Stats
}

// Option sets an optional dependency of a Processor.
type Option func(*options)

type options struct {
	hooks  []deliver.Hooks
	tracer deliver.Tracer
	pacing []pacing.Option
	kopts  []kgo.Opt
}

// WithHooks observes every handled record (metrics, the status table);
// hooks that are consume.Hooks too also observe the consumer (skipped
// records, failed commits, partitions taken over).
func WithHooks(h deliver.Hooks) Option {
	return func(o *options) { o.hooks = append(o.hooks, h) }
}

// WithPacingObserver receives every pacing event (cuts, breaker changes,
// pauses).
func WithPacingObserver(fn func(pacing.Event)) Option {
	return func(o *options) { o.pacing = append(o.pacing, pacing.WithObserver(fn)) }
}

// WithTracer follows every event across its hops (telemetry.Tracing); the
// Kafka client's own tracing hooks go in kopts.
func WithTracer(t deliver.Tracer) Option { return func(o *options) { o.tracer = t } }

// New returns a Processor consuming with group options added to kopts (seed
// brokers, TLS, SASL, dialer, client hooks and so on). sender and signer
// are required.
func New(cfg Config, log *slog.Logger, sender dispatch.Sender, signer *topology.Signer, kopts []kgo.Opt, opts ...Option) (*Processor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sender == nil || signer == nil {
		return nil, errors.New("pipeline: sender and signer are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	for i, t := range tiers.All {
		cfg.Pacing.Weights[i] = cfg.Policy.Ladder(t).Weight
	}
	// The requests waiting for a busy origin hold window slots.
	cfg.Pacing.MaxWaiting = cfg.MaxInFlight
	var ex *share.Exchange
	popts := append([]pacing.Option{pacing.WithClock(cfg.Now)}, o.pacing...)
	if cfg.SharePacing && cfg.Pacing.Enabled {
		popts = append(popts, pacing.WithSignals(func(s pacing.Signal) { ex.Publish(s) }))
	}
	pacer, err := pacing.New(cfg.Pacing, popts...)
	if err != nil {
		return nil, fmt.Errorf("pacing: %w", err)
	}
	if cfg.Instance == "" {
		cfg.Instance = defaultInstance()
	}
	if cfg.SharePacing && cfg.Pacing.Enabled {
		// kopts only: options added with WithClientOpts (metric hooks that
		// register once per process) are the consumer client's.
		ex, err = share.New(share.Config{Topic: cfg.Names.Pacing(), From: cfg.Instance, Now: cfg.Now}, log, pacer, kopts)
		if err != nil {
			return nil, err
		}
	}
	dcfg := deliver.Config{Names: cfg.Names, Policy: cfg.Policy, Rules: cfg.Rules, Jitter: cfg.Jitter, MaxJitter: cfg.MaxJitter,
		SigLifetime: cfg.SigLifetime, TombstoneSize: cfg.TombstoneSize, TombstoneTTL: cfg.TombstoneTTL, Now: cfg.Now}
	stats := &deliver.Stats{}
	dopts := []deliver.Option{deliver.WithHooks(append(deliver.MultiHooks{stats}, o.hooks...))}
	if o.tracer != nil {
		dopts = append(dopts, deliver.WithTracer(o.tracer))
	}
	h, err := deliver.New(dcfg, log, sender, signer, pacer, dopts...)
	if err != nil {
		return nil, err
	}
	chooks := consumeHooks{stats: stats}
	for _, h := range o.hooks {
		if ch, ok := h.(consume.Hooks); ok {
			chooks.more = append(chooks.more, ch)
		}
	}
	c, err := consume.New(consume.Config{
		Group: cfg.Group, InstanceID: cfg.GroupInstanceID, Protocol: cfg.GroupProtocol,
		SessionTimeout: cfg.SessionTimeout, HeartbeatInterval: cfg.HeartbeatInterval,
		Names: cfg.Names, Policy: cfg.Policy, ExtraInputs: cfg.ExtraInputs,
		MaxInFlight: cfg.MaxInFlight, MaxHeld: cfg.MaxHeld, RetryLateness: cfg.RetryLateness,
		Prefetch: cfg.Prefetch, CommitInterval: cfg.CommitInterval, DrainTimeout: cfg.DrainTimeout,
		StuckAfter: cfg.StuckAfter, JitterSpan: dcfg.JitterSpan, Now: cfg.Now,
		// kopts only, as the pacing exchange's client: the hooks added
		// with WithClientOpts are the consumer client's.
		ReaderOpts: kopts,
		Verify:     func(r *kgo.Record) error { return signer.Verify(r, cfg.Now()) },
	}, log, h, chooks, append(kopts[:len(kopts):len(kopts)], o.kopts...))
	if err != nil {
		return nil, err
	}
	p := &Processor{Consumer: c, pacer: pacer, share: ex, stats: stats}
	if cfg.RemoveSilentAfter > 0 {
		removed := func(protocol string) {
			for _, h := range o.hooks {
				if mh, ok := h.(MemberHooks); ok {
					mh.MemberRemoved(protocol)
				}
			}
		}
		p.watch, err = members.New(members.Config{Topic: cfg.Names.Members(), Group: cfg.Group, From: cfg.Instance,
			After: cfg.RemoveSilentAfter, Static: cfg.GroupInstanceID != "", Removed: removed}, log, c.Member, kopts)
		if err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Run consumes until ctx ends (consume.Consumer.Run) and, beside it, shares
// pacing with the other processors and beats among them; it returns once
// all have stopped.
func (p *Processor) Run(ctx context.Context) error {
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	if p.share != nil {
		wg.Go(func() { _ = p.share.Run(sctx) })
	}
	if p.watch != nil {
		wg.Go(func() { p.watch.Run(sctx) })
	}
	err := p.Consumer.Run(ctx)
	cancel()
	wg.Wait()
	return err
}

// MemberHooks are hooks (WithHooks) told of each silent member this
// processor removed from the group (internal/members), by its protocol.
type MemberHooks interface {
	MemberRemoved(protocol string)
}

// consumeHooks hands the consumer's observations to the processor's
// counters and to the hooks that take them.
type consumeHooks struct {
	stats *deliver.Stats
	more  []consume.Hooks
}

func (h consumeHooks) Skipped(why string, n int) {
	h.stats.Skipped(n)
	for _, m := range h.more {
		m.Skipped(why, n)
	}
}

func (h consumeHooks) CommitFailed(reason string, n int) {
	for _, m := range h.more {
		m.CommitFailed(reason, n)
	}
}

func (h consumeHooks) Resumed(waited time.Duration) {
	for _, m := range h.more {
		m.Resumed(waited)
	}
}

// defaultInstance names this process: host name, process id and a random
// suffix, so that two processes on one host, or one restarted, differ.
func defaultInstance() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%08x", host, os.Getpid(), rand.Uint32())
}

// Pacer is the processor's pacer (for status and metrics).
func (p *Processor) Pacer() *pacing.Pacer { return p.pacer }

// Stats returns the processor's counters.
func (p *Processor) Stats() *deliver.Stats { return p.stats }

// WithClientOpts adds options to the Kafka client, such as kotel's hooks.
func WithClientOpts(opts ...kgo.Opt) Option {
	return func(o *options) { o.kopts = append(o.kopts, opts...) }
}
