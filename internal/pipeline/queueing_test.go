package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// queueingCell is one push service that serves from a fixed pool of workers per origin and
// queues the rest instead of refusing (pushsim Config.Workers), offered more than it serves.
type queueingCell struct {
	workers    int
	latency    time.Duration // the base latency; a tenth more of jitter on top
	processors int
	busy       int // cores' worth of other processes' work

	// The figures, judged on the requests that left the service's queue
	// from the warm-up on (taken up by a worker, or dropped).
	capacity   float64       // workers / mean latency, requests/s
	offered    float64       // events/s
	goodput    float64       // 2xx per second
	p50, p99   time.Duration // wait for a worker inside the service
	clientGone int           // requests the sender gave up on (the whole run)
	ladder     ladderFigures
	parks      parkFigures // the pacer's parkings on the ladder
}

// The shape of a queueing cell's run, in real time: several processors in one group cannot
// share a synctest bubble for long (TestPacingGridKafka).
const (
	queueingRun    = 20 * time.Second
	queueingWarmUp = 8 * time.Second
)

// runQueueing offers events at 1.5 times the service's capacity for queueingRun and measures
// the requests that left the service's queue from queueingWarmUp to two latencies before the
// end; timeouts over the whole run.
func runQueueing(t *testing.T, c *queueingCell) {
	sim := pushsim.DefaultConfig()
	jitter := c.latency / 10
	sim.Workers, sim.Latency, sim.LatencyJitter = c.workers, c.latency, jitter
	sim.VerifyEvery = 50
	c.capacity = float64(c.workers) / (c.latency + jitter/2).Seconds()
	c.offered = 1.5 * c.capacity
	env := testenv.Start(t, testenv.Options{Partitions: 6, NoProcessor: true, Sim: &sim})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	park := &parkings{policy: env.Policy}
	for range c.processors {
		startMember(t, env, pipeline.WithTracer(park))
	}
	waitMembers(ctx, t, env, c.processors)
	burnCPU(t, c.busy)
	subs := make([]pushsim.Subscription, 500)
	for i := range subs {
		subs[i] = env.Sim.Subscribe()
	}

	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	for n := 0; time.Since(start) < queueingRun; <-tick.C {
		for due := int(time.Since(start).Seconds() * c.offered); n < due; n++ {
			sub := subs[n%len(subs)]
			tier := tiers.Tier3
			switch n % 10 {
			case 0, 1:
				tier = tiers.Tier1
			case 2, 3, 4:
				tier = tiers.Tier2
			}
			id := fmt.Sprintf("q-%d", n)
			env.Client.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tier), Key: []byte(id),
				Value: testenv.Event(id, sub, "x", nil)}, nil)
		}
	}
	tick.Stop()
	// The window ends two latencies before now: every send a worker took
	// up in it has been answered and recorded.
	from, to := start.Add(queueingWarmUp), time.Now().Add(-2*c.latency)
	var ok int
	var waits []time.Duration
	for _, d := range env.Sim.Deliveries() {
		if d.ClientGone {
			c.clientGone++
		}
		// When it left the queue: a worker took it up, or it was dropped.
		if left := d.At.Add(d.Wait); left.Before(from) || !left.Before(to) {
			continue
		}
		waits = append(waits, d.Wait)
		if d.Status/100 == 2 {
			ok++
		}
	}
	c.goodput = float64(ok) / to.Sub(from).Seconds()
	c.p50, c.p99 = quantile(waits, 0.5), quantile(waits, 0.99)
	c.parks = park.figures()
	var err error
	if c.ladder, err = readLadder(ctx, env); err != nil {
		t.Fatal(err)
	}
	// Closing the service cuts the sends still queued short, so that the
	// processors stop without waiting for them.
	env.Sim.Close(ctx)
}

// TestQueueingServiceKafka: against a push service that never refuses but queues past a
// fixed pool of workers (16 or 64, 250 ms or 1 s a push), offered 1.5 times what it serves,
// one processor and three in a group keep the wait inside the service at most one base latency
// and send nothing that times out, yet keep its workers busy: goodput at least 90% of its
// capacity, judged after a warm-up.
func TestQueueingServiceKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("half a minute of real time per cell (make test-all)")
	}
	if raceOn {
		t.Skip("real-time goodput with the race detector judges the detector (make test-all runs it without)")
	}
	var cells []queueingCell
	for _, workers := range []int{16, 64} {
		for _, latency := range []time.Duration{250 * time.Millisecond, time.Second} {
			for _, processors := range []int{1, 3} {
				cells = append(cells, queueingCell{workers: workers, latency: latency, processors: processors})
			}
		}
	}
	// On a node whose cores are busy with other processes' work.
	cells = append(cells,
		queueingCell{workers: 64, latency: 250 * time.Millisecond, processors: 3, busy: 1},
		queueingCell{workers: 64, latency: time.Second, processors: 3, busy: 1})
	for _, c := range cells {
		t.Run(fmt.Sprintf("workers=%d/latency=%s/processors=%d/busy=%d", c.workers, c.latency, c.processors, c.busy), func(t *testing.T) {
			runQueueing(t, &c)
			// Known shortfalls (docs/pacing.md): the p99 wait inside a
			// 1 s service, 1.5-5.2 s; inside a 250 ms one of 16 workers,
			// 230-318 ms in 15 runs against the 275 ms bar, over it in 3.
			fail := bar(t, c.latency >= time.Second)
			waitFail := bar(t, c.latency >= time.Second || c.workers <= 16)
			t.Logf("capacity %.0f/s, offered %.0f/s: goodput %.0f/s (%.0f%%), wait p50 %s p99 %s, "+
				"%d sends timed out, %d requests given up inside the service; %d retry records, %d of events never sent, "+
				"%d parked by the pacer (%d by a pause shorter than the first step)",
				c.capacity, c.offered, c.goodput, 100*c.goodput/c.capacity, c.p50.Round(time.Millisecond), c.p99.Round(time.Millisecond),
				c.ladder.timeouts, c.clientGone, c.ladder.records, c.ladder.unsent, c.parks.parked, c.parks.short)
			// The service's own latency is the base and up to a tenth
			// more, as in the model grid.
			if base := c.latency * 11 / 10; c.p99 > base {
				waitFail("p99 wait inside the service %s, want at most one base latency (%s)", c.p99, base)
			}
			if c.ladder.timeouts > 0 || c.clientGone > 0 {
				t.Errorf("%d sends timed out, %d requests given up inside the service; want none", c.ladder.timeouts, c.clientGone)
			}
			if c.goodput < 0.9*c.capacity {
				fail("goodput %.0f/s, want at least 90%% of the capacity (%.0f/s)", c.goodput, c.capacity)
			}
		})
	}
}

