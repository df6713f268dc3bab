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
	"slices"
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
		MaxHeld:        20_000,
		RetryLateness:  10 * time.Millisecond,
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

	window *window       // one slot per record in flight
	queued atomic.Int64  // tier records consumed, waiting for a slot
	room   chan struct{} // capacity 1: queued went below MaxInFlight
	held   atomic.Int64  // retry records held or ready: partition.counted summed
	// Retry records picked up since the last adaptStep, and those later
	// than RetryLateness.
	pickups, latePickups atomic.Int64
	// retryPause is on at MaxHeld; capMu guards it.
	capMu      sync.Mutex
	retryPause topicPause
	tierPause  topicPause     // on while MaxInFlight tier records wait; Run's alone (pollFor)
	wg         sync.WaitGroup // partition dispatchers and record handlers

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
		room:       make(chan struct{}, 1),
		parts:      make(map[topicPart]*partition),
		tombstones: tomb,
		hooks:      NopHooks{},
		tracer:     noop.NewTracerProvider().Tracer(""),
	}
	p.window = newWindow(cfg.MaxInFlight, cfg.Pacing.Weights, p.startOne)
	for _, o := range opts {
		o(p)
	}
	for _, t := range tiers.All {
		p.tierPause.topics = append(p.tierPause.topics, cfg.Names.Tier(t))
		for _, d := range cfg.Policy.Ladder(t).Steps {
			p.retryPause.topics = append(p.retryPause.topics, cfg.Names.Retry(t, d))
		}
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
		// Every commit the client makes, automatic or on revoke, carries
		// the finished offsets after the committed one (checkpoint.go).
		kgo.WithContext(kgo.PreCommitFnContext(context.Background(), p.annotateCommit)),
		// A resumed retry partition is fetched only when the fetch in
		// progress returns: kgo's 5 s default would make retries that
		// late. Keep it under Prefetch.
		kgo.FetchMaxWait(min(200*time.Millisecond, cfg.Prefetch)),
		// A retry partition's fetch is held in memory until its records
		// are due: 256 KiB of batches a partition at a time (kgo's default
		// is 1 MiB) keeps a ladder of a hundred partitions in bounds. The
		// tier topics still fetch MBs a second across their partitions.
		kgo.FetchMaxPartitionBytes(256<<10),
		// And at most 4 MiB a response (kgo's default is 50 MiB): at
		// MaxHeld the retry topics pause and the client drops what it
		// had buffered of them, to fetch it again on resume. The client
		// starts each request at the next partition, so none starves.
		kgo.FetchMaxBytes(4<<20),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onLost),
		// Revokes run between polls only, never while a poll's records
		// are being tracked (see Run).
		kgo.BlockRebalanceOnPoll(),
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
//
// Rebalances happen only between polls (kgo.BlockRebalanceOnPoll): the
// records of a poll are tracked by their partitions before AllowRebalance,
// so a revoke always finds them, and no poll can hand over records of a
// partition already given up. Tracking never waits: a partition's records
// start as window slots free, and Run stops fetching the tier topics while
// enough of their records wait (pollFor).
func (p *Processor) Run(ctx context.Context) error {
	defer p.cl.Close()
	p.wg.Add(2)
	go p.commitFinished(ctx)
	go p.adapt(ctx)
	for {
		pctx, stop := p.pollFor(ctx)
		// With ctx done this returns at once, still blocking rebalances:
		// drain then runs with no revoke beside it.
		fs := p.cl.PollRecords(pctx, p.pollSize())
		stop()
		if fs.IsClientClosed() || ctx.Err() != nil {
			break
		}
		fs.EachError(func(topic string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				p.log.Warn("fetch error", "topic", topic, "partition", part, "err", err)
			}
		})
		fs.EachPartition(p.accept)
		p.cl.AllowRebalance()
	}
	err := p.drain()
	p.cl.AllowRebalance() // Close leaves the group, which waits for it
	return err
}

