package main

import (
	"context"
	"encoding/base64"
	varint "encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/topology"
)

// waitTopics waits until the processor on brokerAddr has created its topics.
func waitTopics(ctx context.Context, t *testing.T, p *proc, brokerAddr string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		ts, err := adm.ListTopics(ctx, "push.outcomes")
		if err == nil && ts.Has("push.outcomes") && ts["push.outcomes"].Err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("topics never appeared on %s: %v", brokerAddr, err)
		case err := <-p.done:
			p.done <- err
			t.Fatalf("processor exited before creating topics (%v); stderr:\n%s", err, p.stderr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readOutcomes reads push.outcomes until want distinct ids; it returns the
// number of records per id.
func readOutcomes(ctx context.Context, t *testing.T, brokerAddr string, want int) map[string]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.ConsumeTopics("push.outcomes"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := make(map[string]int)
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("outcomes for %d of %d ids: %v", len(got), want, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			var o topology.OutcomeRecord
			if err := json.Unmarshal(r.Value, &o); err != nil || o.ID != string(r.Key) {
				t.Errorf("bad outcome record %q: %v", r.Value, err)
			}
			got[o.ID]++
		})
	}
	return got
}

// TestCrashLosesNothing kills the processor (and its embedded broker) with
// SIGKILL in the middle of 5,000 events, restarts it on the same data dir,
// and checks the ledger is complete; then it stops it with SIGTERM and
// checks for a clean exit.
func TestCrashLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	const n = 5000
	simCfg := pushsim.DefaultConfig()
	simCfg.Latency, simCfg.LatencyJitter = time.Millisecond, 4*time.Millisecond
	sim, simAddr := serveSim(t, simCfg)
	brokerAddr := freeAddr(t)
	args := procArgs(t, t.TempDir(), brokerAddr, simAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	first := startProc(t, args...)
	waitTopics(ctx, t, first, brokerAddr)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr))
	if err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for i := range n {
		sub := sim.Subscribe()
		id := fmt.Sprintf("crash-%05d", i)
		recs = append(recs, &kgo.Record{Topic: []string{"push.tier1", "push.tier2", "push.tier3"}[i%3], Key: []byte(sub.ID), Value: testenv.Event(id, sub, id, nil)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cl.Close()

	// Kill once a third has been delivered: sends, produces and commits
	// are all in flight.
	if err := sim.WaitFor(ctx, func(s pushsim.Stats) bool { return s.ByStatus[201] >= n/3 }); err != nil {
		t.Fatal(err)
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.wait(t, 30*time.Second)
	killedAt := sim.Stats().ByStatus[201]

	second := startProc(t, args...)
	got := readOutcomes(ctx, t, brokerAddr, n)
	dupOutcomes := 0
	for _, c := range got {
		dupOutcomes += c - 1
	}
	sends := make(map[string]int)
	for _, d := range sim.Deliveries() {
		if d.Status == 201 {
			sends[string(d.Payload)]++
		}
	}
	dupSends := 0
	for i := range n {
		c := sends[fmt.Sprintf("crash-%05d", i)]
		if c == 0 {
			t.Errorf("crash-%05d was never delivered", i)
		}
		dupSends += max(c-1, 0)
	}
	t.Logf("killed after %d deliveries; ledger complete for %d ids; duplicate sends %d, duplicate outcome records %d", killedAt, len(got), dupSends, dupOutcomes)

	second.cmd.Process.Signal(syscall.SIGTERM)
	if code := second.wait(t, 60*time.Second); code != 0 {
		t.Errorf("after SIGTERM the processor exited %d, want 0; stderr:\n%s", code, second.stderr)
	}
}

// TestKcatInterop: librdkafka's kcat produces events into the embedded
// broker and reads the outcomes back.
func TestKcatInterop(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat not installed (apt-get install kcat); .ci/run installs it")
	}
	sim, simAddr := serveSim(t, pushsim.DefaultConfig())
	brokerAddr := freeAddr(t)
	args := procArgs(t, t.TempDir(), brokerAddr, simAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitTopics(ctx, t, startProc(t, args...), brokerAddr)

	const n = 20
	var lines []string
	for i := range n {
		sub := sim.Subscribe()
		lines = append(lines, string(testenv.Event(fmt.Sprintf("kcat-%02d", i), sub, "from kcat", nil)))
	}
	file := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(ctx, kcat, "-b", brokerAddr, "-P", "-t", "push.tier1", "-l", file).CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	readOutcomes(ctx, t, brokerAddr, n) // wait until processed
	out, err := exec.CommandContext(ctx, kcat, "-b", brokerAddr, "-C", "-t", "push.outcomes", "-o", "beginning", "-c", fmt.Sprint(n), "-e", "-f", "%k %s\n").Output()
	if err != nil {
		t.Fatalf("kcat -C: %v", err)
	}
	seen := make(map[string]bool)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		key, value, _ := strings.Cut(line, " ")
		var o topology.OutcomeRecord
		if err := json.Unmarshal([]byte(value), &o); err != nil {
			t.Fatalf("kcat read %q: %v", line, err)
		}
		if o.ID != key || o.Outcome != "delivered" {
			t.Errorf("kcat read outcome %+v under key %q, want delivered under its id", o, key)
		}
		seen[key] = true
	}
	if len(seen) != n {
		t.Errorf("kcat read outcomes of %d events, want %d", len(seen), n)
	}
}

// TestCrashSkipsFinished: one slow send at the head of a partition holds
// its committed offset while the records after it finish. Killed then, the
// processor has committed which of those finished (commit metadata), and
// its successor sends the slow one again and none of the others.
func TestCrashSkipsFinished(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	const n = 200
	sim, simAddr := serveSim(t, pushsim.DefaultConfig())
	brokerAddr := freeAddr(t)
	// The slow send holds its slot of the push service's concurrency
	// limit, which the concurrency law may cut to one when latencies
	// vary with the CPU (race detector, busy cores): a floor of two
	// keeps a slot for the records after it.
	args := append(procArgs(t, t.TempDir(), brokerAddr, simAddr), "--send-timeout", "10m", "--pacing-min-concurrency", "2")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	first := startProc(t, args...)
	waitTopics(ctx, t, first, brokerAddr)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The first event's first answer takes ten minutes (a 503 if it ever
	// came); sent again, it is delivered.
	slow := sim.Subscribe(pushsim.Response{Status: 503, Latency: 10 * time.Minute}, pushsim.Response{})
	recs := []*kgo.Record{{Topic: "push.tier1", Key: []byte(slow.ID), Value: testenv.Event("skip-00000", slow, "skip-00000", nil)}}
	for i := 1; i < n; i++ {
		sub := sim.Subscribe()
		id := fmt.Sprintf("skip-%05d", i)
		recs = append(recs, &kgo.Record{Topic: "push.tier1", Key: []byte(sub.ID), Value: testenv.Event(id, sub, id, nil)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	// Offset 0 is in flight, 1..199 finished: the commit must say so,
	// "tierpush.finished.v2:0:<time>:" and the varints 1 (gap) and 199
	// (length).
	want := ":" + base64.RawURLEncoding.EncodeToString(varint.AppendUvarint([]byte{1}, n-1))
	adm := kadm.NewClient(cl)
	for {
		offs, err := adm.FetchOffsets(ctx, "tierpush")
		if o, ok := offs.Lookup("push.tier1", 0); err == nil && ok && o.At == 0 &&
			strings.HasPrefix(o.Metadata, "tierpush.finished.v2:0:") && strings.HasSuffix(o.Metadata, want) {
			break
		}
		select {
		case <-ctx.Done():
			o, _ := offs.Lookup("push.tier1", 0)
			t.Fatalf("committed push.tier1/0 at %d with metadata %q (err %v), want 0 and tierpush.finished.v2:0:<time>%s", o.At, o.Metadata, err, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
	first.cmd.Process.Signal(syscall.SIGKILL)
	first.wait(t, 30*time.Second)

	second := startProc(t, args...)
	readOutcomes(ctx, t, brokerAddr, n)
	sends := make(map[string]int)
	for _, d := range sim.Deliveries() {
		if d.Status == 201 {
			sends[string(d.Payload)]++
		}
	}
	for i := range n {
		id := fmt.Sprintf("skip-%05d", i)
		if c := sends[id]; c != 1 {
			t.Errorf("%s delivered %d times, want once", id, c)
		}
	}
	second.cmd.Process.Signal(syscall.SIGTERM)
	if code := second.wait(t, 60*time.Second); code != 0 {
		t.Errorf("after SIGTERM the processor exited %d, want 0; stderr:\n%s", code, second.stderr)
	}
}
