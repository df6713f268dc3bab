package members_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierpush/tierpush/internal/members"
)

const (
	topic, beats, group = "t", "push.members", "g"
	partitions          = 4
	// deadSession is the killed member's session: the broker would hand
	// its partitions on after this, the test's deadline is well before.
	deadSession = 60 * time.Second
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// owner is a live member: a kgo group consumer whose partitions are
// tracked, and its Watch.
type owner struct {
	cl    *kgo.Client
	mu    sync.Mutex
	owned map[int32]bool
}

func (o *owner) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.owned)
}

func join(t *testing.T, c *kfake.Cluster, protocol string) *owner {
	t.Helper()
	o := &owner{owned: make(map[int32]bool)}
	set := func(on bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, ps map[string][]int32) {
			o.mu.Lock()
			defer o.mu.Unlock()
			for _, p := range ps[topic] {
				if on {
					o.owned[p] = true
				} else {
					delete(o.owned, p)
				}
			}
		}
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.OnPartitionsAssigned(set(true)), kgo.OnPartitionsRevoked(set(false)), kgo.OnPartitionsLost(set(false)),
		kgo.HeartbeatInterval(200 * time.Millisecond),
	}
	if protocol == members.Consumer {
		opts = append(opts, kgo.ServerSideBalancer())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	o.cl = cl
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			cl.PollFetches(ctx)
		}
	})
	w, err := members.New(members.Config{Topic: beats, Group: group, From: "live", After: 3 * time.Second}, quiet,
		func() (string, string) { id, _ := cl.GroupMetadata(); return id, protocol }, []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { w.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		cl.Close()
		if w.Removed() != 1 {
			t.Errorf("the live member removed %d members, want 1", w.Removed())
		}
	})
	return o
}

// killed joins a member with raw requests, as a processor would, and
// returns its member id; the member then never speaks to the group again.
func killed(t *testing.T, ctx context.Context, raw *kgo.Client, protocol string) string {
	t.Helper()
	if protocol == members.Consumer {
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch = group, "dead-member-0000000000", 0
		req.RebalanceTimeoutMillis = int32(deadSession.Milliseconds())
		req.SubscribedTopicNames, req.Topics = []string{topic}, []kmsg.ConsumerGroupHeartbeatRequestTopic{}
		resp, err := req.RequestWith(ctx, raw)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			t.Fatal(err)
		}
		return req.MemberID
	}
	req := kmsg.NewPtrJoinGroupRequest()
	req.Group, req.ProtocolType = group, "consumer"
	req.SessionTimeoutMillis = int32(deadSession.Milliseconds())
	req.RebalanceTimeoutMillis = req.SessionTimeoutMillis
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Topics = []string{topic}
	p := kmsg.NewJoinGroupRequestProtocol()
	p.Name, p.Metadata = "cooperative-sticky", meta.AppendTo(nil)
	req.Protocols = append(req.Protocols, p)
	resp, err := req.RequestWith(ctx, raw)
	if err == nil && resp.ErrorCode == kerr.MemberIDRequired.Code {
		req.MemberID = resp.MemberID
		resp, err = req.RequestWith(ctx, raw)
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The only member leads: it takes every partition.
	sync := kmsg.NewPtrSyncGroupRequest()
	sync.Group, sync.MemberID, sync.Generation = group, resp.MemberID, resp.Generation
	sync.ProtocolType, sync.Protocol = kmsg.StringPtr("consumer"), resp.Protocol
	a := kmsg.NewConsumerMemberAssignment()
	at := kmsg.NewConsumerMemberAssignmentTopic()
	at.Topic = topic
	for p := range int32(partitions) {
		at.Partitions = append(at.Partitions, p)
	}
	a.Topics = append(a.Topics, at)
	ga := kmsg.NewSyncGroupRequestGroupAssignment()
	ga.MemberID, ga.MemberAssignment = resp.MemberID, a.AppendTo(nil)
	sync.GroupAssignment = append(sync.GroupAssignment, ga)
	sresp, err := sync.RequestWith(ctx, raw)
	if err == nil {
		err = kerr.ErrorForCode(sresp.ErrorCode)
	}
	if err != nil {
		t.Fatal(err)
	}
	return resp.MemberID
}

// A member killed while it held partitions stops beating; the live member
// removes it from the group after 3 s of its silence and takes its
// partitions, on either protocol, where the broker would have waited for
// its session (a minute).
func TestSilentMemberRemoved(t *testing.T) {
	for _, protocol := range []string{members.Classic, members.Consumer} {
		t.Run(protocol, func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic), kfake.SeedTopics(1, beats),
				kfake.BrokerConfigs(map[string]string{"group.consumer.session.timeout.ms": "60000", "group.max.session.timeout.ms": "120000"}))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close) // after the members' cleanups
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			raw, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()

			dead := killed(t, ctx, raw, protocol)
			live := join(t, c, protocol)
			// The killed member's last beats, after the live member's
			// first are out.
			for range 4 {
				v, _ := json.Marshal(map[string]any{"from": "dead", "group": group, "member": dead, "protocol": protocol, "at_ms": time.Now().UnixMilli()})
				if err := raw.ProduceSync(ctx, &kgo.Record{Topic: beats, Key: []byte(group), Value: v}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if err := pause(ctx, 500*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}
			killedAt := time.Now()
			deadline := time.Now().Add(deadSession / 3)
			for live.count() < partitions {
				if time.Now().After(deadline) {
					t.Fatalf("the live member owns %d of %d partitions %s after the kill; the killed member's session is %s",
						live.count(), partitions, time.Since(killedAt).Round(time.Millisecond), deadSession)
				}
				if err := pause(ctx, 50*time.Millisecond); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s: every partition owned by the live member %s after the killed member's last beat", protocol, time.Since(killedAt).Round(100*time.Millisecond))
		})
	}
}

// pause waits d, or less when ctx ends first.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
