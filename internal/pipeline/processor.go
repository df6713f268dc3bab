// Package pipeline is the processor's engine: it consumes the tier and retry
// topics in one consumer group, sends every event concurrently inside a
// bounded window, holds retry records until due by pausing their partitions,
// routes each result, and commits a source offset only once every record it
// produced is acknowledged. It owns no flags and no HTTP server.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Config tunes a Processor. Zero fields take the documented defaults.
type Config struct {
	Names  topology.Names
	Policy tiers.Policy
	Group  string
	Rules  event.Rules
	// MaxInFlight bounds the records being sent or awaiting their produce
	// acknowledgements across all partitions. Default 1024.
	MaxInFlight int
	// Jitter is the share of a step's delay added at random to a retry's
	// due time, so failures that happen together do not come back
	// together. Default 0.1, at most MaxJitter (default 5s).
	Jitter    float64
	MaxJitter time.Duration
	// Prefetch is how long before the last held record of a retry
	// partition is due that fetching resumes. Default 250ms.
	Prefetch time.Duration
	// CommitInterval is how often finished offsets are committed: what a
	// crash can make the next owner send again. Default 100ms.
	CommitInterval time.Duration
	// DrainTimeout bounds how long shutdown and a partition revoke wait for
	// records in flight. Default 20s.
	DrainTimeout time.Duration
	// SigLifetime is how long after its due time a signed retry record is
	// still accepted. Default 7 days.
	SigLifetime time.Duration
	// TombstoneSize and TombstoneTTL bound the LRU of endpoints answered
	// 404/410. Defaults 100,000 and 24h.
	TombstoneSize int
	TombstoneTTL  time.Duration
	// Pacing paces sends per push service; its Weights come from Policy.
	Pacing pacing.Config
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
		Jitter:         0.1,
		MaxJitter:      5 * time.Second,
		Prefetch:       250 * time.Millisecond,
		DrainTimeout:   20 * time.Second,
		CommitInterval: 100 * time.Millisecond,
		SigLifetime:    7 * 24 * time.Hour,
		TombstoneSize:  100_000,
		TombstoneTTL:   24 * time.Hour,
		Pacing:         pacing.DefaultConfig(),
		Now:            time.Now,
	}
}

// Validate names the first field out of range.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxInFlight < 1 {
		errs = append(errs, fmt.Errorf("max-in-flight: %d, want at least 1", c.MaxInFlight))
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

// Processor runs the pipeline on one kgo client.
type Processor struct {
	cfg    Config
	log    *slog.Logger
	sender dispatch.Sender
	signer *topology.Signer
	cl     *kgo.Client
	hooks  Hooks
	pacer  *pacing.Pacer
	kt     *kotel.Tracer // nil: no tracing
	tracer trace.Tracer

	window chan struct{} // one token per record in flight
	wg     sync.WaitGroup

	mu    sync.Mutex
	parts map[topicPart]*partition

	tombstones *lru.Cache[string, time.Time]
	stats      Stats
	draining   atomic.Bool
	joined     atomic.Bool
	pacingOpts []pacing.Option
}

type topicPart struct {
	topic string
	part  int32
}

// Option sets an optional dependency of a Processor.
type Option func(*Processor)

// WithHooks observes the pipeline (metrics, tracing, the status table).
func WithHooks(h Hooks) Option { return func(p *Processor) { p.hooks = h } }

// WithPacingObserver receives every pacing event (cuts, breaker changes,
// pauses).
func WithPacingObserver(fn func(pacing.Event)) Option {
	return func(p *Processor) { p.pacingOpts = append(p.pacingOpts, pacing.WithObserver(fn)) }
}

// WithTracing traces every event across its hops: kt's hooks go on the
// Kafka client (spans per produce and receive, trace context in record
// headers) and tp makes the processing, hold and send spans.
func WithTracing(kt *kotel.Tracer, tp trace.TracerProvider) Option {
	return func(p *Processor) { p.kt, p.tracer = kt, tp.Tracer("github.com/tierpush/tierpush/internal/pipeline") }
}

