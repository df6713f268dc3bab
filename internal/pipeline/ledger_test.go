package pipeline_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// mixCase is one kind of event in the ledger workload.
type mixCase = pushsim.MixKind

// ledgerMix returns the failure mix of event i (pushsim.LedgerMix).
func ledgerMix(i int) mixCase { return pushsim.LedgerMix(i) }

func TestLedger(t *testing.T) {
	const n = 2000
	wallStart := time.Now()
	var fakeElapsed time.Duration
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()

		start := time.Now()
		cases := make(map[string]mixCase, n)
		payloads := make(map[string][]byte, n)
		var recs []*kgo.Record
		for i := range n {
			c := ledgerMix(i)
			id := fmt.Sprintf("evt-%04d", i)
			sub := env.Sim.Subscribe(c.Script...)
			if c.Malformed {
				sub.Auth = sub.Auth[:16] // 12 bytes
			}
			payload := fmt.Sprintf(`{"n":%d,"id":%q}`, i, id)
			cases[id], payloads[sub.ID] = c, []byte(payload)
			tier := tiers.All[i%3]
			recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tier), Key: []byte(sub.ID), Value: testenv.Event(id, sub, payload, nil)})
		}
		env.Produce(ctx, recs...)

		got, err := env.ReadOutcomes(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		fakeElapsed = time.Since(start)
		checkLedger(t, env, n, cases, payloads, got)
	})
	wall := time.Since(wallStart)
	t.Logf("ledger: %d events in %s wall (%.0f events/s), %s of simulated retry time", n, wall.Round(time.Millisecond), float64(n)/wall.Seconds(), fakeElapsed.Round(time.Second))
}

// checkLedger asserts the ledger of a mix workload: every id exactly once
// with its expected outcome, and every delivered payload decrypted
// byte-exactly by the simulator.
func checkLedger(t *testing.T, env *testenv.Env, n int, cases map[string]mixCase, payloads map[string][]byte, got map[string][]testenv.Outcome) {
	t.Helper()
	for id, c := range cases {
		outs := got[id]
		if len(outs) != 1 {
			t.Errorf("%s (%s): %d outcome records, want exactly 1", id, c.Name, len(outs))
			continue
		}
		if o := outs[0]; topology.Outcome(o.Outcome) != c.Outcome || topology.Reason(o.Reason) != c.Reason {
			t.Errorf("%s (%s): outcome %s/%s, want %s/%s", id, c.Name, o.Outcome, o.Reason, c.Outcome, c.Reason)
		}
	}
	if len(got) != n {
		t.Errorf("outcomes for %d ids, want %d", len(got), n)
	}
	delivered := 0
	for _, d := range env.Sim.Deliveries() {
		if d.Status != 201 {
			continue
		}
		delivered++
		if want := payloads[d.SubID]; !d.Verified || !bytes.Equal(d.Payload, want) {
			t.Errorf("sub %s: simulator decrypted %q (verified %v), want %q", d.SubID, d.Payload, d.Verified, want)
		}
	}
	// 79% delivered first time, 10% after a 503 and 5% after a 429.
	if want := n * 94 / 100; delivered != want {
		t.Errorf("simulator answered 201 %d times, want %d", delivered, want)
	}
}
