package admin

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// TestDroppedSteps: after tier2's ladder changes from 2s, 8s, 60s to 1s, 5s,
// the old steps that still hold records the group has not consumed are
// found; an old step the group consumed to its end, an empty one, the
// current ladder's steps and topics no processor names are not.
func TestDroppedSteps(t *testing.T) {
	ctx := ctxT(t)
	c, adm, _ := cluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	names := topology.Names{Prefix: "push."}
	old := tiers.DefaultPolicy()
	spec := testSpec()
	if _, err := Ensure(ctx, adm, names, &old, spec); err != nil {
		t.Fatal(err)
	}
	policy := tiers.DefaultPolicy()
	policy.Tier2.Steps = []time.Duration{time.Second, 5 * time.Second}
	if _, err := Ensure(ctx, adm, names, &policy, spec); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"push.tier2.retry-1m0s", "push.tier9.retry-8s", "other.tier2.retry-8s"} {
		if _, err := adm.CreateTopic(ctx, 1, -1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	const group = "tierpush"
	produce := func(topic string, part int32, n int) {
		t.Helper()
		for range n {
			r := &kgo.Record{Topic: topic, Partition: part, Value: []byte("x")}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce to %s/%d: %v", topic, part, err)
			}
		}
	}
	produce("push.tier2.retry-8s", 0, 2)  // waiting: 2 + 1 below
	produce("push.tier2.retry-8s", 1, 1)  //
	produce("push.tier2.retry-60s", 2, 3) // consumed to the end below
	produce("push.tier2.retry-5s", 0, 4)  // the current ladder's
	produce("push.tier2.retry-1m0s", 0, 1)
	produce("push.tier9.retry-8s", 0, 1)
	produce("other.tier2.retry-8s", 0, 1)
	// The group consumed one record of retry-8s/0 and all of retry-60s.
	offs := kadm.Offsets{}
	offs.AddOffset("push.tier2.retry-8s", 0, 1, -1)
	offs.AddOffset("push.tier2.retry-60s", 2, 3, -1)
	// Committed by the producing client: kadm on the admin client, which
	// has the topics' IDs cached, commits by topic ID, which kfake refuses.
	if err := kadm.NewClient(cl).CommitAllOffsets(ctx, group, offs); err != nil {
		t.Fatal(err)
	}

	got, err := DroppedSteps(ctx, adm, names, &policy, group)
	if err != nil {
		t.Fatal(err)
	}
	want := []DroppedStep{{Topic: "push.tier2.retry-8s", Source: topology.Source{Tier: tiers.Tier2, Retry: true, Step: -1, Delay: 8 * time.Second}, Pending: 2}}
	if !slices.Equal(got, want) {
		t.Errorf("DroppedSteps = %+v, want %+v", got, want)
	}

	// Another group has consumed nothing: every record waits for it.
	got, err = DroppedSteps(ctx, adm, names, &policy, "fresh")
	if err != nil {
		t.Fatal(err)
	}
	var topics []string
	var pending int64
	for _, d := range got {
		topics = append(topics, d.Topic)
		pending += d.Pending
	}
	if want := []string{"push.tier2.retry-60s", "push.tier2.retry-8s"}; !slices.Equal(topics, want) || pending != 6 {
		t.Errorf("for a fresh group: %v with %d records, want %v with 6", topics, pending, want)
	}

	// Back on the old ladder, the newer ladder's step is the dropped one.
	got, err = DroppedSteps(ctx, adm, names, &old, group)
	if err != nil || len(got) != 1 || got[0].Topic != "push.tier2.retry-5s" || got[0].Pending != 4 {
		t.Errorf("DroppedSteps with the old ladder = %+v, %v; want push.tier2.retry-5s with 4 records", got, err)
	}
}
