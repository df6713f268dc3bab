// Package consume runs the processor's consumer: one group over the tier
// and retry topics, a worker goroutine per assigned partition (born in the
// assign callback, stopped and waited for at every hand-off:
// partitions.go), retry records held until due by pausing their partitions,
// a bounded window of records in flight, the produce of what each record
// leads to, and commits that carry the partition's checkpoint.
//
// It decides nothing about a record: internal/deliver does. It must not
// send, decode events or import a tracing library.
package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Consumer consumes the tier and retry topics in one group.
type Consumer struct {
	cfg   Config
	log   *slog.Logger
	h     Handler
	hooks Hooks
	cl    *kgo.Client

	window  *window
	queued  [3]atomic.Int64 // tier records consumed, waiting for a slot, per tier
	wakeMu  sync.Mutex
	wake    context.CancelFunc // ends the poll under way: room for tier records
	budgets [3]*budget         // retry records held in memory, per tier
	// Retry records picked up since the last adaptStep, and those later
	// than RetryLateness.
	pickups, latePickups atomic.Int64
	tierPause            [3]topicPause // per tier; Run's alone (pollContext)

	dropped map[string]topology.Source // ExtraInputs, parsed once

	mu    sync.Mutex
	parts map[topicPart]*worker // partitions.go
	// records counts every record goroutine, so Run returns after the
	// last one even when a hand-off stopped waiting for it.
	records sync.WaitGroup
	// resumes counts the goroutines reading what partitions taken over
	// had done (resume.go), which end with life.
	resumes   sync.WaitGroup
	life      context.Context
	endLife   context.CancelFunc
	commitLog logLimit // commit failures (commit.go)
	// runners are the goroutines records are handled on (runners.go).
	runners *runners

	joined, draining atomic.Bool
	protocol         atomic.Value // ProtocolClassic or ProtocolConsumer, once Run knows (checkProtocol)
	produceFailures  atomic.Int64

	// The longest a hand-off waits for the records in flight, and then for
	// its commit (New, handOff).
	waitLimit, commitLimit time.Duration
}

type topicPart struct {
	topic string
	part  int32
}