// pollFor returns the context of the next poll. While MaxInFlight tier
// records wait for a window slot, the tier topics are paused, so the
// records consumed but not started stay bounded, and the poll ends as soon
// as they fall below it, to resume them. The retry topics are polled all
// along: a ladder's records come due while a backlog of first attempts
// waits, and they go first (window). Waiting to poll instead kept them
// unread until the backlog was gone. Pausing drops what the client has
// buffered of the tier topics; it fetches that again on resume.
func (p *Processor) pollFor(ctx context.Context) (context.Context, func()) {
	full := func() bool { return p.queued.Load() >= int64(p.cfg.MaxInFlight) }
	p.tierPause.set(p.cl, full())
	if !p.tierPause.on {
		return ctx, func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for full() {
			select {
			case <-p.room:
			case <-pctx.Done():
				return
			}
		}
		cancel()
	}()
	// Waiting for the watcher keeps it from taking a wake-up meant for
	// the next one.
	return pctx, func() { cancel(); <-done }
}

// pollSize is how many records the next poll may return: up to 4,096, but
// no more than the retry records MaxHeld has room for (at least 256). A
// poll is accepted whole before the retry topics pause, so this bounds
// what goes past MaxHeld; once they pause, the client drops what it has
// buffered of them.
func (p *Processor) pollSize() int {
	return min(4096, max(p.cfg.MaxHeld-int(p.held.Load()), 256))
}

// unqueue counts n tier records that no longer wait for a slot.
func (p *Processor) unqueue(n int) {
	if n > 0 && p.queued.Add(-int64(n)) < int64(p.cfg.MaxInFlight) {
		select {
		case p.room <- struct{}{}:
		default:
		}
	}
}

// drain hands every partition back as a revoke does (records in flight
// finished, held records re-produced), waits for every goroutine and
// commits; the client leaves the group when Run closes it.
func (p *Processor) drain() error {
	p.draining.Store(true)
	p.pacer.Close() // requests waiting for a slot go back to the ladder
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.DrainTimeout)
	defer cancel()
	all := make(map[string][]int32)
	p.mu.Lock()
	for k := range p.parts {
		all[k.topic] = append(all[k.topic], k.part)
	}
	p.mu.Unlock()
	p.handBack(ctx, p.cl, all, false)
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done:
		default:
			err = fmt.Errorf("drain: records still in flight after %s; they will be sent again by the next owner", p.cfg.DrainTimeout)
		}
	}
	cctx, ccancel := context.WithTimeout(context.Background(), p.cfg.DrainTimeout)
	defer ccancel()
	if cerr := p.cl.CommitMarkedOffsets(kgo.PreCommitFnContext(cctx, p.annotateCommit)); cerr != nil && !errors.Is(cerr, kgo.ErrClientClosed) {
		err = errors.Join(err, fmt.Errorf("commit on shutdown: %w", cerr))
	}
	return err
}

// partition returns the state of an assigned partition, starting a retry
// partition's dispatcher on first use.
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
	if src.Retry {
		p.wg.Add(1)
		go p.dispatch(ps)
	}
	return ps
}

// accept tracks the records one poll returned for a partition: a tier
// partition's are offered to the window, a retry partition's held for its
// dispatcher. It never waits: it runs while the poll blocks rebalances.
func (p *Processor) accept(ftp kgo.FetchTopicPartition) {
	if len(ftp.Records) == 0 {
		return
	}
	ps := p.partition(ftp.Topic, ftp.Partition)
	now := p.cfg.Now()
	ps.mu.Lock()
	if ps.revoked {
		// Cannot happen: a hand-back removes the state first, and none
		// runs between a poll and AllowRebalance.
		ps.mu.Unlock()
		return
	}
	var queued int64
	for _, r := range ftp.Records {
		if ps.skip(r.Offset) {
			// Finished by the partition's previous owner after its last
			// committed offset (checkpoint.go): sent and routed already.
			p.stats.skipped.Add(1)
			if last := ps.finish(ps.track(r, now)); last != nil {
				p.cl.MarkCommitRecords(last)
			}
			continue
		}
		if !ps.src.Retry {
			queued++
			ps.ready = append(ps.ready, ps.track(r, now))
			continue
		}
		due := dueOf(r, now)
		if due.After(now) {
			r = detach(r)
		}
		t := ps.track(r, now)
		t.due = due
		ps.hold(t) // the dispatcher releases what is due already
	}
	if ps.src.Retry {
		p.recountLocked(ps)
		p.scheduleLocked(ps, now) // pause now, not when the dispatcher looks
		ps.mu.Unlock()
		ps.notify()
		return
	}
	p.queued.Add(queued)
	ps.mu.Unlock()
	p.window.offer(ps)
}

