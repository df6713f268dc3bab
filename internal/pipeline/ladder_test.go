package pipeline_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// TestCustomLadder runs the contract's example ladder end to end on a fake
// clock: tiers: {tier2: {steps: [1s, 5s], max_attempts: 3, weight: 3}}.
// An event that always fails is sent three times, 1 s then 5 s apart, and
// dead-lettered as max_attempts. And a record that waits on a step the new
// ladder dropped (push.tier2.retry-30s, from the ladder before) is still
// consumed after the restart, sent when due, and continues on the new
// ladder: its next retry waits 5 s on push.tier2.retry-5s.
func TestCustomLadder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const slack = 100 * time.Millisecond
		jitter := func(step time.Duration) time.Duration { return time.Duration(float64(step) * 0.1) }
		s := time.Second

		// The ladder before: tier2 retries once, after 30 s.
		before := tiers.DefaultPolicy()
		before.Tier2 = tiers.Ladder{Steps: []time.Duration{30 * s}, MaxAttempts: 5, Weight: 3}
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1, Policy: &before})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		dropped := env.Names.Retry(tiers.Tier2, 30*s)
		waiting := env.Sim.Subscribe(pushsim.Response{Status: 503}, pushsim.Response{Status: 503})
		env.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tiers.Tier2), Key: []byte(waiting.ID), Value: testenv.Event("evt-waiting", waiting, "waiting", nil)})
		if _, err := env.ReadRecords(ctx, dropped, 1); err != nil {
			t.Fatal(err)
		}
		if err := env.StopProcessor(); err != nil {
			t.Fatal(err)
		}

		// The new ladder, as the config file's tiers: gives it.
		custom := tiers.DefaultPolicy()
		custom.Tier2 = tiers.Ladder{Steps: []time.Duration{s, 5 * s}, MaxAttempts: 3, Weight: 3}
		env.SetPolicy(custom)
		env.StartProcessor()
		failing := env.Sim.Subscribe(pushsim.Response{Status: 503, Repeat: true})
		env.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tiers.Tier2), Key: []byte(failing.ID), Value: testenv.Event("evt-custom", failing, "custom", nil)})
		got, err := env.ReadOutcomes(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}

		checkGaps := func(name string, ts []time.Time, min, max []time.Duration) {
			t.Helper()
			if len(ts) != len(min)+1 {
				t.Fatalf("%s: the simulator saw %d sends, want %d", name, len(ts), len(min)+1)
			}
			for i := range min {
				if gap := ts[i+1].Sub(ts[i]); gap < min[i] || gap > max[i] {
					t.Errorf("%s: send %d came %s after send %d, want %s..%s", name, i+2, gap, i+1, min[i], max[i])
				}
			}
		}

		o := got["evt-custom"][0]
		if o.Outcome != string(topology.OutcomeDead) || o.Reason != string(topology.ReasonMaxAttempts) || o.Attempts != 3 {
			t.Errorf("evt-custom: %s/%s after %d attempts, want dead/max_attempts after 3 (max_attempts: 3)", o.Outcome, o.Reason, o.Attempts)
		}
		checkGaps("evt-custom", sendTimes(env.Sim, failing.ID),
			[]time.Duration{s, 5 * s},
			[]time.Duration{s + jitter(s) + slack, 5*s + jitter(5*s) + slack})

		o = got["evt-waiting"][0]
		if o.Outcome != string(topology.OutcomeDelivered) || o.Attempts != 3 {
			t.Errorf("evt-waiting: %s after %d attempts, want delivered after 3", o.Outcome, o.Attempts)
		}
		checkGaps("evt-waiting", sendTimes(env.Sim, waiting.ID),
			[]time.Duration{30 * s, 5 * s},
			[]time.Duration{time.Hour, 5*s + jitter(5*s) + slack})
		// Both continued on the new ladder's 5 s step, once each.
		rs, err := env.ReadRecords(ctx, env.Names.Retry(tiers.Tier2, 5*s), 2)
		if err != nil {
			t.Fatal(err)
		}
		keys := make(map[string]int)
		for _, r := range rs {
			keys[string(r.Key)]++
		}
		if len(rs) != 2 || keys[waiting.ID] != 1 || keys[failing.ID] != 1 {
			t.Errorf("push.tier2.retry-5s holds %d records by key %v, want one of evt-waiting's and one of evt-custom's", len(rs), keys)
		}
	})
}