// parkings follows, through every processor's reports (pipeline.WithTracer), the records the
// pacer sent to the ladder unsent, and the pause each was parked for.
type parkings struct {
	policy tiers.Policy

	mu     sync.Mutex
	parked int // paced to a retry step
	// short were parked by a pause shorter than their tier's first step,
	// which a processor could have held in memory; unpaused (among them)
	// by no pause at all (the origin's queue was full).
	short, unpaused int
	// late were parked by a pause shorter than the step they wait on, so
	// they wait longer than the pause.
	late int
}

var _ deliver.Tracer = (*parkings)(nil)

func (p *parkings) Start(ctx context.Context, _ *kgo.Record) context.Context { return ctx }

func (p *parkings) End(_ context.Context, r *deliver.Report) {
	if !r.Paced || r.Retry == nil {
		return
	}
	var pause time.Duration
	if !r.DeferredUntil.IsZero() {
		pause = r.DeferredUntil.Sub(r.Decision.Due.Add(-r.Decision.Delay))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.parked++
	if pause < p.policy.Ladder(r.Tier).Steps[0] {
		p.short++
	}
	if r.DeferredUntil.IsZero() {
		p.unpaused++
	}
	if pause < r.Decision.Delay {
		p.late++
	}
}

// parkFigures are a parkings' counts at one moment.
type parkFigures struct{ parked, short, unpaused, late int }

func (p *parkings) figures() parkFigures {
	p.mu.Lock()
	defer p.mu.Unlock()
	return parkFigures{p.parked, p.short, p.unpaused, p.late}
}

// quantile is the q-quantile of ws (nearest rank), 0 when empty.
func quantile(ws []time.Duration, q float64) time.Duration {
	if len(ws) == 0 {
		return 0
	}
	ws = slices.Sorted(slices.Values(ws))
	return ws[min(int(q*float64(len(ws))), len(ws)-1)]
}

// ladderFigures are what the retry topics and the DLQ hold.
type ladderFigures struct {
	records int // retry records
	// unsent are retry records of events never sent (push-attempt 0): the
	// pacer parked them; unsentFirst those of them on a tier's first
	// step, parked by a pause no longer than that step (a longer one
	// picks a later step).
	unsent, unsentFirst int
	// timeouts are the sends that timed out: records (retry or DLQ) whose
	// push-error says so, one per event and attempt.
	timeouts int
}

// readLadder reads every retry topic and the DLQ from their start to their current end.
func readLadder(ctx context.Context, env *testenv.Env) (ladderFigures, error) {
	first := make(map[string]bool)
	topics := []string{env.Names.DLQ()}
	for _, tier := range tiers.All {
		for i, step := range env.Policy.Ladder(tier).Steps {
			topic := env.Names.Retry(tier, step)
			topics = append(topics, topic)
			first[topic] = i == 0
		}
	}
	var f ladderFigures
	timedOut := make(map[string]bool) // key and attempt
	err := scanTopics(ctx, env, topics, func(r *kgo.Record) error {
		m, err := topology.DecodeMeta(r.Headers)
		if err != nil {
			return fmt.Errorf("record on %s: %w", r.Topic, err)
		}
		if m.Error == "timeout" {
			timedOut[fmt.Sprintf("%s/%d", r.Key, m.Attempt)] = true
		}
		if r.Topic == env.Names.DLQ() {
			return nil
		}
		f.records++
		if m.Attempt == 0 {
			f.unsent++
			if first[r.Topic] {
				f.unsentFirst++
			}
		}
		return nil
	})
	f.timeouts = len(timedOut)
	return f, err
}

// scanTopics calls each for every record of topics, from their start to their end when called.
func scanTopics(ctx context.Context, env *testenv.Env, topics []string, each func(*kgo.Record) error) error {
	ends, err := kadm.NewClient(env.Client).ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	want := make(map[string]map[int32]kgo.Offset)
	left := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = make(map[int32]kgo.Offset)
			}
			want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
			left++
		}
	})
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(append(env.KafkaOpts(), kgo.ConsumePartitions(want))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read %d partitions to their end: %w", left, ctx.Err())
		}
		var errs []error
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := ends.Lookup(r.Topic, r.Partition); ok && r.Offset == end.Offset-1 {
				left--
			}
			if err := each(r); err != nil {
				errs = append(errs, err)
			}
		})
		if len(errs) > 0 {
			return errs[0]
		}
	}
	return nil
}
