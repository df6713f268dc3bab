package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierpush/tierpush/internal/consume"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// The recovery tests take half a minute each in real time (a group
// session must run out): they run with the fault suite.
func faultsOnly(t *testing.T) {
	t.Helper()
	if os.Getenv("TIERPUSH_FAULTS") == "" || testing.Short() {
		t.Skip("half a minute of real time: set TIERPUSH_FAULTS=1 (make test-faults)")
	}
}

// trickle produces an event every interval to each partition of topic in
// turn until stop is called (a signed retry record, due at once, when topic
// is a retry topic), and returns the events by subscription, with the
// partition each went to.
type trickle struct {
	mu     sync.Mutex
	subs   map[string]string // subscription → event id
	parts  map[string]int32  // subscription → partition
	at     map[string]time.Time
	cancel context.CancelFunc
	done   chan struct{}
}

func startTrickle(t *testing.T, env *testenv.Env, topic string, partitions int32, every time.Duration) *trickle {
	t.Helper()
	pp := partitionProducer(t, env)
	src, err := env.Names.Parse(topic, &env.Policy)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &trickle{subs: make(map[string]string), parts: make(map[string]int32), at: make(map[string]time.Time), cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ctx.Err() == nil; i++ {
			sub := env.Sim.Subscribe()
			id := fmt.Sprintf("trickle-%05d", i)
			part := int32(i) % partitions
			tr.mu.Lock()
			tr.subs[sub.ID], tr.parts[sub.ID], tr.at[sub.ID] = id, part, time.Now()
			tr.mu.Unlock()
			r := &kgo.Record{Topic: topic, Partition: part, Key: []byte(sub.ID), Value: testenv.Event(id, sub, id, nil)}
			if src.Retry {
				now := time.Now()
				m := topology.Meta{Attempt: 1, Due: now, FirstSeen: now, Origin: fmt.Sprintf("%s/0/%d", env.Names.Tier(src.Tier), i), Status: 503}
				r.Headers = signed(env.Signer, topic, r.Value, m, now.Add(time.Hour))
			}
			pp.Produce(context.Background(), r, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce %s: %v", id, err)
				}
			})
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		pp.Flush(context.Background())
	}()
	t.Cleanup(func() { tr.stop() }) // before the producer closes: cleanups run last first
	return tr
}

// stop stops producing and returns what was produced. It is safe twice.
func (tr *trickle) stop() (subs map[string]string, parts map[string]int32, at map[string]time.Time) {
	tr.cancel()
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.subs, tr.parts, tr.at
}

// committedWatch polls the group's committed offsets and notes every time
// one went backwards: what a commit of a member that lost its partition
// does once the new owner has committed past it.
type committedWatch struct {
	mu        sync.Mutex
	last      map[string]int64
	backwards []string
	cancel    context.CancelFunc
	done      chan struct{}
}

func watchCommitted(env *testenv.Env, group string) *committedWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &committedWatch{last: make(map[string]int64), cancel: cancel, done: make(chan struct{})}
	adm := kadm.NewClient(env.Client)
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			offs, err := adm.FetchOffsets(ctx, group)
			if err == nil {
				offs.Each(func(o kadm.OffsetResponse) {
					k := fmt.Sprintf("%s/%d", o.Topic, o.Partition)
					w.mu.Lock()
					if prev, ok := w.last[k]; ok && o.At < prev {
						w.backwards = append(w.backwards, fmt.Sprintf("%s %d → %d", k, prev, o.At))
					}
					w.last[k] = max(w.last[k], o.At)
					w.mu.Unlock()
				})
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

func (w *committedWatch) stop() []string {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.backwards
}

// TestZombieCommitsNothing: a member's heartbeats stop reaching the broker
// while it keeps sending (a stalled node, a partitioned network), so its
// session expires and the other member takes its partitions. The member
// learns it only when its heartbeats pass again; meanwhile it goes on
// sending and finishing records. No partition may be committed by it once
// another owns it: the group's committed offsets never go back. Nothing
// is lost; what it sent after the takeover may be sent again.
func TestZombieCommitsNothing(t *testing.T) {
	faultsOnly(t)
	for _, protocol := range []string{consume.ProtocolConsumer, consume.ProtocolClassic} {
		t.Run(protocol, func(t *testing.T) {
			const partitions = 4
			simCfg := pushsim.DefaultConfig()
			simCfg.Latency, simCfg.LatencyJitter = 200*time.Millisecond, 100*time.Millisecond
			env := testenv.Start(t, testenv.Options{Partitions: partitions, NoProcessor: true, Sim: &simCfg,
				Pipeline: func(c *pipeline.Config) { c.GroupProtocol = protocol }})
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			zrec := newConsumeRecorder()
			zombie := startMember(t, env, pipeline.WithHooks(zrec))
			waitMembers(ctx, t, env, 1)
			other := startMember(t, env)
			waitMembers(ctx, t, env, 2)
			watch := watchCommitted(env, env.PipelineConfig().Group)
			// Events to a tier of which the stalled member will hold
			// partitions, so that it is sending when it stalls.
			topic, held := heldBy(ctx, t, env, zombie, env.Names.Inputs(&env.Policy)...)
			tr := startTrickle(t, env, topic, partitions, 10*time.Millisecond)
			time.Sleep(time.Second) // under load before the stall (a schedule, not a wait for a condition)

			// Every group request but the other member's is refused, as
			// from a coordinator away: the stalled member neither
			// heartbeats, commits (a commit counts as a sign of life to
			// the embedded broker) nor joins again, under any member ID,
			// while it fetches, sends and produces.
			otherID, _ := other.p.Client().GroupMetadata()
			stall := env.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat, kmsg.ConsumerGroupHeartbeat, kmsg.JoinGroup, kmsg.OffsetCommit}, Count: -1,
				Err: kerr.CoordinatorNotAvailable, When: func(r kmsg.Request) bool {
					switch r := r.(type) {
					case *kmsg.HeartbeatRequest:
						return r.MemberID != otherID
					case *kmsg.ConsumerGroupHeartbeatRequest:
						return r.MemberID != otherID
					case *kmsg.JoinGroupRequest:
						return r.MemberID != otherID
					case *kmsg.OffsetCommitRequest:
						return r.MemberID != otherID
					}
					return false
				}})
			stalled := time.Now()
			// The other member owns every partition once the session ran
			// out; the stalled one still holds them as far as it knows.
			var last testenv.Group
			defer func() {
				if t.Failed() {
					t.Logf("the group last: %+v", last)
				}
			}()
			until(ctx, t, "the other member owning every partition", func() bool {
				g, err := testenv.DescribeGroup(ctx, env.Client, env.PipelineConfig().Group)
				if err != nil {
					return false
				}
				last = g
				for _, m := range g.Members {
					if m.ID == otherID && m.Partitions() == partitions*len(env.Names.Inputs(&env.Policy)) {
						return true
					}
				}
				return false
			})
			took := time.Since(stalled)
			time.Sleep(2 * time.Second) // the stalled member goes on sending and finishing meanwhile
			stall.Remove()
			time.Sleep(2 * time.Second) // it learns, rejoins, and takes partitions again
			subs, _, _ := tr.stop()
			checkDelivered(ctx, t, env, subs, false)
			back := watch.stop()
			if len(back) > 0 {
				t.Errorf("committed offsets went back %d times, first %v: a member committed partitions it had lost", len(back), back[:min(len(back), 5)])
			}
			_, failed, _ := zrec.snapshot()
			t.Logf("%s: the stalled member held %s %v; the other owned every partition %s after the stall; the stalled member's refused commits: %v",
				protocol, topic, held, took.Round(100*time.Millisecond), failed)
		})
	}
}

