package admin

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// cluster starts an in-process kfake cluster and returns an admin client
// and a plain client on it.
func cluster(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, *kadm.Client, *kgo.Client) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, kadm.NewClient(cl), cl
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// testSpec differs from DefaultSpec everywhere, so a test cannot pass on
// broker defaults.
func testSpec() Spec {
	return Spec{Partitions: 3, ReplicationFactor: -1, Retention: 48 * time.Hour, DLQRetention: 96 * time.Hour}
}

func TestEnsureTopicsCreatesFullSetAndIsIdempotent(t *testing.T) {
	ctx := ctxT(t)
	_, adm, _ := cluster(t)
	names := topology.Names{Prefix: "push."}
	policy := tiers.DefaultPolicy()
	spec := testSpec()

	want := names.All(&policy)
	slices.Sort(want)
	if len(want) != 16 {
		t.Fatalf("topology has %d topics, want the contract's 14, push.pacing and push.members: %v", len(want), want)
	}

	first, err := Ensure(ctx, adm, names, &policy, spec)
	if err != nil {
		t.Fatalf("first Ensure: %v", err)
	}
	var got []string
	for _, s := range first {
		got = append(got, s.Topic)
		if !s.Created || s.Drift != "" || s.Partitions != spec.Partitions {
			t.Errorf("first Ensure %s = %+v, want created with %d partitions and no drift", s.Topic, s, spec.Partitions)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("first Ensure topics = %v, want %v", got, want)
	}

	// The broker really has them, with the spec's partitions.
	details, err := adm.ListTopics(fresh(ctx), want...)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range want {
		d := details[topic]
		if d.Err != nil || len(d.Partitions) != int(spec.Partitions) {
			t.Errorf("broker topic %s: err %v, %d partitions, want %d", topic, d.Err, len(d.Partitions), spec.Partitions)
		}
	}

	second, err := Ensure(ctx, adm, names, &policy, spec)
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if len(second) != len(want) {
		t.Fatalf("second Ensure reported %d topics, want %d", len(second), len(want))
	}
	for _, s := range second {
		if s.Created || s.Drift != "" || s.Partitions != spec.Partitions {
			t.Errorf("second Ensure %s = %+v, want unchanged, no drift", s.Topic, s)
		}
	}
}

func TestEnsureTopicsSetsConfigs(t *testing.T) {
	ctx := ctxT(t)
	_, adm, _ := cluster(t)
	names := topology.Names{Prefix: "push."}
	policy := tiers.DefaultPolicy()
	spec := testSpec()
	if _, err := Ensure(ctx, adm, names, &policy, spec); err != nil {
		t.Fatal(err)
	}

	all := names.All(&policy)
	rcs, err := adm.DescribeTopicConfigs(ctx, all...)
	if err != nil {
		t.Fatalf("describe topic configs: %v", err)
	}
	for _, topic := range all {
		rc, err := rcs.On(topic, nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("configs of %s: %v %v", topic, err, rc.Err)
		}
		got := map[string]string{}
		for _, c := range rc.Configs {
			got[c.Key] = c.MaybeValue()
		}
		for key, want := range configsFor(topic, names, spec) {
			if got[key] != *want {
				t.Errorf("%s %s = %q, want %q", topic, key, got[key], *want)
			}
		}
		wantRetention := spec.Retention
		switch topic {
		case names.DLQ():
			wantRetention = spec.DLQRetention
		case names.Pacing():
			wantRetention = time.Hour
		case names.Members():
			wantRetention = 10 * time.Minute
		}
		if got["retention.ms"] != strconv.FormatInt(wantRetention.Milliseconds(), 10) {
			t.Errorf("%s retention.ms = %q, want %s", topic, got["retention.ms"], wantRetention)
		}
		compacted := strings.Contains(got["cleanup.policy"], "compact")
		if compacted != (topic == names.Outcomes() || topic == names.Pacing()) {
			t.Errorf("%s cleanup.policy = %q: only %s and %s are compacted", topic, got["cleanup.policy"], names.Outcomes(), names.Pacing())
		}
	}
}

func TestEnsureTopicsReportsDriftAndKeepsData(t *testing.T) {
	ctx := ctxT(t)
	_, adm, cl := cluster(t)
	names := topology.Names{Prefix: "push."}
	policy := tiers.DefaultPolicy()
	spec := testSpec()
	short := names.Tier(tiers.Tier2)

	// An operator created push.tier2 by hand with 1 partition and it holds events.
	if _, err := adm.CreateTopic(ctx, 1, -1, nil, short); err != nil {
		t.Fatal(err)
	}
	const records = 5
	for i := range records {
		r := &kgo.Record{Topic: short, Value: []byte("event-" + strconv.Itoa(i))}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	for run := 1; run <= 2; run++ {
		states, err := Ensure(ctx, adm, names, &policy, spec)
		if err != nil {
			t.Fatalf("Ensure run %d: %v", run, err)
		}
		for _, s := range states {
			switch {
			case s.Topic == short:
				if s.Created || s.Partitions != 1 || !strings.Contains(s.Drift, "has 1 partitions, spec asks 3") {
					t.Errorf("run %d: %s = %+v, want drift of 1 partition against 3", run, short, s)
				}
			case s.Drift != "":
				t.Errorf("run %d: %s reports drift %q", run, s.Topic, s.Drift)
			case s.Created != (run == 1):
				t.Errorf("run %d: %s created = %v", run, s.Topic, s.Created)
			}
		}
	}

	// Left intact: still one partition, every record still there.
	details, err := adm.ListTopics(fresh(ctx), short)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(details[short].Partitions); n != 1 {
		t.Errorf("%s has %d partitions after Ensure, want the original 1", short, n)
	}
	starts, err := adm.ListStartOffsets(ctx, short)
	if err != nil {
		t.Fatal(err)
	}
	ends, err := adm.ListEndOffsets(ctx, short)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := starts.Lookup(short, 0)
	end, _ := ends.Lookup(short, 0)
	if start.Offset != 0 || end.Offset != records {
		t.Errorf("%s offsets [%d, %d) after Ensure, want [0, %d): records lost", short, start.Offset, end.Offset, records)
	}
}

func TestEnsureTopicsReportsReplicationDrift(t *testing.T) {
	ctx := ctxT(t)
	_, adm, _ := cluster(t, kfake.NumBrokers(3))
	names := topology.Names{Prefix: "push."}
	policy := tiers.DefaultPolicy()
	spec := testSpec()
	spec.ReplicationFactor = 3
	thin := names.DLQ()
	if _, err := adm.CreateTopic(ctx, spec.Partitions, 1, nil, thin); err != nil {
		t.Fatal(err)
	}

	states, err := Ensure(ctx, adm, names, &policy, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Topic == thin {
			if s.ReplicationFactor != 1 || !strings.Contains(s.Drift, "has 1 replicas, spec asks 3") {
				t.Errorf("%s = %+v, want replication drift 1 against 3", thin, s)
			}
			continue
		}
		if !s.Created || s.ReplicationFactor != 3 || s.Drift != "" {
			t.Errorf("%s = %+v, want created with 3 replicas", s.Topic, s)
		}
	}

	// With the broker default (-1) the replica count is not checked.
	spec.ReplicationFactor = -1
	states, err = Ensure(ctx, adm, names, &policy, spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range states {
		if s.Drift != "" {
			t.Errorf("with replication factor -1, %s reports drift %q", s.Topic, s.Drift)
		}
	}
}

// Two replicas starting at once both see a topic missing; the one whose
// create loses must report the topic as it exists, not fail.
func TestEnsureTopicsCreateRace(t *testing.T) {
	ctx := ctxT(t)
	c, adm, _ := cluster(t)
	names := topology.Names{Prefix: "push."}
	policy := tiers.DefaultPolicy()
	spec := testSpec()
	raced := names.Gone()

	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	var sleeping atomic.Bool
	otherDone := make(chan error, 1)
	c.ControlKey(int16(kmsg.CreateTopics), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.CreateTopicsRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != raced || !sleeping.CompareAndSwap(false, true) {
			return nil, nil, false // everything else, including the other client's create, runs normally
		}
		// Ensure's create of push.gone waits until another client created it with 7 partitions.
		go func() {
			_, err := kadm.NewClient(other).CreateTopic(ctx, 7, -1, nil, raced)
			otherDone <- err
		}()
		c.SleepControl(func() {
			if err := <-otherDone; err != nil {
				t.Errorf("other client's create: %v", err)
			}
		})
		return nil, nil, false
	})

	states, err := Ensure(ctx, adm, names, &policy, spec)
	if err != nil {
		t.Fatalf("Ensure lost a create race: %v", err)
	}
	if !sleeping.Load() {
		t.Fatal("the race was not staged: no CreateTopics request for " + raced)
	}
	for _, s := range states {
		if s.Topic != raced {
			continue
		}
		if s.Created || s.Partitions != 7 || s.Drift != "" {
			t.Errorf("%s = %+v, want existing with the winner's 7 partitions", raced, s)
		}
	}
}