// detach copies a record that will be held until due out of its fetch:
// kgo decodes a batch into one slice of records over one decompressed
// buffer, and one record kept for a minute would keep all of both alive.
func detach(r *kgo.Record) *kgo.Record {
	c := *r
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	carve := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		i := len(buf)
		buf = append(buf, b...)
		return buf[i:len(buf):len(buf)]
	}
	c.Key, c.Value = carve(r.Key), carve(r.Value)
	c.Headers = make([]kgo.RecordHeader, len(r.Headers))
	for i, h := range r.Headers {
		c.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: carve(h.Value)}
	}
	return &c
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

// scheduleLocked pauses fetching the retry partition while what it holds
// reaches further than Prefetch plus the step's jitter span, or while
// MaxInFlight of its records are due and wait for a slot, and resumes it
// otherwise. It returns when the dispatcher must look again: the head is
// due, or it is time to fetch what follows the last held record; ok is
// false when nothing is held.
// ps.mu must be held.
func (p *Processor) scheduleLocked(ps *partition, now time.Time) (next time.Time, ok bool) {
	// A record after the last one held is due at least that one's due
	// time less the jitter span: fetch it a Prefetch before then.
	lead := p.cfg.Prefetch + p.jitterSpan(ps.src.Delay)
	hold := len(ps.held) > 0 && ps.maxDue.Sub(now) > lead
	wantPause := hold || len(ps.ready) >= p.cfg.MaxInFlight
	if wantPause != ps.paused {
		ps.paused = wantPause
		tp := map[string][]int32{ps.topic: {ps.part}}
		if wantPause {
			p.cl.PauseFetchPartitions(tp)
		} else {
			p.cl.ResumeFetchPartitions(tp)
		}
	}
	if len(ps.held) == 0 {
		return time.Time{}, false
	}
	next = ps.held[0].due
	if hold {
		if r := ps.maxDue.Add(-lead); r.Before(next) {
			next = r
		}
	}
	return next, true
}

// recountLocked brings the processor's count of held retry records up to
// date with ps, and pauses the retry topics while it is at MaxHeld. They
// are paused as topics, apart from the partitions' own pauses: every
// partition must stop at once, or each would still bring one fetch.
// Pausing drops what the client has buffered of them; it fetches that
// again on resume. ps.mu must be held.
func (p *Processor) recountLocked(ps *partition) {
	n := len(ps.held) + len(ps.ready)
	if !ps.src.Retry || n == ps.counted {
		return
	}
	p.held.Add(int64(n - ps.counted))
	ps.counted = n
	p.capMu.Lock()
	defer p.capMu.Unlock()
	// Decided on the count now, under capMu: whichever change comes last
	// leaves the pause as the count asks.
	p.retryPause.set(p.cl, p.held.Load() >= int64(p.cfg.MaxHeld))
}

// topicPause pauses a set of topics as a whole, apart from the pauses of
// their partitions (kgo keeps the two independent).
type topicPause struct {
	topics []string
	on     bool
}

// set pauses the topics or resumes them, if that changes anything.
func (t *topicPause) set(cl *kgo.Client, on bool) {
	if on == t.on {
		return
	}
	t.on = on
	if on {
		cl.PauseFetchTopics(t.topics...)
	} else {
		cl.ResumeFetchTopics(t.topics...)
	}
}

