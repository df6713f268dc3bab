package consume_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/consume"
	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

// TestLagDue: a backlog of retries in a step that is not due yet, most of
// them not even fetched (--max-held), counts as not due as a whole: due
// lag, what an autoscaler scales on, is nil until the step comes due, and
// everything is nil again once delivered.
func TestLagDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 900
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 2,
			Pipeline: func(pc *pipeline.Config) {
				pc.MaxHeld = 60
				// Every first send fails: with pacing the breaker would
				// defer most of them instead of sending.
				pc.Pacing.Enabled = false
			}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		p := env.Processor()
		produceFailingOnce(t, ctx, env, n)
		time.Sleep(time.Second) // the tier topic's commits

		step := env.Names.Retry(tiers.Tier3, env.Policy.Ladder(tiers.Tier3).Steps[0])
		total, notDue, tier := sumLag(t, ctx, step, env.Names.Tier(tiers.Tier3), p)
		if total != n || notDue != n {
			t.Errorf("%s: lag %d, not due %d; want %d and %d", step, total, notDue, n, n)
		}
		if tier != 0 {
			t.Errorf("tier topic lag %d after every first send", tier)
		}
		if held := p.Held()[step]; held >= n {
			t.Errorf("%d records held in memory: --max-held let everything in, the unfetched part goes untested", held)
		}

		if _, err := env.ReadOutcomes(ctx, n); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if total, notDue, _ := sumLag(t, ctx, step, env.Names.Tier(tiers.Tier3), p); total != 0 || notDue != 0 {
			t.Errorf("after delivery: lag %d, not due %d", total, notDue)
		}
	})
}

// TestLagAddsUpOverMembers: each processor reports only the partitions it
// owns, so the processors' lags add up to the group's (a Prometheus sum
// over the replicas is the group's due lag) instead of each reporting the
// whole group's. Loopback and real time: a rebalance in a synctest bubble
// stops its clock (see internal/pipeline's handoff tests).
func TestLagAddsUpOverMembers(t *testing.T) {
	const n = 300
	env := testenv.Start(t, testenv.Options{NoProcessor: true, Partitions: 4,
		Pipeline: func(pc *pipeline.Config) {
			pc.Pacing.Enabled = false
			// A minute in the first step (a topic of the default ladders)
			// leaves the test time to look in real time.
			pc.Policy.Tier3.Steps = []time.Duration{time.Minute}
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p1, p2 := startMember(t, env), startMember(t, env)
	for !p1.Ready() || !p2.Ready() || !owns(ctx, p1) || !owns(ctx, p2) {
		if ctx.Err() != nil {
			t.Fatal("the two processors never both owned partitions")
		}
		time.Sleep(50 * time.Millisecond)
	}
	produceFailingOnce(t, ctx, env, n)
	time.Sleep(500 * time.Millisecond) // the tier topic's commits

	step := env.Names.Retry(tiers.Tier3, time.Minute)
	total, notDue, tier := sumLag(t, ctx, step, env.Names.Tier(tiers.Tier3), p1, p2)
	group := groupLag(t, ctx, env, step, nil)
	if total != n || group != n || notDue != n {
		t.Errorf("%s: members' lag %d (not due %d), the group's %d; want %d", step, total, notDue, group, n)
	}
	if tier != 0 {
		t.Errorf("tier topic lag %d after every first send", tier)
	}
	g, err := testenv.DescribeGroup(ctx, env.Client, env.PipelineConfig().Group)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*pipeline.Processor{p1, p2} {
		id, _ := p.Client().GroupMetadata()
		var mine []int32
		for _, m := range g.Members {
			if m.ID == id {
				mine = m.Assigned[step]
			}
		}
		l, err := p.Lag(ctx)
		want := int64(0)
		if len(mine) > 0 {
			want = groupLag(t, ctx, env, step, mine)
		}
		if err != nil || l[step].Total != want {
			t.Errorf("a member owning %s %v reports %+v (%v), want a lag of %d: its own partitions'", step, mine, l[step], err, want)
		}
	}
}

// groupLag is the group's lag on topic over parts (every partition when
// nil): end offsets less committed ones (the log's start where nothing is
// committed). The client's metadata of a topic created a moment ago may
// not know it yet: asked again until it does.
func groupLag(t *testing.T, ctx context.Context, env *testenv.Env, topic string, parts []int32) int64 {
	t.Helper()
	adm := kadm.NewClient(env.Client)
	committed, err := adm.FetchOffsetsForTopics(ctx, env.PipelineConfig().Group, topic)
	for err != nil && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		committed, err = adm.FetchOffsetsForTopics(ctx, env.PipelineConfig().Group, topic)
	}
	if err != nil {
		t.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	ends.Each(func(e kadm.ListedOffset) {
		if parts != nil && !slices.Contains(parts, e.Partition) {
			return
		}
		from := int64(0)
		if s, ok := starts.Lookup(topic, e.Partition); ok {
			from = s.Offset
		}
		if r, ok := committed.Lookup(topic, e.Partition); ok && r.At >= 0 {
			from = r.At
		}
		sum += max(e.Offset-from, 0)
	})
	return sum
}

// produceFailingOnce produces n tier-3 events whose first send gets a 503
// and waits until the simulator has answered all of them.
func produceFailingOnce(t *testing.T, ctx context.Context, env *testenv.Env, n int) {
	t.Helper()
	var recs []*kgo.Record
	for i := range n {
		sub := env.Sim.Subscribe(pushsim.Response{Status: 503})
		recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.Tier3), Key: []byte(sub.ID), Value: testenv.Event(fmt.Sprintf("lag-%d", i), sub, "x", nil)})
	}
	env.Produce(ctx, recs...)
	for env.Sim.Stats().Requests < int64(n) {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d first sends", env.Sim.Stats().Requests, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// owns reports whether p has been assigned partitions.
func owns(ctx context.Context, p *pipeline.Processor) bool {
	l, err := p.Lag(ctx)
	return err == nil && len(l) > 0
}

// sumLag adds the processors' lags of step and tier.
func sumLag(t *testing.T, ctx context.Context, step, tier string, ps ...*pipeline.Processor) (total, notDue, tierTotal int64) {
	t.Helper()
	for _, p := range ps {
		l, err := p.Lag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var mine consume.Lag = l[step]
		total += mine.Total
		notDue += mine.NotDue
		tierTotal += l[tier].Total
	}
	return total, notDue, tierTotal
}

// startMember starts a processor of env's group; the test's cleanup
// stops it.
func startMember(t *testing.T, env *testenv.Env) *pipeline.Processor {
	t.Helper()
	hc := dispatch.NewHTTPClient(env.HTTPClient())
	t.Cleanup(hc.CloseIdleConnections)
	sender, err := dispatch.New(dispatch.Config{VAPID: env.VAPID}, hc)
	if err != nil {
		t.Fatal(err)
	}
	// Frequent heartbeats make the rebalance take well under a second.
	kopts := append(env.KafkaOpts(), kgo.HeartbeatInterval(200*time.Millisecond))
	p, err := pipeline.New(env.PipelineConfig(), discard(), sender, env.Signer, kopts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	})
	return p
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
