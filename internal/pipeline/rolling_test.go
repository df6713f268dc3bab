package pipeline_test

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

// burnCPU keeps n cores busy with other processes' work until the test
// ends, as on a shared node.
func burnCPU(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a busy loop: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// TestRollingRestartUnderLoad: three processors share a group while a
// push service answers slowly (300 ms, or 1 s), takes 32 sends at a time
// from each, and fails a tenth of the events once with 503, so hundreds of
// records wait in each processor's pacer for longer than a hand-off waits;
// each processor in turn is stopped gracefully and started again, then a
// fourth joins, all while events flow and the cores are also busy with
// other processes' work. Nothing is killed, so nothing may be sent twice:
// every hand-off finishes or abandons what its partitions had, and commits
// what finished.
func TestRollingRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a minute of rolling restarts")
	}
	testenv.Long(t, "minutes of rolling restarts under load")
	for _, tc := range []struct {
		name    string
		latency time.Duration
		busy    int // cores' worth of other processes' work
	}{
		{"300ms push service, every core busy", 300 * time.Millisecond, runtime.NumCPU()},
		{"1s push service, one core busy", time.Second, 1},
	} {
		t.Run(tc.name, func(t *testing.T) { rollingRestart(t, tc.latency, tc.busy) })
	}
}

func rollingRestart(t *testing.T, latency time.Duration, busy int) {
	sim := pushsim.DefaultConfig()
	sim.Latency = latency
	env := testenv.Start(t, testenv.Options{Partitions: 6, NoProcessor: true, Sim: &sim, Pipeline: func(c *pipeline.Config) {
		c.Pacing.MaxLimit = 32
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

	members := []*member{startMember(t, env), startMember(t, env), startMember(t, env)}
	waitMembers(ctx, t, env, 3)
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
		members[i] = startMember(t, env)
		waitMembers(ctx, t, env, 3)
	}
	startMember(t, env)
	waitMembers(ctx, t, env, 4)
	<-produced
	if _, err := env.ReadOutcomes(ctx, n); err != nil {
		t.Fatal(err)
	}
	until(ctx, t, "every event delivered", func() bool { return len(delivered(env.Sim, subs)) == n })
	dups := 0
	for sub, k := range delivered(env.Sim, subs) {
		if k > 1 {
			dups++
			t.Logf("%s reached the phone %d times", subs[sub], k)
		}
	}
	if dups > 0 {
		t.Errorf("%d of %d notifications reached the phone more than once across graceful hand-offs", dups, n)
	}
}

// delivered counts the 2xx answers per subscription of subs.
func delivered(sim *pushsim.Server, subs map[string]string) map[string]int {
	got := make(map[string]int)
	for _, d := range sim.Deliveries() {
		if _, ok := subs[d.SubID]; ok && d.Status/100 == 2 {
			got[d.SubID]++
		}
	}
	return got
}
