package consume

import (
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierpush/tierpush/internal/checkpoint"
)

// What a new owner may skip: a first record once anything of its event
// was produced; a retry record once its event has an outcome or a retry
// record due after it. A record its event was at before (due earlier), or
// one of the same due time (itself, a copy of it), shows nothing.
func TestDoneOffsets(t *testing.T) {
	tier := topicPart{"push.tier1", 0}
	retry := topicPart{"push.tier1.retry-2s", 3}
	parts := map[topicPart]*taking{
		tier:  {committed: 10, end: 20},
		retry: {committed: 100, end: 110, retry: true},
		// Not taken over: its events prove nothing here.
	}
	trails := map[string]*trail{
		"push.tier1/0/11": {terminal: true}, // delivered
		"push.tier1/0/12": {maxDue: 5_000},  // on the ladder
		"push.tier1/0/9":  {terminal: true}, // behind the commit
		"push.tier1/0/25": {terminal: true}, // produced after resume looked
		"push.tier1/1/11": {terminal: true}, // another partition
		"push.tier1/0/x":  {terminal: true}, // not an origin
		"push.tier1/5/1":  {maxDue: 9_000},  // retry records below
		"push.tier1/5/2":  {maxDue: 7_000},  //
		"push.tier1/5/3":  {terminal: true}, //
		"push.tier1/5/4":  {maxDue: 8_000},  //
		"push.tier2/0/13": {terminal: true}, // another topic
	}
	pend := []pending{
		{retry, 101, "push.tier1/5/1", 8_000}, // a later step is due at 9,000
		{retry, 102, "push.tier1/5/2", 7_000}, // its own due time: itself, or a copy
		{retry, 103, "push.tier1/5/3", 6_000}, // its event has an outcome
		{retry, 104, "push.tier1/5/4", 9_500}, // the retry read is its predecessor
	}
	got := doneOffsets(parts, trails, pend)
	want := map[topicPart]map[string][]int64{
		tier:  {whyOutcome: {11}, whyRetry: {12}},
		retry: {whyRetry: {101}, whyOutcome: {103}},
	}
	if len(got) != len(want) {
		t.Fatalf("done %v, want %v", got, want)
	}
	for k, w := range want {
		for why, offs := range w {
			g := slices.Sorted(slices.Values(got[k][why]))
			if !slices.Equal(g, offs) {
				t.Errorf("%s/%d %s: done %v, want %v", k.topic, k.part, why, g, offs)
			}
		}
		if len(got[k]) != len(w) {
			t.Errorf("%s/%d: done %v, want %v", k.topic, k.part, got[k], w)
		}
	}
}

func TestSpansOf(t *testing.T) {
	got := spansOf([]int64{7, 3, 4, 5, 9, 4})
	want := []checkpoint.Span{{From: 3, To: 6}, {From: 7, To: 8}, {From: 9, To: 10}}
	if !slices.Equal(got, want) {
		t.Errorf("spans %v, want %v", got, want)
	}
}

// A commit names only the partitions this member owns: not one handed
// over or lost, not one sealed for its hand-off's commit, which alone may
// name it; each named partition carries its checkpoint and the time.
func TestAnnotateOwnsOnly(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	c := &Consumer{cfg: Config{Now: func() time.Time { return now }}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), parts: make(map[topicPart]*worker)}
	owned, sealed, lost := &worker{}, &worker{}, &worker{}
	c.parts[topicPart{"t", 0}] = owned
	c.parts[topicPart{"t", 1}] = sealed
	c.parts[topicPart{"t", 2}] = lost
	sealed.ck.Seal()
	lost.ck.Close()
	for _, w := range []*worker{owned, sealed, lost} {
		w.ck.Track(&kgo.Record{Offset: 5})
	}
	req := func() *kmsg.OffsetCommitRequest {
		r := kmsg.NewPtrOffsetCommitRequest()
		rt := kmsg.NewOffsetCommitRequestTopic()
		rt.Topic = "t"
		for p := range int32(4) { // 3: handed over, no worker
			rp := kmsg.NewOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset = p, 5
			rt.Partitions = append(rt.Partitions, rp)
		}
		other := kmsg.NewOffsetCommitRequestTopic()
		other.Topic = "gone"
		other.Partitions = []kmsg.OffsetCommitRequestTopicPartition{kmsg.NewOffsetCommitRequestTopicPartition()}
		r.Topics = []kmsg.OffsetCommitRequestTopic{rt, other}
		return r
	}
	names := func(r *kmsg.OffsetCommitRequest) (out []int32) {
		for _, rt := range r.Topics {
			if rt.Topic != "t" {
				t.Errorf("topic %q left in the request", rt.Topic)
			}
			for _, rp := range rt.Partitions {
				out = append(out, rp.Partition)
				if rp.Metadata == nil || *rp.Metadata != checkpoint.Encode(5, nil, now) {
					t.Errorf("partition %d: metadata %v, want the checkpoint at %v", rp.Partition, rp.Metadata, now)
				}
			}
		}
		return out
	}
	r := req()
	c.annotateCommit(r)
	if got := names(r); !slices.Equal(got, []int32{0}) {
		t.Errorf("an ordinary commit names partitions %v, want [0]", got)
	}
	r = req()
	c.annotateHandOff([]*worker{sealed})(r)
	if got := names(r); !slices.Equal(got, []int32{0, 1}) {
		t.Errorf("the hand-off's commit names partitions %v, want [0 1]", got)
	}
}
