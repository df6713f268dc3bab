package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

// TestSlowOriginBesideFast: the requests waiting for a push service that
// queues (8 workers, 1 s: 8/s) hold window slots, and the same
// partitions carry a second service that answers in 10 ms. Offered 100/s
// each, in the same tiers, for 30 s: the fast service gets its 100/s every
// second, though the slow one's backlog grows to thousands, and the slow
// one is kept busy: it is not left idle while its backlog waits on the
// ladder.
func TestSlowOriginBesideFast(t *testing.T) {
	if raceOn {
		t.Skip("minutes with the race detector; make test runs it without")
	}
	synctest.Test(t, func(t *testing.T) {
		slow := pushsim.DefaultConfig()
		slow.Latency, slow.Workers = time.Second, 8
		fast := pushsim.DefaultConfig()
		fast.Latency = 10 * time.Millisecond
		env := testenv.Start(t, testenv.Options{Virtual: true, Sim: &slow, MoreSims: []pushsim.Config{fast}})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
		defer cancel()

		const seconds, rate = 30, 100 // per origin
		start := time.Now()
		n := 0
		for tick := range seconds * 10 {
			for i := range rate / 10 {
				for j, sim := range env.Sims[:2] {
					sub := sim.Subscribe()
					tier := tiers.All[1+(tick*rate/10+i)%2] // tiers 2 and 3
					env.Client.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tier), Key: []byte(sub.ID),
						Value: testenv.Event(fmt.Sprintf("o%d-%d", j, n), sub, "x", nil)}, nil)
					n++
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := env.ReadOutcomes(ctx, n); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)

		perSecond := make(map[int]int)
		for _, d := range env.Sims[1].Deliveries() {
			perSecond[int(d.At.Sub(start)/time.Second)]++
		}
		for s := 1; s < seconds; s++ {
			if perSecond[s] < rate*9/10 {
				t.Errorf("the fast origin got %d requests in second %d, want about %d", perSecond[s], s, rate)
			}
		}
		// Kept busy: its last request reaches it within a tenth of the
		// time its workers alone need for its share (its arrivals per
		// second swing with the concurrency law's rounds; their sum does
		// not).
		capacity := float64(slow.Workers) / slow.Latency.Seconds()
		var last time.Duration
		for _, d := range env.Sims[0].Deliveries() {
			last = max(last, d.At.Sub(start))
		}
		need := time.Duration(float64(seconds*rate) / capacity * float64(time.Second))
		t.Logf("%d events in %s; the last request reached the slow origin after %s (its workers alone need %s)",
			n, took.Round(time.Second), last.Round(time.Second), need.Round(time.Second))
		if last > need*11/10 {
			t.Errorf("the slow origin's last request after %s, want within %s: its backlog waited elsewhere while it idled", last.Round(time.Second), (need * 11 / 10).Round(time.Second))
		}
	})
}
