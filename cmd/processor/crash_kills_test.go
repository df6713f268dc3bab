package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/topology"
)

// TestCrashThreeKills: the processor with its embedded broker, SIGKILLed
// three times while it delivers 3,000 events to a push service answering in
// 100 ms, each time started again at once on the same data dir. The ledger
// must be complete; nothing whose outcome the broker had acknowledged may
// be done again (no outcome twice); and the notifications sent twice are at
// most those in the air at the kills: delivered before the kill (or
// answered after it) with no outcome in the ledger yet, as the ledger's end
// offsets read just before the kill tell. Each process has its own VAPID
// subject, so the simulator tells which one sent a request.
//
// Before a new owner read what was done since the last commit, the same run
// sent 1,143 to 1,163 notifications twice and wrote 166 to 314 outcomes
// twice (docs/reliability.md, "Crash recovery"). It takes a minute: it runs
// with the fault suite (TIERPUSH_FAULTS=1).
func TestCrashThreeKills(t *testing.T) {
	if os.Getenv("TIERPUSH_FAULTS") == "" || testing.Short() {
		t.Skip("a minute of subprocesses: set TIERPUSH_FAULTS=1 (make test-faults)")
	}
	const n = 3000
	simCfg := pushsim.DefaultConfig()
	simCfg.Latency, simCfg.LatencyJitter = 100*time.Millisecond, 10*time.Millisecond
	sim, simAddr := serveSim(t, simCfg)
	brokerAddr := freeAddr(t)
	args := procArgs(t, t.TempDir(), brokerAddr, simAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Each process signs as its own subject (the last --vapid-subject wins).
	gen := func(g int) []string { return append(args[:len(args):len(args)], "--vapid-subject", subjectOfGen(g)) }
	p := startProc(t, gen(0)...)
	waitTopics(ctx, t, p, brokerAddr)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range n {
		sub := sim.Subscribe()
		id := fmt.Sprintf("kills-%05d", i)
		recs = append(recs, &kgo.Record{Topic: []string{"push.tier1", "push.tier2", "push.tier3"}[i%3], Key: []byte(sub.ID), Value: testenv.Event(id, sub, id, nil)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	adm := kadm.NewClient(cl)

	var kills []time.Time
	var ledgerEnds []kadm.ListedOffsets // push.outcomes' end offsets just before each kill
	for k := 1; k <= 3; k++ {
		if err := sim.WaitFor(ctx, func(s pushsim.Stats) bool { return s.ByStatus[201] >= int64(k*n/4) }); err != nil {
			t.Fatal(err)
		}
		ends, err := adm.ListEndOffsets(ctx, "push.outcomes")
		if err != nil {
			t.Fatal(err)
		}
		p.cmd.Process.Signal(syscall.SIGKILL)
		kills, ledgerEnds = append(kills, time.Now()), append(ledgerEnds, ends)
		p.wait(t, 30*time.Second)
		t.Logf("SIGKILL %d after %d deliveries", k, sim.Stats().ByStatus[201])
		p = startProc(t, gen(k)...)
	}
	cl.Close()
	got := readOutcomes(ctx, t, brokerAddr, n)
	acked := outcomesBelow(ctx, t, brokerAddr, ledgerEnds)
	// A graceful stop finishes what is in flight: every send is counted.
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Errorf("after SIGTERM the processor exited %d, want 0; stderr:\n%s", code, p.stderr)
	}
	dupOutcomes := 0
	for _, c := range got {
		dupOutcomes += c - 1
	}
	sends := make(map[string]int)
	ds := sim.Deliveries()
	for _, d := range ds {
		if d.Status == 201 {
			sends[string(d.Payload)]++
		}
	}
	dups := 0
	for i := range n {
		c := sends[fmt.Sprintf("kills-%05d", i)]
		if c == 0 {
			t.Errorf("kills-%05d was never delivered", i)
		}
		dups += max(c-1, 0)
	}
	// In the air at a kill: delivered before it (or answered after it, to
	// the process it killed) with no outcome in the ledger yet; and, for
	// comparison, the requests that came in the push service's latency
	// before it.
	inAir, inWindow := 0, 0
	for j, k := range kills {
		counted := make(map[string]bool)
		for _, d := range ds {
			if d.Subject != subjectOfGen(j) {
				continue
			}
			if d.At.After(k.Add(-simCfg.Latency - simCfg.LatencyJitter)) {
				inWindow++
			}
			id := string(d.Payload)
			if d.Status == 201 && !counted[id] && !acked[j][id] {
				counted[id] = true
				inAir++
			}
		}
	}
	t.Logf("3 kills over %d events: duplicate deliveries %d, in the air at the kills %d (requests in the latency window %d); duplicate outcome records %d",
		n, dups, inAir, inWindow, dupOutcomes)
	if dupOutcomes > 0 {
		t.Errorf("%d outcomes written twice: events done before a kill, their outcome acknowledged, were done again", dupOutcomes)
	}
	if dups > inAir {
		t.Errorf("%d duplicate deliveries, want at most the %d in the air at the kills", dups, inAir)
	}
}

// subjectOfGen is the VAPID subject of the g-th process of the test.
func subjectOfGen(g int) string { return fmt.Sprintf("mailto:proc-%d@tierpush.test", g) }

// outcomesBelow reads push.outcomes whole and returns, for each set of end
// offsets, the ids with an outcome below them.
func outcomesBelow(ctx context.Context, t *testing.T, brokerAddr string, ends []kadm.ListedOffsets) []map[string]bool {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.ConsumeTopics("push.outcomes"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	last, err := kadm.NewClient(cl).ListEndOffsets(ctx, "push.outcomes")
	if err != nil {
		t.Fatal(err)
	}
	left := make(map[int32]bool)
	last.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = true
		}
	})
	out := make([]map[string]bool, len(ends))
	for i := range out {
		out[i] = make(map[string]bool)
	}
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading push.outcomes: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if e, ok := last.Lookup(r.Topic, r.Partition); ok && r.Offset >= e.Offset-1 {
				delete(left, r.Partition)
			}
			var o topology.OutcomeRecord
			if json.Unmarshal(r.Value, &o) != nil {
				return
			}
			for i, es := range ends {
				if e, ok := es.Lookup(r.Topic, r.Partition); ok && r.Offset < e.Offset {
					out[i][o.ID] = true
				}
			}
		})
	}
	return out
}