// Pacer is the processor's pacer (for status and metrics).
func (p *Processor) Pacer() *pacing.Pacer { return p.pacer }

// New returns a Processor consuming with group options added to kopts (seed
// brokers, TLS, SASL, dialer and so on). sender and signer are required.
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
	for i, t := range tiers.All {
		cfg.Pacing.Weights[i] = cfg.Policy.Ladder(t).Weight
	}
	tomb, err := lru.New[string, time.Time](cfg.TombstoneSize)
	if err != nil {
		return nil, fmt.Errorf("tombstone cache: %w", err)
	}
	p := &Processor{
		cfg:        cfg,
		log:        log,
		sender:     sender,
		signer:     signer,
		window:     make(chan struct{}, cfg.MaxInFlight),
		parts:      make(map[topicPart]*partition),
		tombstones: tomb,
		hooks:      NopHooks{},
		tracer:     noop.NewTracerProvider().Tracer(""),
	}
	for _, o := range opts {
		o(p)
	}
	popts := append([]pacing.Option{pacing.WithClock(cfg.Now)}, p.pacingOpts...)
	if p.pacer, err = pacing.New(cfg.Pacing, popts...); err != nil {
		return nil, fmt.Errorf("pacing: %w", err)
	}
	kopts = kopts[:len(kopts):len(kopts)]
	if p.kt != nil {
		kopts = append(kopts, kgo.WithHooks(p.kt))
	}
	kopts = append(kopts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Names.Inputs(&cfg.Policy)...),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(cfg.CommitInterval),
		// A resumed retry partition is fetched only when the fetch in
		// progress returns: kgo's 5 s default would make retries that
		// late. Keep it under Prefetch.
		kgo.FetchMaxWait(min(200*time.Millisecond, cfg.Prefetch)),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	p.cl = cl
	return p, nil
}

// Client is the processor's Kafka client (for admin calls and health).
func (p *Processor) Client() *kgo.Client { return p.cl }

// Stats returns the processor's counters.
func (p *Processor) Stats() *Stats { return &p.stats }

// Ready reports whether the processor has joined its group and is not
// draining.
func (p *Processor) Ready() bool { return p.joined.Load() && !p.draining.Load() }

// Run consumes until ctx is done, then stops fetching, finishes or hands
// back the records in flight within DrainTimeout, commits and closes the
// client. It returns nil on a clean shutdown.
func (p *Processor) Run(ctx context.Context) error {
	defer p.cl.Close()
	for {
		fs := p.cl.PollRecords(ctx, 4096)
		if fs.IsClientClosed() || ctx.Err() != nil {
			break
		}
		fs.EachError(func(topic string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("fetch error", "topic", topic, "partition", part, "err", err)
			}
		})
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			p.accept(ctx, ftp)
		})
	}
	return p.drain()
}