// New returns a Consumer whose group client adds the group options to
// kopts (seed brokers, TLS, SASL, hooks, dialer and so on).
func New(cfg Config, log *slog.Logger, h Handler, hooks Hooks, kopts []kgo.Opt) (*Consumer, error) {
	switch cfg.Protocol {
	case "":
		cfg.Protocol = ProtocolAuto
	case ProtocolAuto, ProtocolClassic, ProtocolConsumer:
	default:
		return nil, fmt.Errorf("group protocol %q: want %s, %s or %s", cfg.Protocol, ProtocolClassic, ProtocolConsumer, ProtocolAuto)
	}
	c := &Consumer{cfg: cfg, log: log, h: h, hooks: hooks, parts: make(map[topicPart]*worker), dropped: make(map[string]topology.Source),
		runners: newRunners(func(j runJob) { j.w.handle(j.t) })}
	c.life, c.endLife = context.WithCancel(context.Background())
	weights := [3]int{}
	for i, t := range tiers.All {
		weights[i] = cfg.Policy.Ladder(t).Weight
		b := &budget{max: int64(max(cfg.MaxHeld/len(tiers.All), 1))}
		for _, d := range cfg.Policy.Ladder(t).Steps {
			b.topics = append(b.topics, cfg.Names.Retry(t, d))
		}
		c.budgets[i] = b
		c.tierPause[i].topics = []string{cfg.Names.Tier(t)}
	}
	for _, topic := range cfg.ExtraInputs {
		src, err := cfg.Names.ParseDropped(topic, &cfg.Policy)
		if err != nil {
			return nil, fmt.Errorf("extra input: %w", err)
		}
		c.dropped[topic] = src
		b := c.budgets[src.Tier.Index()]
		b.topics = append(b.topics, topic)
	}
	c.window = newWindow(cfg.MaxInFlight, weights, c.startOne)
	kopts = append(kopts[:len(kopts):len(kopts)],
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(append(cfg.Names.Inputs(&cfg.Policy), slices.Collect(maps.Keys(c.dropped))...)...),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(cfg.CommitInterval),
		// Every commit the client makes, automatic or on a hand-off,
		// carries the partition's checkpoint, and none names a partition
		// this member no longer owns (commit.go).
		kgo.WithContext(kgo.PreCommitFnContext(context.Background(), c.annotateCommit)),
		kgo.AutoCommitCallback(func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
			c.committed(req, resp, err)
		}),
		// A resumed retry partition is fetched only when the fetch in
		// progress returns: kgo's 5 s default would make retries that
		// late. Keep it under Prefetch.
		kgo.FetchMaxWait(min(200*time.Millisecond, cfg.Prefetch)),
		// A retry partition's fetch waits in memory until its records are
		// due: 256 KiB a partition (kgo's default is 1 MiB) and at most
		// 4 MiB a response (default 50 MiB) keep a ladder of a hundred
		// partitions in bounds. The client starts each request at the
		// next partition, so none starves.
		kgo.FetchMaxPartitionBytes(256<<10),
		kgo.FetchMaxBytes(4<<20),
		kgo.OnPartitionsAssigned(c.assigned),
		kgo.OnPartitionsRevoked(c.revoked),
		kgo.OnPartitionsLost(c.lost),
		// Hand-offs run between polls only (see Run).
		kgo.BlockRebalanceOnPoll(),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	// The session first: options the caller gives override it (tests).
	cl, err := kgo.NewClient(append(c.groupOpts(), kopts...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	c.cl = cl
	// A member that has not rejoined within the group's rebalance timeout
	// may be evicted and its partitions given to others: past it, waiting
	// cannot keep a send from being made twice any more. A hand-off takes
	// three quarters of it for the records in flight and the rest for its
	// commit, never less than DrainTimeout each.
	rebalance, _ := cl.OptValue(kgo.RebalanceTimeout).(time.Duration)
	c.waitLimit = max(cfg.DrainTimeout, rebalance*3/4)
	c.commitLimit = max(cfg.DrainTimeout, rebalance/4)
	return c, nil
}

// Client is the consumer's Kafka client (for admin calls and health).
func (c *Consumer) Client() *kgo.Client { return c.cl }

// Ready reports whether the consumer has joined its group, is not
// draining, and has no partition whose produce has failed for longer than
// StuckAfter.
func (c *Consumer) Ready() bool {
	return c.joined.Load() && !c.draining.Load() && c.Stuck() == 0
}

// ProduceFailures counts produces that failed (and were tried again).
func (c *Consumer) ProduceFailures() int64 { return c.produceFailures.Load() }

// Run consumes until ctx is done, then hands every partition back as a
// revoke does (the sends under way finished and their results produced,
// the checkpoint committed: handOff), leaves the group and closes the
// client. It returns nil on a clean shutdown.
//
// Rebalances happen only between polls (kgo.BlockRebalanceOnPoll): a
// poll's records reach their partitions' workers before AllowRebalance, so
// no hand-off runs beside accept. Accepting never waits: the workers start
// records as window slots free, and the tier topics stop fetching while
// MaxInFlight of their records wait (pollContext).
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.checkProtocol(ctx); err != nil {
		c.cl.Close()
		return err
	}
	var bg sync.WaitGroup
	bgctx, stop := context.WithCancel(context.Background())
	bg.Go(func() { c.commitLoop(bgctx) })
	bg.Go(func() { c.adapt(bgctx) })
	for {
		pctx, done := c.pollContext(ctx)
		// With ctx done this returns at once, still blocking rebalances:
		// the shutdown below runs with no hand-off beside it.
		fs := c.cl.PollRecords(pctx, c.pollSize())
		done()
		if fs.IsClientClosed() || ctx.Err() != nil {
			break
		}
		fs.EachError(func(topic string, part int32, err error) {
			if !errors.Is(err, context.Canceled) {
				c.log.Warn("fetch error", "topic", topic, "partition", part, "err", err)
			}
		})
		fs.EachPartition(c.accept)
		c.cl.AllowRebalance()
	}
	c.draining.Store(true)
	err := c.handOff(c.cl, c.owned(), true)
	stop()
	bg.Wait()
	c.endLife()
	c.resumes.Wait()
	c.cl.AllowRebalance() // Close leaves the group, which waits for it
	c.cl.Close()
	c.records.Wait() // bounded by the send timeout: nothing waits on the partition any more
	c.runners.stop()
	return err
}

// pollContext returns the context of the next poll. While MaxInFlight
// records of a tier wait for a window slot, that tier's topic is paused, so
// the records consumed but not started stay bounded, and the poll ends as
// soon as they fall below it (unqueue), to resume it. Each tier is paused
// on its own: a lower tier's backlog never keeps a higher tier's records
// unread, so tier 1 is fetched from a flood's first second. The retry
// topics are polled all along: their records come due while a backlog of
// first attempts waits, and they go first (window).
func (c *Consumer) pollContext(ctx context.Context) (context.Context, func()) {
	anyFull := false
	for i := range c.queued {
		full := c.queued[i].Load() >= int64(c.cfg.MaxInFlight)
		c.tierPause[i].set(c.cl, full)
		anyFull = anyFull || full
	}
	if !anyFull {
		return ctx, func() {}
	}
	pctx, cancel := context.WithCancel(ctx)
	c.wakeMu.Lock()
	c.wake = cancel
	c.wakeMu.Unlock()
	for i := range c.queued {
		if c.tierPause[i].on && c.queued[i].Load() < int64(c.cfg.MaxInFlight) {
			cancel() // room came before the wake was set
		}
	}
	return pctx, func() {
		c.wakeMu.Lock()
		c.wake = nil
		c.wakeMu.Unlock()
		cancel()
	}
}

// unqueue counts n records of tier index ti that no longer wait for a
// slot, ending a poll that waits for room when they fall below
// MaxInFlight (the other tiers' starts leave a paused tier's poll be).
func (c *Consumer) unqueue(ti, n int) {
	limit := int64(c.cfg.MaxInFlight)
	if left := c.queued[ti].Add(-int64(n)); n > 0 && left < limit && left+int64(n) >= limit {
		c.wakeMu.Lock()
		if c.wake != nil {
			c.wake()
		}
		c.wakeMu.Unlock()
	}
}

// pollSize is how many records the next poll may return: up to 4,096, but
// no more than the retry records MaxHeld has room for (at least 256).
func (c *Consumer) pollSize() int {
	return min(4096, max(c.cfg.MaxHeld-c.HeldTotal(), 256))
}

// accept hands the records one poll returned for a partition to its
// worker. It never waits: it runs while the poll blocks rebalances.
func (c *Consumer) accept(ftp kgo.FetchTopicPartition) {
	if len(ftp.Records) == 0 {
		return
	}
	c.mu.Lock()
	w := c.parts[topicPart{ftp.Topic, ftp.Partition}]
	c.mu.Unlock()
	if w == nil {
		// Cannot happen: workers live from assignment to hand-off, and
		// no hand-off runs between a poll and AllowRebalance.
		c.log.Error("records of a partition without a worker", "topic", ftp.Topic, "partition", ftp.Partition)
		return
	}
	w.push(ftp.Records)
}

// HeldTotal is how many retry records are in memory, held until due or
// waiting for a window slot (what MaxHeld bounds).
func (c *Consumer) HeldTotal() int {
	n := int64(0)
	for _, b := range c.budgets {
		n += b.load()
	}
	return int(n)
}

// Held returns how many retry records each retry topic holds in memory,
// waiting for their due time.
func (c *Consumer) Held() map[string]int {
	out := make(map[string]int)
	for _, w := range c.workers() {
		if w.src.Retry {
			out[w.topic] += w.heldCount()
		}
	}
	return out
}

// Stuck counts the partitions whose produce has failed for longer than
// StuckAfter.
func (c *Consumer) Stuck() int {
	n := 0
	now := c.cfg.Now()
	for _, w := range c.workers() {
		if s := w.stuckSince.Load(); s != 0 && now.Sub(time.Unix(0, s)) > c.cfg.StuckAfter {
			n++
		}
	}
	return n
}

// InFlight is the number of records being handled or produced.
func (c *Consumer) InFlight() int { return c.window.inUse() }

// InFlightLimit is the window's size: MaxInFlight, or less while the cores
// are saturated (adapt.go).
func (c *Consumer) InFlightLimit() int { return c.window.limit() }

// workers returns the workers of the partitions owned now.
func (c *Consumer) workers() []*worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	ws := make([]*worker, 0, len(c.parts))
	for _, w := range c.parts {
		ws = append(ws, w)
	}
	return ws
}

// owned returns the partitions owned now.
func (c *Consumer) owned() map[string][]int32 {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string][]int32)
	for k := range c.parts {
		m[k.topic] = append(m[k.topic], k.part)
	}
	return m
}