// TestBrokerRemoved: one broker of three goes away while three processors
// deliver; the partitions it led get new leaders (and the group its
// coordinator, if it was that). Every event is delivered once, none is
// lost, and each partition's deliveries start again within 10 s.
func TestBrokerRemoved(t *testing.T) {
	faultsOnly(t)
	const partitions = 6
	simCfg := pushsim.DefaultConfig()
	simCfg.Latency, simCfg.LatencyJitter = 20*time.Millisecond, 10*time.Millisecond
	env := testenv.Start(t, testenv.Options{Partitions: partitions, Brokers: 3, NoProcessor: true, Sim: &simCfg})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for range 3 {
		startMember(t, env)
	}
	waitMembers(ctx, t, env, 3)
	tr := startTrickle(t, env, env.Names.Tier(tiers.Tier1), partitions, 5*time.Millisecond)
	time.Sleep(3 * time.Second) // delivering before the broker goes (a schedule)

	group := env.PipelineConfig().Group
	node := env.Cluster.CoordinatorFor(group) // the hardest one to lose
	led := 0
	for p := range int32(partitions) {
		if env.Cluster.LeaderFor(env.Names.Tier(tiers.Tier1), p) == node {
			led++
		}
	}
	if err := env.Cluster.RemoveNode(node); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	time.Sleep(5 * time.Second) // delivering after it (a schedule)
	subs, parts, _ := tr.stop()
	checkDelivered(ctx, t, env, subs, true)

	// Per partition, the first delivery at or after the removal: every
	// partition had events produced throughout.
	first := make(map[int32]time.Time)
	var worstGap time.Duration
	var last time.Time
	ds := env.Sim.Deliveries()
	slices.SortFunc(ds, func(a, b pushsim.Delivery) int { return a.At.Compare(b.At) })
	for _, d := range ds {
		p, ok := parts[d.SubID]
		if !ok {
			continue
		}
		if !last.IsZero() && d.At.After(removed.Add(-time.Second)) {
			worstGap = max(worstGap, d.At.Sub(last))
		}
		last = d.At
		if !d.At.Before(removed) {
			if _, ok := first[p]; !ok {
				first[p] = d.At
			}
		}
	}
	var worst time.Duration
	for p := range int32(partitions) {
		at, ok := first[p]
		if !ok {
			t.Errorf("partition %d: nothing delivered after the broker was removed", p)
			continue
		}
		worst = max(worst, at.Sub(removed))
	}
	if worst > 10*time.Second {
		t.Errorf("a partition's deliveries started again %s after the broker was removed, want within 10 s", worst.Round(10*time.Millisecond))
	}
	t.Logf("broker %d of 3 removed (the group coordinator; it led %d of %d tier-1 partitions): every partition delivering again within %s, longest pause between two deliveries %s; %d events, none lost or sent twice",
		node, led, partitions, worst.Round(10*time.Millisecond), worstGap.Round(10*time.Millisecond), len(subs))
}