// drain waits for the records in flight, commits, and leaves the group.
func (p *Processor) drain() error {
	p.draining.Store(true)
	p.pacer.Close() // requests waiting for a slot go back to the ladder
	p.mu.Lock()
	for _, ps := range p.parts {
		ps.mu.Lock()
		ps.revoked = true // dispatch nothing more; held records stay uncommitted
		ps.held = nil
		if ps.timer != nil {
			ps.timer.Stop()
		}
		ps.mu.Unlock()
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	t := time.NewTimer(p.cfg.DrainTimeout)
	defer t.Stop()
	var err error
	select {
	case <-done:
	case <-t.C:
		err = fmt.Errorf("drain: records still in flight after %s; they will be sent again by the next owner", p.cfg.DrainTimeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DrainTimeout)
	defer cancel()
	if cerr := p.cl.CommitMarkedOffsets(ctx); cerr != nil && !errors.Is(cerr, kgo.ErrClientClosed) {
		err = errors.Join(err, fmt.Errorf("commit on shutdown: %w", cerr))
	}
	return err
}

func (p *Processor) partition(topic string, part int32) *partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := topicPart{topic, part}
	if ps := p.parts[k]; ps != nil {
		return ps
	}
	src, err := p.cfg.Names.Parse(topic, &p.cfg.Policy)
	if err != nil {
		// Cannot happen: we consume only our own topics.
		p.log.Error("unexpected topic", "topic", topic, "err", err)
	}
	ps := newPartition(topic, part, src)
	p.parts[k] = ps
	return ps
}

// accept takes the records one poll returned for a partition.
func (p *Processor) accept(ctx context.Context, ftp kgo.FetchTopicPartition) {
	if len(ftp.Records) == 0 {
		return
	}
	ps := p.partition(ftp.Topic, ftp.Partition)
	if !ps.src.Retry {
		for _, r := range ftp.Records {
			ps.mu.Lock()
			if ps.revoked {
				ps.mu.Unlock()
				return
			}
			t := ps.track(r, p.cfg.Now())
			ps.mu.Unlock()
			if !p.start(ctx, ps, t) {
				return
			}
		}
		return
	}
	now := p.cfg.Now()
	var ready []*tracked
	ps.mu.Lock()
	if ps.revoked {
		ps.mu.Unlock()
		return
	}
	for _, r := range ftp.Records {
		t := ps.track(r, now)
		t.due = dueOf(r, now)
		if len(ps.held) == 0 && !t.due.After(now) {
			ready = append(ready, t)
			continue
		}
		ps.hold(t)
	}
	p.scheduleLocked(ps, now)
	ps.mu.Unlock()
	for _, t := range ready {
		if !p.start(ctx, ps, t) {
			return
		}
	}
}

// dueOf reads push-due; a record without a readable one is due now, and the
// handler sends it to the DLQ.
func dueOf(r *kgo.Record, now time.Time) time.Time {
	for _, h := range r.Headers {
		if h.Key == topology.HeaderDue {
			m, err := topology.DecodeMeta([]kgo.RecordHeader{h})
			if err != nil {
				return now
			}
			return m.Due
		}
	}
	return now
}

// scheduleLocked arms the partition's timer for its next due record and
// pauses fetching while what it holds reaches further than Prefetch.
// ps.mu must be held.
func (p *Processor) scheduleLocked(ps *partition, now time.Time) {
	tp := map[string][]int32{ps.topic: {ps.part}}
	if len(ps.held) == 0 {
		if ps.paused {
			ps.paused = false
			p.cl.ResumeFetchPartitions(tp)
		}
		return
	}
	wantPause := ps.maxDue.Sub(now) > p.cfg.Prefetch
	switch {
	case wantPause && !ps.paused:
		ps.paused = true
		p.cl.PauseFetchPartitions(tp)
	case !wantPause && ps.paused:
		ps.paused = false
		p.cl.ResumeFetchPartitions(tp)
	}
	next := ps.held[0].due
	if wantPause {
		// Wake for whichever comes first: the head is due, or it is time
		// to fetch what follows the last held record.
		if r := ps.maxDue.Add(-p.cfg.Prefetch); r.Before(next) {
			next = r
		}
	}
	d := max(next.Sub(now), 0)
	if ps.timer == nil {
		ps.timer = time.AfterFunc(d, func() { p.release(ps) })
	} else {
		ps.timer.Reset(d)
	}
}

// release dispatches every held record that has come due.
func (p *Processor) release(ps *partition) {
	now := p.cfg.Now()
	ps.mu.Lock()
	if ps.revoked {
		ps.mu.Unlock()
		return
	}
	due := ps.popDue(now)
	p.scheduleLocked(ps, now)
	ps.mu.Unlock()
	for _, t := range due {
		if !p.start(context.Background(), ps, t) {
			return
		}
	}
}

// start takes a window slot and dispatches t on its own goroutine. It
// returns false when the partition was revoked or ctx ended meanwhile.
func (p *Processor) start(ctx context.Context, ps *partition, t *tracked) bool {
	select {
	case p.window <- struct{}{}:
	case <-ctx.Done():
		return false
	}
	ps.mu.Lock()
	if ps.revoked {
		ps.mu.Unlock()
		<-p.window
		return false
	}
	ps.inFlight++
	ps.mu.Unlock()
	p.wg.Add(1)
	go p.handle(ps, t)
	return true
}

// complete records that every output of t is acknowledged (ok) or that one
// failed (the record stays uncommitted and is consumed again later).
func (p *Processor) complete(ps *partition, t *tracked, ok bool) {
	ps.mu.Lock()
	if ok {
		if last := ps.finish(t); last != nil && !ps.lost {
			p.cl.MarkCommitRecords(last)
		}
	}
	ps.inFlight--
	if ps.inFlight == 0 && ps.idleCh != nil {
		close(ps.idleCh)
		ps.idleCh = nil
	}
	ps.mu.Unlock()
	<-p.window
	p.wg.Done()
}

// The callbacks use the client they are given: the first assignment can
// arrive before kgo.NewClient has returned it to New.

func (p *Processor) onAssigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	p.joined.Store(true)
	// A partition paused during an earlier ownership of ours must not stay
	// paused: its held records were dropped with it.
	cl.ResumeFetchPartitions(m)
}

