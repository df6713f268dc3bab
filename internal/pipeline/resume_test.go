package pipeline_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierpush/tierpush/internal/checkpoint"
	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// consumeRecorder counts what the consumer reports (consume.Hooks) beside
// the deliver hooks.
type consumeRecorder struct {
	*deliver.Stats
	mu      sync.Mutex
	skipped map[string]int
	failed  map[string]int
	resumed []time.Duration
}

func newConsumeRecorder() *consumeRecorder {
	return &consumeRecorder{Stats: &deliver.Stats{}, skipped: make(map[string]int), failed: make(map[string]int)}
}

func (r *consumeRecorder) Skipped(why string, n int) {
	r.mu.Lock()
	r.skipped[why] += n
	r.mu.Unlock()
}

func (r *consumeRecorder) CommitFailed(reason string, n int) {
	r.mu.Lock()
	r.failed[reason] += n
	r.mu.Unlock()
}

func (r *consumeRecorder) Resumed(d time.Duration) {
	r.mu.Lock()
	r.resumed = append(r.resumed, d)
	r.mu.Unlock()
}

func (r *consumeRecorder) snapshot() (skipped, failed map[string]int, resumed []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	skipped, failed = make(map[string]int), make(map[string]int)
	for k, v := range r.skipped {
		skipped[k] = v
	}
	for k, v := range r.failed {
		failed[k] = v
	}
	return skipped, failed, append([]time.Duration(nil), r.resumed...)
}

// TestResumeSkipsDone: a processor takes over a partition whose previous
// owner died after doing more than its last commit says: it committed
// offset 2 with offset 4 finished, then delivered offsets 5 and 6 (their
// outcomes are in the ledger) and sent offset 7, which failed and went on
// the ladder (a signed retry record). The new owner sends none of those
// again; it sends offsets 2 and 3, never finished, and the rest. A retry record
// without a valid signature proves nothing: offset 8 is sent.
func TestResumeSkipsDone(t *testing.T) {
	rec := newConsumeRecorder()
	env := testenv.Start(t, testenv.Options{Partitions: 1, NoProcessor: true, Hooks: rec})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tier := env.Names.Tier(tiers.Tier1)
	const n = 12
	subs := make([]pushsim.Subscription, n)
	var recs []*kgo.Record
	for i := range n {
		subs[i] = env.Sim.Subscribe()
		id := fmt.Sprintf("resume-%02d", i)
		// Produced a minute ago: waiting since before the last commit.
		recs = append(recs, &kgo.Record{Topic: tier, Key: []byte(subs[i].ID), Value: testenv.Event(id, subs[i], id, nil),
			Timestamp: time.Now().Add(-time.Minute)})
	}
	env.Produce(ctx, recs...)

	// The previous owner's last commit, a second ago.
	at := time.Now().Add(-time.Second)
	group := env.PipelineConfig().Group
	offs := make(kadm.Offsets)
	offs.Add(kadm.Offset{Topic: tier, Partition: 0, At: 2, LeaderEpoch: -1,
		Metadata: checkpoint.Encode(2, []checkpoint.Span{{From: 4, To: 5}}, at)})
	if _, err := kadm.NewClient(env.Client).CommitOffsets(ctx, group, offs); err != nil {
		t.Fatal(err)
	}
	// What it did after that commit.
	origin := func(o int) string { return fmt.Sprintf("%s/0/%d", tier, o) }
	outcome := func(o int) *kgo.Record {
		m := topology.Meta{Attempt: 1, Origin: origin(o), Status: 201, Reason: topology.ReasonDelivered}
		return &kgo.Record{Topic: env.Names.Outcomes(), Key: fmt.Appendf(nil, "resume-%02d", o),
			Value: fmt.Appendf(nil, `{"id":"resume-%02d","outcome":"delivered"}`, o), Headers: m.Headers(nil)}
	}
	retryTopic := env.Names.Retry(tiers.Tier1, 2*time.Second)
	retry := func(o int, sign bool) *kgo.Record {
		now := time.Now()
		m := topology.Meta{Attempt: 1, Due: now.Add(time.Second), FirstSeen: now, Origin: origin(o), Status: 503}
		hs := m.Headers(nil)
		if sign {
			hs = signed(env.Signer, retryTopic, recs[o].Value, m, now.Add(time.Hour))
		}
		return &kgo.Record{Topic: retryTopic, Key: recs[o].Key, Value: recs[o].Value, Headers: hs}
	}
	env.Produce(ctx, outcome(5), outcome(6), retry(7, true), retry(8, false))

	env.StartProcessor()
	// Offsets 0 and 1 are behind the commit, 4, 5 and 6 done: the others
	// are delivered, 7 by its retry record.
	want := map[int]int{2: 1, 3: 1, 7: 1, 8: 1, 9: 1, 10: 1, 11: 1}
	until(ctx, t, "the events not done delivered", func() bool {
		for o := range want {
			if sendsOf(env.Sim, subs[o].ID) == 0 {
				return false
			}
		}
		return true
	})
	if err := env.StopProcessor(); err != nil {
		t.Fatal(err)
	}
	for o := range n {
		if got := sendsOf(env.Sim, subs[o].ID); got != want[o] {
			t.Errorf("offset %d sent %d times, want %d", o, got, want[o])
		}
	}
	skipped, _, resumed := rec.snapshot()
	if skipped["committed"] != 1 || skipped["outcome"] != 2 || skipped["retry"] != 1 {
		t.Errorf("skipped %v, want committed 1, outcome 2, retry 1", skipped)
	}
	if len(resumed) != 1 || resumed[0] < time.Second || resumed[0] > time.Minute {
		t.Errorf("resume observed %v, want one wait of at least the second since the last commit", resumed)
	}
	t.Logf("skipped %v; partition resumed %v after the last commit", skipped, resumed)
}