// dispatch is a retry partition's goroutine until it is handed back: it
// moves held records to ready as they come due, offers them to the window,
// and keeps the partition's fetch paused or resumed.
func (p *Processor) dispatch(ps *partition) {
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		ps.mu.Lock()
		if ps.revoked {
			ps.mu.Unlock()
			return
		}
		now := p.cfg.Now()
		ps.ready = append(ps.ready, ps.popDue(now)...)
		if next, ok := p.scheduleLocked(ps, now); ok {
			timer.Reset(max(next.Sub(now), 0))
		} else {
			timer.Stop()
		}
		ready := len(ps.ready)
		ps.mu.Unlock()
		if ready > 0 {
			p.window.offer(ps)
		}
		select {
		case <-ps.wake:
		case <-timer.C:
		case <-ps.stop:
			return
		}
	}
}

// startOne starts the partition's next ready record on a window slot taken
// for it (window.start).
func (p *Processor) startOne(ps *partition) (started, more bool) {
	ps.mu.Lock()
	if ps.revoked || len(ps.ready) == 0 {
		ps.mu.Unlock()
		return false, false
	}
	t := ps.ready[0]
	ps.ready[0] = nil
	ps.ready = ps.ready[1:]
	t.started = true
	if ps.src.Retry {
		t.startAt = p.cfg.Now()
	}
	ps.inFlight++
	p.recountLocked(ps)
	more = len(ps.ready) > 0
	// Below MaxInFlight ready again: the dispatcher may resume the fetch
	// (scheduleLocked).
	look := ps.src.Retry && len(ps.ready) == p.cfg.MaxInFlight-1
	ps.mu.Unlock()
	if look {
		ps.notify()
	}
	if !ps.src.Retry {
		p.unqueue(1)
	}
	p.wg.Add(1)
	go p.handle(ps, t)
	return true, more
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
	p.window.release()
	p.wg.Done()
}

// The callbacks use the client they are given: the first assignment can
// arrive before kgo.NewClient has returned it to New. kgo runs them only
// between polls (BlockRebalanceOnPoll), never beside accept or drain.

func (p *Processor) onAssigned(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	p.joined.Store(true)
	p.loadFinished(ctx, cl, m)
	// A partition paused during an earlier ownership of ours must not stay
	// paused: its held records were handed back with it.
	cl.ResumeFetchPartitions(m)
}

func (p *Processor) onRevoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	hctx, cancel := context.WithTimeout(ctx, p.cfg.DrainTimeout)
	p.handBack(hctx, cl, m, false)
	cancel()
	if err := cl.CommitMarkedOffsets(ctx); err != nil && !errors.Is(err, kgo.ErrClientClosed) {
		p.log.Warn("commit on revoke", "err", err)
	}
}

func (p *Processor) onLost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	p.handBack(ctx, cl, m, true)
}

// handBack gives partitions up: they start nothing more (dispatchers stop)
// and what they had not started stays unstarted. A lost partition is dropped at once and
// nothing of it is marked any more (another member may own it already).
//
// A graceful hand-back waits, until ctx is done, for the records in flight
// so that their offsets can be marked, then re-produces the stranded
// records (see reproduce) so that the checkpoint can pass them, and from
// then on marks nothing more. The caller commits.
func (p *Processor) handBack(ctx context.Context, cl *kgo.Client, m map[string][]int32, lost bool) {
	var parts []*partition
	p.mu.Lock()
	for topic, nums := range m {
		for _, part := range nums {
			k := topicPart{topic, part}
			if ps := p.parts[k]; ps != nil {
				delete(p.parts, k)
				parts = append(parts, ps)
			}
		}
	}
	p.mu.Unlock()
	var waits []chan struct{}
	for _, ps := range parts {
		ps.mu.Lock()
		ps.revoked = true
		ps.lost = lost
		close(ps.stop)
		if !ps.src.Retry {
			p.unqueue(len(ps.ready))
		}
		if lost {
			ps.held, ps.ready = nil, nil
			p.recountLocked(ps)
		} else if ps.inFlight > 0 {
			ps.idleCh = make(chan struct{})
			waits = append(waits, ps.idleCh)
		}
		ps.mu.Unlock()
	}
	cl.ResumeFetchPartitions(m)
	if lost {
		return
	}
	for _, w := range waits {
		select {
		case <-w:
			continue
		case <-ctx.Done():
			p.log.Warn("hand-back: records still in flight; the next owner sends them again")
		}
		break
	}
	for _, ps := range parts {
		if n, failed := p.reproduce(ctx, cl, ps); n+failed > 0 {
			p.log.Info("re-produced held records on hand-back", "topic", ps.topic, "partition", ps.part, "records", n, "failed", failed)
		}
		ps.mu.Lock()
		ps.lost = true // mark nothing more: the partition is no longer ours
		ps.held, ps.ready = nil, nil
		p.recountLocked(ps)
		ps.mu.Unlock()
	}
}