func (p *Processor) onRevoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	p.handBack(cl, m, false)
	if err := cl.CommitMarkedOffsets(ctx); err != nil && !errors.Is(err, kgo.ErrClientClosed) {
		p.log.Warn("commit on revoke", "err", err)
	}
}

func (p *Processor) onLost(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	p.handBack(cl, m, true)
}

// handBack stops dispatching the given partitions, waits (bounded) for their
// records in flight so their offsets can be committed, drops held records
// (uncommitted, so the next owner consumes them) and resumes the partitions.
func (p *Processor) handBack(cl *kgo.Client, m map[string][]int32, lost bool) {
	var waits []chan struct{}
	p.mu.Lock()
	for topic, parts := range m {
		for _, part := range parts {
			k := topicPart{topic, part}
			ps := p.parts[k]
			if ps == nil {
				continue
			}
			delete(p.parts, k)
			ps.mu.Lock()
			ps.revoked = true
			ps.lost = lost
			ps.held = nil
			if ps.timer != nil {
				ps.timer.Stop()
			}
			if ps.inFlight > 0 {
				ps.idleCh = make(chan struct{})
				waits = append(waits, ps.idleCh)
			}
			ps.mu.Unlock()
		}
	}
	p.mu.Unlock()
	cl.ResumeFetchPartitions(m)
	if lost {
		return
	}
	t := time.NewTimer(p.cfg.DrainTimeout)
	defer t.Stop()
	for _, w := range waits {
		select {
		case <-w:
		case <-t.C:
			p.log.Warn("revoke: records still in flight; the next owner sends them again")
			return
		}
	}
}

// jitter returns the random extra delay of a retry on a step of delay d.
func (p *Processor) jitter(d time.Duration) time.Duration {
	j := min(time.Duration(float64(d)*p.cfg.Jitter), p.cfg.MaxJitter)
	if j <= 0 {
		return 0
	}
	return rand.N(j)
}

// Held returns how many retry records each retry topic holds in memory,
// waiting for their due time.
func (p *Processor) Held() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int)
	for _, ps := range p.parts {
		if !ps.src.Retry {
			continue
		}
		ps.mu.Lock()
		out[ps.topic] += len(ps.held)
		ps.mu.Unlock()
	}
	return out
}

// InFlight is the number of records being sent or awaiting their produce
// acknowledgements.
func (p *Processor) InFlight() int { return len(p.window) }
