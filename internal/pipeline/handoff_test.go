package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierpush/tierpush/internal/consume"
	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// The handoff tests run on loopback in real time, not in a synctest
// bubble: kgo gates polls and rebalances (BlockRebalanceOnPoll) and runs
// its autocommits with a sync.Cond and an RWMutex, which synctest does not
// count as durably blocked, so the bubble's clock would stop during a
// rebalance that needs it to move. The delays are short instead.

// member is one processor of the group, started by the test (its Env
// starts none), so that a test can run several and stop one.
type member struct {
	p      *pipeline.Processor
	cancel context.CancelFunc
	done   chan error
}

// startMember starts a processor with the Env's configuration and opts and
// joins the group; the test's cleanup stops it.
func startMember(t *testing.T, env *testenv.Env, opts ...pipeline.Option) *member {
	t.Helper()
	hc := dispatch.NewHTTPClient(env.HTTPClient())
	t.Cleanup(hc.CloseIdleConnections)
	sender, err := dispatch.New(dispatch.Config{VAPID: env.VAPID}, hc)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	// Frequent heartbeats make rebalances take well under a second.
	kopts := append(env.KafkaOpts(), kgo.HeartbeatInterval(200*time.Millisecond))
	p, err := pipeline.New(env.PipelineConfig(), log, sender, env.Signer, kopts, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{p: p, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- p.Run(ctx) }()
	t.Cleanup(func() { m.stop() })
	return m
}

// stop shuts the member down gracefully (what SIGTERM does) and returns
// Run's error. It is safe twice.
func (m *member) stop() error {
	if m.cancel == nil {
		return nil
	}
	m.cancel()
	m.cancel = nil
	return <-m.done
}

// waitMembers waits until the group is stable with n members, each of them
// assigned partitions.
func waitMembers(ctx context.Context, t *testing.T, env *testenv.Env, n int) {
	t.Helper()
	group := env.PipelineConfig().Group
	for {
		g, err := testenv.DescribeGroup(ctx, env.Client, group)
		if err == nil {
			assigned := 0
			for _, m := range g.Members {
				if m.Partitions() > 0 {
					assigned++
				}
			}
			if g.State == "Stable" && len(g.Members) == n && assigned == n {
				return
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("group never had %d members with partitions: %v", n, ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// partitionProducer produces to the partition each record names.
func partitionProducer(t *testing.T, env *testenv.Env) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append(env.KafkaOpts(), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// waitSent waits until the simulator has answered every sub in subs.
func waitSent(ctx context.Context, t *testing.T, sim *pushsim.Server, subs map[string]bool) {
	t.Helper()
	for {
		seen := make(map[string]bool)
		for _, d := range sim.Deliveries() {
			if subs[d.SubID] {
				seen[d.SubID] = true
			}
		}
		if len(seen) == len(subs) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the simulator answered %d of %d subscriptions: %v", len(seen), len(subs), ctx.Err())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkExactlyOnce asserts that every event of subs (sub id → event id) was
// sent exactly once and delivered, and that push.outcomes holds exactly
// one delivered record per event. It waits for the ledger first, then a
// little longer so that late duplicates show up too.
func checkExactlyOnce(ctx context.Context, t *testing.T, env *testenv.Env, subs map[string]string) {
	t.Helper()
	checkDelivered(ctx, t, env, subs, true)
}

// checkDelivered asserts that every event of subs was sent and delivered,
// and, if exactly, that none was sent or recorded twice.
func checkDelivered(ctx context.Context, t *testing.T, env *testenv.Env, subs map[string]string, exactly bool) {
	t.Helper()
	got, err := env.ReadOutcomes(ctx, len(subs))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)

	sends := make(map[string]int)
	for _, d := range env.Sim.Deliveries() {
		if _, ok := subs[d.SubID]; ok {
			sends[d.SubID]++
			if d.Status != 201 {
				t.Errorf("sub %s: the simulator answered %d", d.SubID, d.Status)
			}
		}
	}
	dups := 0
	for sub, id := range subs {
		switch n := sends[sub]; {
		case n == 0:
			t.Errorf("%s: never sent", id)
		case n > 1:
			dups += n - 1
		}
	}
	switch {
	case dups > 0 && exactly:
		t.Errorf("%d duplicate deliveries over %d events, want 0", dups, len(subs))
	default:
		t.Logf("%d events, %d duplicate deliveries", len(subs), dups)
	}
	var wrong []string
	for _, id := range subs {
		outs := got[id]
		if len(outs) == 0 || exactly && len(outs) != 1 || topology.Outcome(outs[0].Outcome) != topology.OutcomeDelivered {
			wrong = append(wrong, fmt.Sprintf("%s: %d outcomes", id, len(outs)))
		}
	}
	if len(wrong) > 0 {
		slices.Sort(wrong)
		t.Errorf("%d events without the delivered outcome(s) wanted, e.g. %v", len(wrong), wrong[:min(len(wrong), 5)])
	}
	if !exactly {
		return
	}
	// ReadOutcomes stops at the last id it waits for: count the records
	// themselves, so a duplicate outcome written later is seen.
	if records := topicRecords(ctx, t, env, env.Names.Outcomes()); records != int64(len(subs)) {
		t.Errorf("push.outcomes holds %d records, want %d (one per event)", records, len(subs))
	}
}

// topicRecords returns how many records topic holds.
func topicRecords(ctx context.Context, t *testing.T, env *testenv.Env, topic string) int64 {
	t.Helper()
	ends, err := kadm.NewClient(env.Client).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// heldBy returns the first of topics of which m is assigned partitions, and
// those partitions.
func heldBy(ctx context.Context, t *testing.T, env *testenv.Env, m *member, topics ...string) (string, []int32) {
	t.Helper()
	id, _ := m.p.Client().GroupMetadata()
	g, err := testenv.DescribeGroup(ctx, env.Client, env.PipelineConfig().Group)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		for _, gm := range g.Members {
			if gm.ID == id && len(gm.Assigned[topic]) > 0 {
				return topic, slices.Sorted(slices.Values(gm.Assigned[topic]))
			}
		}
	}
	t.Fatalf("member %s holds no partition of %v: %+v", id, topics, g)
	return "", nil
}

// TestHandoffHeldRetries hands over retry partitions whose held records
// sit below offsets already sent (due order differs from offset order:
// jitter, Retry-After floors). The member giving them up must re-produce
// what it holds so that it can commit what it sent: every event is sent
// exactly once, by one member or the other. If the copies cannot be
// produced, nothing is committed past the held records: they are sent
// all the same, and only then can what was sent be sent again.
func TestHandoffHeldRetries(t *testing.T) {
	const partitions = 4
	// Due times, in offset order, of the records of every partition,
	// relative to when they are produced. The handoff starts once the
	// early ones are sent: offsets 0, 2 and 5 are still held then.
	dues := []time.Duration{8 * time.Second, 200 * time.Millisecond, 6 * time.Second, 400 * time.Millisecond, 600 * time.Millisecond, 10 * time.Second}
	const early = time.Second
	stop := func(t *testing.T, a *member) {
		if err := a.stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	}
	tests := []struct {
		name string
		// two starts the second member before the records are produced,
		// so that a's stop hands its partitions to it; otherwise the
		// second member joins at the handoff and takes some of them: on
		// the classic protocol, whose cooperative-sticky assignor spreads
		// each topic's partitions over the members (the embedded broker's
		// KIP-848 assignor may leave the retry topic whole with a).
		two bool
		// failCopies makes the broker refuse every produce to the retry
		// topic from the handoff on.
		failCopies bool
	}{
		{name: "graceful stop", two: true},
		{name: "member joins"},
		{name: "copies refused", two: true, failCopies: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := testenv.Start(t, testenv.Options{Partitions: partitions, NoProcessor: true,
				Pipeline: func(c *pipeline.Config) {
					c.DrainTimeout = 5 * time.Second
					if !tt.two {
						c.GroupProtocol = consume.ProtocolClassic
					}
				}})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			a := startMember(t, env)
			waitMembers(ctx, t, env, 1)
			if tt.two {
				startMember(t, env)
				waitMembers(ctx, t, env, 2)
			}

			// A retry topic of which a holds partitions (all of them
			// when it is alone).
			var retries []string
			for _, in := range env.Names.Inputs(&env.Policy) {
				if src, err := env.Names.Parse(in, &env.Policy); err == nil && src.Retry {
					retries = append(retries, in)
				}
			}
			topic, parts := heldBy(ctx, t, env, a, append([]string{env.Names.Retry(tiers.Tier1, 8*time.Second)}, retries...)...)
			now := time.Now()
			subs := make(map[string]string)
			sent := make(map[string]bool) // sent before the handoff
			var recs []*kgo.Record
			for _, part := range parts {
				for i, d := range dues {
					sub := env.Sim.Subscribe()
					id := fmt.Sprintf("held-%d-%d", part, i)
					subs[sub.ID] = id
					if d < early {
						sent[sub.ID] = true
					}
					v := testenv.Event(id, sub, "x", nil)
					meta := topology.Meta{Attempt: 1, Due: now.Add(d), FirstSeen: now, Origin: fmt.Sprintf("push.tier1/%d/%d", part, i), Status: 503}
					hs := append(signed(env.Signer, topic, v, meta, now.Add(7*24*time.Hour)), kgo.RecordHeader{Key: "x-upstream", Value: []byte(id)})
					recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Key: []byte(sub.ID), Value: v, Headers: hs})
				}
			}
			if err := partitionProducer(t, env).ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			waitSent(ctx, t, env.Sim, sent)
			if held := a.p.Held()[topic]; held == 0 {
				t.Fatal("the member handing over holds no record: the test proves nothing")
			}
			if tt.failCopies {
				refuseProduce(ctx, t, env, topic)
			}
			if tt.two {
				stop(t, a)
			} else {
				startMember(t, env)
				waitMembers(ctx, t, env, 2)
			}
			checkDelivered(ctx, t, env, subs, !tt.failCopies)
			copies := topicRecords(ctx, t, env, topic) - int64(len(recs))
			switch {
			case tt.failCopies && copies != 0:
				t.Errorf("%d copies in the retry topic, want none: the broker refused them", copies)
			case !tt.failCopies && copies <= 0:
				t.Error("no held record was re-produced on the handoff")
			default:
				t.Logf("%d held records re-produced on the handoff", copies)
			}
		})
	}
}

// refuseProduce makes the broker answer every produce request for topic
// alone with TOPIC_AUTHORIZATION_FAILED, which kgo does not retry.
func refuseProduce(ctx context.Context, t *testing.T, env *testenv.Env, topic string) {
	t.Helper()
	var on atomic.Bool
	on.Store(true)
	refuseWhile(ctx, t, env, topic, &on)
}

// TestHandoffJoinMidPoll: a member joins while the first one is still
// dispatching polls of every partition through a small window, so the
// partitions it gives up have records consumed but not started. None of
// them may be sent by both.
func TestHandoffJoinMidPoll(t *testing.T) {
	const (
		partitions = 4
		n          = 300
	)
	sim := pushsim.DefaultConfig()
	sim.Latency = 40 * time.Millisecond
	env := testenv.Start(t, testenv.Options{Partitions: partitions, NoProcessor: true, Sim: &sim,
		Pipeline: func(c *pipeline.Config) { c.MaxInFlight = 2 }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startMember(t, env)
	waitMembers(ctx, t, env, 1)

	subs := make(map[string]string)
	var recs []*kgo.Record
	for i := range n {
		sub := env.Sim.Subscribe()
		id := fmt.Sprintf("join-%03d", i)
		subs[sub.ID] = id
		tier := tiers.All[i%len(tiers.All)]
		recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tier), Partition: int32(i / len(tiers.All) % partitions),
			Key: []byte(sub.ID), Value: testenv.Event(id, sub, "x", nil)})
	}
	if err := partitionProducer(t, env).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Let the first member get some way into its polls, then join.
	for len(env.Sim.Deliveries()) < n/10 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	startMember(t, env)
	checkExactlyOnce(ctx, t, env, subs)
}

// holdCommits makes the broker hold every offset commit that arrives while
// hold is set until release is closed: a slow broker, or a coordinator on
// starved cores, answering commits late.
func holdCommits(env *testenv.Env, hold *atomic.Bool, release <-chan struct{}) {
	env.Cluster.ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		env.Cluster.KeepControl()
		if hold.Load() {
			env.Cluster.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
}

// TestHandoffCommitIsLast: a member joins, and then the first one shuts
// down, while the broker answers commits late and the records sent before
// the rebalance finish one after another behind held records, whose copies
// the broker refuses. Each partition handed over (on the revoke or on the
// shutdown) is committed at its held record, with the offsets
// finished after it in the metadata, and that commit must be the
// partition's last. A commit of the periodic finished-offsets loop, read
// during the hand-off but queued behind its commit, was committed after it
// at the same offset without them (the partition was no longer owned to
// annotate), and the new owner sent every finished record again: the
// duplicates seen in TestRollingRestartUnderLoad, on retry partitions whose
// hand-off commit waited behind slow commits.
func TestHandoffCommitIsLast(t *testing.T) {
	const (
		partitions = 4
		n          = 8
	)
	env := testenv.Start(t, testenv.Options{Partitions: partitions, NoProcessor: true,
		Pipeline: func(c *pipeline.Config) { c.DrainTimeout = 10 * time.Second }})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var hold atomic.Bool
	release := make(chan struct{})
	holdCommits(env, &hold, release)
	a := startMember(t, env)
	waitMembers(ctx, t, env, 1)

	// Offset 0 of every partition is held until due, after the hand-off;
	// offsets 1..n are due now and answered over 2 to 3.4 s, so that they
	// finish one after another during the hand-off.
	topic := env.Names.Retry(tiers.Tier1, 8*time.Second)
	now := time.Now()
	subs := make(map[string]string)
	held := make(map[string]bool) // subscriptions of the held records
	var recs []*kgo.Record
	for part := range int32(partitions) {
		for i := range n + 1 {
			due, latency := now, 2*time.Second+time.Duration(i)*200*time.Millisecond
			if i == 0 {
				due, latency = now.Add(25*time.Second), 0
			}
			sub := env.Sim.Subscribe(pushsim.Response{Latency: latency})
			id := fmt.Sprintf("last-%d-%d", part, i)
			subs[sub.ID], held[sub.ID] = id, i == 0
			v := testenv.Event(id, sub, "x", nil)
			meta := topology.Meta{Attempt: 1, Due: due, FirstSeen: now, Origin: fmt.Sprintf("push.tier1/%d/%d", part, i), Status: 503}
			recs = append(recs, &kgo.Record{Topic: topic, Partition: part, Key: []byte(sub.ID), Value: v,
				Headers: signed(env.Signer, topic, v, meta, now.Add(7*24*time.Hour))})
		}
	}
	if err := partitionProducer(t, env).ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	until(ctx, t, "every due record sent", func() bool { return env.Sim.Requests() >= partitions*n })
	// The held records' copies are refused, so each hand-off commits at
	// its held record. Commits are held from before the first answer until
	// past the last one and the hand-off's commit.
	refuseProduce(ctx, t, env, topic)
	hold.Store(true)
	go func() {
		time.Sleep(5 * time.Second)
		hold.Store(false)
		close(release)
	}()
	startMember(t, env)
	waitMembers(ctx, t, env, 2)
	// The join hands over the partitions the balancer moves, which need
	// not include one of this topic (it balances counts over all topics);
	// the first member's shutdown then hands over the rest, so every
	// partition of the topic changes owner, on a revoke or on shutdown.
	if err := a.stop(); err != nil {
		t.Fatalf("first member: %v", err)
	}
	stopped := time.Now()
	checkExactlyOnce(ctx, t, env, subs)
	// The held records must have been the new owner's to send, after the
	// hand-offs: one the first member sent before it stopped (a join
	// slower than their due time) proves nothing of its commit.
	for _, d := range env.Sim.Deliveries() {
		if held[d.SubID] && d.At.Before(stopped) {
			// Busy cores can make the join that slow; such a run
			// says nothing either way.
			t.Skipf("%s was sent before the first member stopped (the join outlasted its due time): this run proves nothing", subs[d.SubID])
		}
	}
}
