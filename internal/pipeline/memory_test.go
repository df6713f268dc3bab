package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// TestMaxHeld: with every event of a burst failing at once, their retries
// all come due together and each retry partition would fetch and hold all
// of its own; MaxHeld stops every retry topic's fetching, and the records
// past it wait in Kafka, sent all the same.
func TestMaxHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, maxHeld, parts = 1500, 100, 4
		// Pacing off: a burst failing at once reads as an outage and opens
		// the breaker, whose probes are first sends, which fail here
		// every time; this tests the bound on what is held, not the
		// breaker.
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: parts, Pipeline: func(c *pipeline.Config) {
			c.MaxHeld, c.Pacing.Enabled = maxHeld, false
		}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var recs []*kgo.Record
		for i := range n {
			id := fmt.Sprintf("e%d", i)
			sub := env.Sim.Subscribe(pushsim.Response{Status: 503})
			recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte(id), Value: testenv.Event(id, sub, "x", nil)})
		}
		var peak int
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() {
			defer close(sampled)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				peak = max(peak, env.Processor().HeldTotal())
				select {
				case <-tick.C:
				case <-stop:
					return
				}
			}
		}()
		env.Produce(ctx, recs...)
		outs, err := env.ReadOutcomes(ctx, n)
		close(stop)
		<-sampled
		if err != nil {
			t.Fatal(err)
		}
		for id, os := range outs {
			if os[0].Outcome != string(topology.OutcomeDelivered) {
				t.Fatalf("%s: %s, want delivered on the retry", id, os[0].Outcome)
			}
		}
		// MaxHeld plus the smallest poll: a poll is accepted whole.
		if limit := maxHeld + 256; peak > limit {
			t.Errorf("%d retry records held at once, want at most %d (MaxHeld %d)", peak, limit, maxHeld)
		}
		if peak < maxHeld {
			t.Errorf("at most %d retry records held: the test never reached MaxHeld %d", peak, maxHeld)
		}
	})
}
