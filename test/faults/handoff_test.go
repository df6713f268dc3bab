package faults_test

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

// busyLoops keeps n cores busy with other processes' work until stop is
// called, as on a shared Kubernetes node.
func busyLoops(t *testing.T, n int) (stop func()) {
	t.Helper()
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a busy loop: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// Scenario 7: graceful hand-offs under load. Three processors joined as by
// default (dynamic members: a stopped one leaves and its partitions move at
// once), a push service answering in 300 ms and taking 32 sends at a time
// from each, a tenth of the events failing once with 503, 6,000 events over
// the three tiers produced faster than it takes them;
// while they flow, each processor in turn is stopped with SIGTERM and
// started again, then a fourth joins — and every core is also busy with
// other processes' work. Nothing is killed, so nothing may reach a phone
// twice and nothing may be lost.
func scenarioHandoffUnderLoad(t *testing.T) row {
	const n = 6000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	simCfg := pushsim.DefaultConfig()
	simCfg.Latency, simCfg.LatencyJitter = 300*time.Millisecond, 50*time.Millisecond
	// A push service that takes 32 sends at a time from each processor,
	// and hand-offs that wait at most 3 s: records queue in the pacer for
	// longer than a hand-off waits, as behind any tight push service.
	c := newCluster(ctx, t, clusterOpts{procs: 3, sim: &simCfg, dynamic: true,
		procArgs: []string{"--pacing-max-concurrency", "32", "--drain-timeout", "3s"}})
	stopBusy := busyLoops(t, runtime.NumCPU())
	defer stopBusy()

	evs := make([]*event, n)
	for i := range n {
		k := pushsim.MixOK
		if i%10 == 3 {
			k = pushsim.Mix503Once
		}
		id := fmt.Sprintf("handoff-%05d", i)
		sub := c.sim.Subscribe(k.Script...)
		t := tiers.All[i%len(tiers.All)]
		evs[i] = &event{id: id, kind: k, tier: t, rec: &kgo.Record{
			Topic: names.Tier(t), Key: []byte(sub.ID), Value: testenv.Event(id, sub, id, nil),
		}}
	}
	// 1,200 events a second for 5 s, three times what the push service
	// takes: the restarts and the join happen while a backlog waits in
	// the pacers and events still arrive.
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < n; i += 300 {
			c.produce(ctx, records(evs[i:min(i+300, n)]))
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := c.sim.WaitFor(ctx, func(s pushsim.Stats) bool { return s.Requests >= n/6 }); err != nil {
		t.Fatal(err)
	}
	first := time.Now()
	worst := c.restartInTurn(ctx, t)
	began := time.Now()
	fourth := c.addProc()
	c.waitReady(ctx, fourth)
	if err := c.waitStable(ctx, 4); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s joined at %+.1f s; group stable after %s", fourth.name, began.Sub(first).Seconds(), secs(time.Since(began)))
	<-produced
	if err := c.ledger.waitAll(ctx, evs); err != nil {
		t.Errorf("%v (%d missing)", err, c.ledger.missing(evs))
	}
	stopBusy()
	c.checkRunning()
	tl := c.check(t, evs)
	if sends, outcomes := tl.handOffDups(); tl.lost != 0 || sends != 0 || outcomes != 0 {
		t.Errorf("graceful hand-offs under load: %d lost, %d duplicate deliveries (%d more after a timed-out send), %d duplicate ledger records, want none; duplicate deliveries relative to the first SIGTERM: %s",
			tl.lost, sends, tl.dupTimedOut, outcomes, describeTimes(duplicateTimes(c.sim), first))
	}
	return row{
		scenario: "7. graceful hand-offs under load", events: n, lost: tl.lost, dups: tl.dupSends,
		recover: secs(worst) + " (slowest restart)",
		notes: fmt.Sprintf("dynamic members, 300 ms push service taking 32 at a time, 1,200 events/s for 5 s, drain 3 s, %d busy loops, SIGTERM ×3 then a fourth joins; duplicate ledger records %d%s",
			runtime.NumCPU(), tl.dupOutcomes, tl.timedOutNote()),
	}
}
