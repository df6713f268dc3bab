package pipeline_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

// TestRollingRestartQueueing is TestRollingRestartUnderLoad against a push service that
// never refuses but serves from a fixed pool of workers and queues the rest, with the
// processors' pacing as configured by default: 6,000 events offered at 1,200/s to a service
// that serves 213/s (64 workers, 300 ms) or 64/s (64 workers, 1 s), three processors each stopped gracefully and started again, then a
// fourth joining, while the cores are busy with other processes' work. The processors must
// find the service's pace themselves: no send may time out, in the service's queue or their
// own (sent again, it reaches the phone twice), and no event may be parked on the ladder
// unsent by a pause shorter than its tier's first step: that one a processor holds in memory.
func TestRollingRestartQueueing(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute or more of rolling restarts (make test-all)")
	}
	if raceOn {
		t.Skip("minutes with the race detector (make test-all runs it without)")
	}
	for _, tc := range []struct {
		name    string
		latency time.Duration
		workers int // per origin
		busy    int
	}{
		{"300ms push service with 64 workers, every core busy", 300 * time.Millisecond, 64, runtime.NumCPU()},
		{"1s push service with 64 workers, one core busy", time.Second, 64, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { rollingRestartQueueing(t, tc.latency, tc.workers, tc.busy) })
	}
}

func rollingRestartQueueing(t *testing.T, latency time.Duration, workers, busy int) {
	sim := pushsim.DefaultConfig()
	sim.Latency, sim.Workers = latency, workers
	env := testenv.Start(t, testenv.Options{Partitions: 6, NoProcessor: true, Sim: &sim, Pipeline: func(c *pipeline.Config) {
		c.DrainTimeout = 3 * time.Second
	}})
	burnCPU(t, busy)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	const n = 6000
	subs := make(map[string]string, n) // sub id → event id
	recs := make([]*kgo.Record, 0, n)
	for i := range n {
		var script []pushsim.Response
		if i%10 == 3 {
			script = append(script, pushsim.Response{Status: 503})
		}
		s := env.Sim.Subscribe(script...)
		id := fmt.Sprintf("ev-%d", i)
		subs[s.ID] = id
		recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.All[i%3]), Key: []byte(id), Value: testenv.Event(id, s, "x", nil)})
	}

	park := &parkings{policy: env.Policy}
	tracer := pipeline.WithTracer(park)
	members := []*member{startMember(t, env, tracer), startMember(t, env, tracer), startMember(t, env, tracer)}
	waitMembers(ctx, t, env, 3)
	start := time.Now()
	produced := make(chan struct{})
	go func() {
		// 300 events every 250 ms: the load runs through every hand-off.
		defer close(produced)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < n; i += 300 {
			env.Produce(ctx, recs[i:min(i+300, n)]...)
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	for i := range members {
		if err := members[i].stop(); err != nil {
			t.Logf("member %d stopped: %v", i, err)
		}
		members[i] = startMember(t, env, tracer)
		waitMembers(ctx, t, env, 3)
	}
	startMember(t, env, tracer)
	waitMembers(ctx, t, env, 4)
	<-produced
	// Past the deadline the figures are still worth reading: they say
	// what the run reached.
	if _, err := env.ReadOutcomes(ctx, n); err != nil {
		t.Error(err)
	}
	for len(delivered(env.Sim, subs)) < n && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	if got := len(delivered(env.Sim, subs)); got < n {
		t.Errorf("%d of %d events delivered after %s", got, n, took.Round(time.Second))
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	dups := 0
	for _, k := range delivered(env.Sim, subs) {
		if k > 1 {
			dups++
		}
	}
	gone, dropped := 0, 0 // given up on inside the service; of them, while queued
	for _, d := range env.Sim.Deliveries() {
		if d.ClientGone {
			gone++
		}
		if d.Status == pushsim.StatusClientClosed {
			dropped++
		}
	}
	waits := env.Sim.Waits(start)
	ladder, err := readLadder(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	parks := park.figures()
	capacity := float64(workers) / latency.Seconds()
	t.Logf("%d of %d events delivered in %s (the service's capacity alone: %s); wait inside the service p50 %s p99 %s max %s; "+
		"%d duplicates, %d sends timed out, %d requests given up inside the service (%d while queued); "+
		"%d retry records, %d of events never sent (%d on a first step); "+
		"%d records parked by the pacer, %d by a pause shorter than their tier's first step (%d by none), %d shorter than the step they wait on",
		len(delivered(env.Sim, subs)), n, took.Round(time.Second), (time.Duration(float64(n) / capacity * float64(time.Second))).Round(time.Second),
		quantile(waits, 0.5).Round(time.Millisecond), quantile(waits, 0.99).Round(time.Millisecond), quantile(waits, 1).Round(time.Millisecond),
		dups, ladder.timeouts, gone, dropped, ladder.records, ladder.unsent, ladder.unsentFirst, parks.parked, parks.short, parks.unpaused, parks.late)
	if dups > 0 {
		t.Errorf("%d of %d notifications reached the phone more than once", dups, n)
	}
	if ladder.timeouts > 0 || gone > 0 {
		t.Errorf("%d sends timed out and %d requests were given up inside the service; want none", ladder.timeouts, gone)
	}
	if parks.short > 0 {
		t.Errorf("%d records parked on the ladder unsent by a pause shorter than their tier's first step; want none (held in memory)", parks.short)
	}
}