// TestCommitRetried: records finished behind a slow head are told by
// commits of their own (the head does not move). While the broker refuses
// those commits, each failure is counted and the commit is made again at
// every commit interval, with the finished offsets, until one is
// acknowledged: a failed commit that was never made again left the next
// owner to send everything behind the head again.
func TestCommitRetried(t *testing.T) {
	rec := newConsumeRecorder()
	env := testenv.Start(t, testenv.Options{Partitions: 1, Hooks: rec})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tier := env.Names.Tier(tiers.Tier1)
	refused := env.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Topic: tier, Count: -1})
	slow := env.Sim.Subscribe(pushsim.Response{Latency: time.Minute}) // the head, in flight throughout
	recs := []*kgo.Record{{Topic: tier, Key: []byte("slow"), Value: testenv.Event("slow", slow, "x", nil)}}
	const fast = 20
	for i := range fast {
		s := env.Sim.Subscribe()
		id := fmt.Sprintf("fast%d", i)
		recs = append(recs, &kgo.Record{Topic: tier, Key: []byte(id), Value: testenv.Event(id, s, "x", nil)})
	}
	env.Produce(ctx, recs...)
	if _, err := env.ReadOutcomes(ctx, fast); err != nil {
		t.Fatal(err)
	}
	failures := func() int {
		_, failed, _ := rec.snapshot()
		return failed["UNKNOWN_SERVER_ERROR"]
	}
	// Every record behind the head is finished now: only commits made
	// again can still fail.
	after := failures()
	until(ctx, t, "a commit made again after the last finish, refused", func() bool { return failures() >= after+3 })
	refused.Remove()
	until(ctx, t, "the finished offsets committed", func() bool {
		at, meta := committed(ctx, t, env, tier, 0)
		spans, _ := checkpoint.Decode(at, meta)
		return at == 0 && len(spans) == 1 && spans[0] == checkpoint.Span{From: 1, To: fast + 1}
	})
	t.Logf("%d partition commits refused and made again before one was acknowledged", failures())
}
