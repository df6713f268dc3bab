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

// sendTimes returns when the simulator received each request of sub.
func sendTimes(sim *pushsim.Server, subID string) []time.Time {
	var ts []time.Time
	for _, d := range deliveries(sim, subID) {
		ts = append(ts, d.At)
	}
	return ts
}

// deliveries returns every request of sub the simulator received.
func deliveries(sim *pushsim.Server, subID string) []pushsim.Delivery {
	var ds []pushsim.Delivery
	for _, d := range sim.Deliveries() {
		if d.SubID == subID {
			ds = append(ds, d)
		}
	}
	return ds
}

// TestRetryTiming checks every wait of the ladder on a fake clock: never
// early, and late by at most the jitter plus 100 ms.
func TestRetryTiming(t *testing.T) {
	const slack = 100 * time.Millisecond
	jitterOf := func(step time.Duration) time.Duration { return time.Duration(float64(step) * 0.1) }
	tests := []struct {
		name     string
		script   []pushsim.Response
		ttl      int
		outcome  topology.Outcome
		attempts int
		// gaps are the minimum waits between consecutive sends, and
		// maxGaps the maximum (0: unbounded above).
		gaps, maxGaps []time.Duration
	}{
		{
			name:     "fails twice then delivered",
			script:   []pushsim.Response{{Status: 503}, {Status: 503}},
			ttl:      3600,
			outcome:  topology.OutcomeDelivered,
			attempts: 3,
			gaps:     []time.Duration{2 * time.Second, 8 * time.Second},
			maxGaps:  []time.Duration{2*time.Second + jitterOf(2*time.Second) + slack, 8*time.Second + jitterOf(8*time.Second) + slack},
		},
		{
			name:     "Retry-After 30 is a floor",
			script:   []pushsim.Response{{Status: 429, RetryAfter: "30"}},
			ttl:      3600,
			outcome:  topology.OutcomeDelivered,
			attempts: 2,
			gaps:     []time.Duration{30 * time.Second},
			maxGaps:  []time.Duration{time.Minute + jitterOf(time.Minute) + slack},
		},
		{
			name:     "Retry-After beyond the ladder hops without spending attempts",
			script:   []pushsim.Response{{Status: 429, RetryAfter: "150"}},
			ttl:      3600,
			outcome:  topology.OutcomeDelivered,
			attempts: 2,
			gaps:     []time.Duration{150 * time.Second},
			maxGaps:  []time.Duration{3*time.Minute + 3*jitterOf(time.Minute) + slack},
		},
		{
			name:     "four failures: the TTL keeps counting from production over every hop",
			script:   []pushsim.Response{{Status: 503}, {Status: 500}, {Status: 502}, {Status: 504}},
			ttl:      3600,
			outcome:  topology.OutcomeDelivered,
			attempts: 5,
			gaps:     []time.Duration{2 * time.Second, 8 * time.Second, time.Minute, time.Minute},
		},
		{
			name:     "TTL runs out on the ladder",
			script:   []pushsim.Response{{Status: 500, Repeat: true}},
			ttl:      10,
			outcome:  topology.OutcomeExpired,
			attempts: 2, // sent at 0 and ~2 s; the 8 s step would end after the TTL
			gaps:     []time.Duration{2 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1})
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				sub := env.Sim.Subscribe(tt.script...)
				created := time.Now()
				env.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte(sub.ID),
					Value: testenv.Event("evt-timing", sub, "hello", map[string]any{"ttl": tt.ttl})})
				got, err := env.ReadOutcomes(ctx, 1)
				if err != nil {
					t.Fatal(err)
				}
				o := got["evt-timing"][0]
				if topology.Outcome(o.Outcome) != tt.outcome || o.Attempts != tt.attempts {
					t.Errorf("outcome %s after %d attempts, want %s after %d", o.Outcome, o.Attempts, tt.outcome, tt.attempts)
				}
				ts := sendTimes(env.Sim, sub.ID)
				if len(ts) != tt.attempts {
					t.Fatalf("simulator saw %d sends, want %d", len(ts), tt.attempts)
				}
				for i, min := range tt.gaps {
					gap := ts[i+1].Sub(ts[i])
					if gap < min {
						t.Errorf("send %d came %s after send %d, want at least %s", i+2, gap, i+1, min)
					}
					if i < len(tt.maxGaps) && gap > tt.maxGaps[i] {
						t.Errorf("send %d came %s after send %d, want at most %s", i+2, gap, i+1, tt.maxGaps[i])
					}
				}
				deadline := created.Add(time.Duration(tt.ttl) * time.Second)
				for i, at := range ts {
					if at.After(deadline) {
						t.Errorf("send %d at %s, after the TTL ran out at %s", i+1, at.Sub(created), deadline.Sub(created))
					}
				}
				// The TTL sent is what remains of the event's, counted from
				// when it was produced (it has no created_at), at every hop.
				for i, d := range deliveries(env.Sim, sub.ID) {
					left := tt.ttl - int(d.At.Sub(created)/time.Second)
					if d.TTL > left || d.TTL < left-1 {
						t.Errorf("send %d at %s had TTL %d, want %d (what remains)", i+1, d.At.Sub(created), d.TTL, left)
					}
				}
				if took := ts[len(ts)-1].Sub(created); time.Duration(o.LatencyMS)*time.Millisecond < took {
					t.Errorf("latency_ms = %d, want at least the %s from production to the last send", o.LatencyMS, took)
				}
			})
		})
	}
}