// reproduce appends a copy of each stranded record of a handed-back
// partition (see partition.stranded) to the end of its topic and, once the
// copy is acknowledged, counts the record finished, so the checkpoint
// passes it and the later records already sent: otherwise the next owner
// would consume and send them again. In practice these are retry records
// held until due while a later offset, due earlier (jitter, Retry-After
// floors), was sent.
//
// The copy is the record unchanged: key, value, headers (push-sig signs
// them and the topic) and timestamp, so it is due when the original was and
// the next owner holds it as before. It goes to the same topic, and to the
// same partition through the client's partitioner: the processor keeps
// kgo's default, which hashes a key to the partition retry() had it land
// on while the partition count is unchanged; a record without a key has no
// order to keep, and lands where the partitioner puts it, as its original
// did.
//
// A copy not acknowledged before ctx is done leaves its record unfinished,
// so the checkpoint stops before it: at least once, never at most once.
// It returns how many copies were acknowledged and how many were not.
func (p *Processor) reproduce(ctx context.Context, cl *kgo.Client, ps *partition) (acked, failed int) {
	ps.mu.Lock()
	ts := ps.stranded()
	ps.mu.Unlock()
	if len(ts) == 0 {
		return 0, 0
	}
	var (
		mu   sync.Mutex
		ok   = make([]bool, len(ts))
		over bool // set once ok is read: later results are ignored
		left atomic.Int32
		done = make(chan struct{})
	)
	left.Store(int32(len(ts)))
	for i, t := range ts {
		r := t.rec
		cp := &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: slices.Clone(r.Headers), Timestamp: r.Timestamp}
		cl.Produce(ctx, cp, func(_ *kgo.Record, err error) {
			mu.Lock()
			if !over {
				ok[i] = err == nil
			}
			mu.Unlock()
			if err != nil && !errors.Is(err, kgo.ErrClientClosed) {
				p.log.Error("re-produce on hand-back failed; the record stays uncommitted", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			}
			if left.Add(-1) == 0 {
				close(done)
			}
		})
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	mu.Lock()
	over = true
	mu.Unlock()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	var last *kgo.Record
	for i, t := range ts {
		if !ok[i] {
			failed++
			continue
		}
		acked++
		if l := ps.finish(t); l != nil {
			last = l
		}
	}
	if last != nil && !ps.lost {
		cl.MarkCommitRecords(last)
	}
	return acked, failed
}

// jitter returns the random extra delay of a retry on a step of delay d.
func (p *Processor) jitter(d time.Duration) time.Duration {
	if j := p.jitterSpan(d); j > 0 {
		return rand.N(j)
	}
	return 0
}

// jitterSpan is the most jitter adds to a due time on a step of delay d.
func (p *Processor) jitterSpan(d time.Duration) time.Duration {
	return max(min(time.Duration(float64(d)*p.cfg.Jitter), p.cfg.MaxJitter), 0)
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

// HeldTotal is how many retry records are in memory, held until due or
// waiting for a window slot, across all retry topics (what MaxHeld bounds).
func (p *Processor) HeldTotal() int { return int(p.held.Load()) }

// InFlight is the number of records being sent or awaiting their produce
// acknowledgements.
func (p *Processor) InFlight() int { return p.window.inUse() }

// InFlightLimit is the window's size: MaxInFlight, or less while the cores
// are saturated (adapt.go).
func (p *Processor) InFlightLimit() int { return p.window.limit() }