// TestHeadOfLine: an endpoint that takes 5 s to answer holds back no other
// event of its partition.
func TestHeadOfLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		slow := env.Sim.Subscribe(pushsim.Response{Status: 201, Latency: 5 * time.Second})
		recs := []*kgo.Record{{Topic: env.Names.Tier(tiers.Tier1), Value: testenv.Event("slow", slow, "slow", nil)}}
		fast := make(map[string]bool)
		for i := range 20 {
			sub := env.Sim.Subscribe()
			fast[sub.ID] = true
			recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Value: testenv.Event("fast-"+string(rune('a'+i)), sub, "fast", nil)})
		}
		start := time.Now()
		env.Produce(ctx, recs...)
		if _, err := env.ReadOutcomes(ctx, 21); err != nil {
			t.Fatal(err)
		}
		for _, d := range env.Sim.Deliveries() {
			if fast[d.SubID] && d.At.Sub(start) >= time.Second {
				t.Errorf("a fast event was sent %s after production, behind the slow one", d.At.Sub(start))
			}
		}
		var slowDone time.Time
		for _, d := range env.Sim.Deliveries() {
			if d.SubID == slow.ID {
				slowDone = d.At
			}
		}
		if slowDone.IsZero() {
			t.Error("the slow event was never sent")
		}
	})
}

// TestRetryAheadOfBacklog: a retry that comes due while every tier
// partition has a backlog waiting for the window takes the next free slot,
// not a turn after each of them.
func TestRetryAheadOfBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const parts, window, perTier = 6, 4, 100
		const latency = 200 * time.Millisecond
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: parts, Pipeline: func(c *pipeline.Config) { c.MaxInFlight = window }})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		flaky := env.Sim.Subscribe(pushsim.Response{Status: 503})
		recs := []*kgo.Record{{Topic: env.Names.Tier(tiers.Tier1), Key: []byte("flaky"), Value: testenv.Event("flaky", flaky, "x", nil)}}
		env.Produce(ctx, recs...)
		recs = recs[:0]
		for _, tier := range tiers.All {
			for i := range perTier {
				id := fmt.Sprintf("%s-%d", tier, i)
				sub := env.Sim.Subscribe(pushsim.Response{Status: 201, Latency: latency})
				recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tier), Key: []byte(id), Value: testenv.Event(id, sub, "x", nil)})
			}
		}
		env.Produce(ctx, recs...)
		if _, err := env.ReadOutcomes(ctx, 1+3*perTier); err != nil {
			t.Fatal(err)
		}
		ts := sendTimes(env.Sim, flaky.ID)
		if len(ts) != 2 {
			t.Fatalf("%d sends of the retried event, want 2", len(ts))
		}
		// Due 2 s after the failure plus at most 10% jitter; then one
		// send's latency at most until a slot frees.
		if gap, limit := ts[1].Sub(ts[0]), 2*time.Second+200*time.Millisecond+latency+100*time.Millisecond; gap > limit {
			t.Errorf("the retry was sent %s after the failed send, want at most %s: it waited behind the backlog", gap, limit)
		}
		var last time.Time
		for _, d := range env.Sim.Deliveries() {
			if d.At.After(last) {
				last = d.At
			}
		}
		if last.Sub(ts[1]) < time.Second {
			t.Errorf("the backlog was drained %s after the retry: it did not compete with it", last.Sub(ts[1]))
		}
	})
}
