package checkpoint

import (
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// tracked makes a tracker holding records at offsets, finished as done
// says, with nothing passed yet.
func tracked(offsets []int64, done []bool) (*Tracker, []*Entry) {
	t := &Tracker{}
	var es []*Entry
	for _, o := range offsets {
		e, _, _ := t.Track(&kgo.Record{Offset: o})
		es = append(es, e)
	}
	for i, e := range es {
		if done[i] {
			t.Start(e)
			t.Finish(e)
		}
	}
	return t, es
}

// at is the time the tests' commits are written.
var at = time.UnixMilli(1_700_000_000_123)

func TestSpans(t *testing.T) {
	// Head 10 unfinished; 11, 12 finished; 13 held; 15 finished, 17
	// finished with 16 absent (a transaction marker); 18 in flight.
	tr, _ := tracked([]int64{10, 11, 12, 13, 15, 17, 18}, []bool{false, true, true, false, true, true, false})
	if got, want := tr.spansLocked(10), []Span{{11, 13}, {15, 18}}; !slices.Equal(got, want) {
		t.Errorf("spans(10) = %v, want %v", got, want)
	}
	// A commit request older than the head: what the head passed since
	// is finished too.
	if got, want := tr.spansLocked(7), []Span{{7, 10}, {11, 13}, {15, 18}}; !slices.Equal(got, want) {
		t.Errorf("spans(7) = %v, want %v", got, want)
	}
	if got := (&Tracker{}).spansLocked(4); len(got) != 0 {
		t.Errorf("empty tracker: %v, want none", got)
	}
}

// A new owner's commits keep telling what its predecessor finished beyond
// what it has consumed again (a commit before it re-read them dropped
// them, and a crash then sent them again).
func TestSpansKeepPrior(t *testing.T) {
	tr := &Tracker{}
	tr.SetPrior([]Span{{11, 13}, {15, 18}}, "committed")
	// Consumed again: 10 (not finished before) is in flight.
	tr.Track(&kgo.Record{Offset: 10})
	if got, want := tr.spansLocked(10), []Span{{11, 13}, {15, 18}}; !slices.Equal(got, want) {
		t.Errorf("in flight at the head: spans(10) = %v, want %v", got, want)
	}
	// Nothing tracked at all: the committed offset is the head.
	empty := &Tracker{}
	empty.SetPrior([]Span{{11, 13}}, "committed")
	if got, want := empty.Metadata(10, at), Encode(10, []Span{{11, 13}}, at); got != want {
		t.Errorf("nothing consumed yet: metadata %q, want %q", got, want)
	}
}

func TestSkip(t *testing.T) {
	tr := &Tracker{}
	tr.SetPrior([]Span{{11, 13}, {15, 18}}, "committed")
	var skipped []int64
	var marks []int64
	for o := int64(10); o < 20; o++ {
		e, skip, mark := tr.Track(&kgo.Record{Offset: o})
		if skip != "" {
			skipped = append(skipped, o)
		}
		if mark != nil {
			marks = append(marks, mark.Offset)
		}
		if o == 10 {
			tr.Start(e)
			if m := tr.Finish(e); m != nil {
				marks = append(marks, m.Offset)
			}
		}
	}
	if want := []int64{11, 12, 15, 16, 17}; !slices.Equal(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	if want := []int64{10, 11, 12}; !slices.Equal(marks, want) {
		t.Errorf("marked %v, want %v", marks, want)
	}
	if len(tr.prior) != 0 {
		t.Errorf("spans behind the last offset kept: %v", tr.prior)
	}
}

// Finish asks for a metadata commit only when a record finished behind an
// unfinished one, and a handed-over partition marks nothing.
func TestFinishDirty(t *testing.T) {
	tr, es := tracked([]int64{1, 2, 3}, []bool{false, false, false})
	if last := tr.Finish(es[0]); last == nil || last.Offset != 1 || tr.dirty {
		t.Fatalf("head finished: last %v, dirty %v; want offset 1, false", last, tr.dirty)
	}
	if last := tr.Finish(es[2]); last != nil || !tr.dirty {
		t.Fatalf("record behind the head finished: last %v, dirty %v; want nil, true", last, tr.dirty)
	}
	if h, ok := tr.Head(); !ok || h.Offset != 2 {
		t.Fatalf("Head = %v, %v; want offset 2", h, ok)
	}
	if meta := tr.Metadata(2, at); meta != Encode(2, []Span{{3, 4}}, at) {
		t.Fatalf("metadata %q", meta)
	}
	tr.Acked()
	if _, ok := tr.Head(); ok {
		t.Fatal("Head still dirty after an acknowledged commit told the finished offsets")
	}
	tr.Close()
	if last := tr.Finish(es[1]); last != nil {
		t.Fatalf("handed over: marked %v", last)
	}
	if meta := tr.Metadata(2, at); meta != "" {
		t.Fatalf("handed over: metadata %q", meta)
	}
}

func TestStranded(t *testing.T) {
	// 1 held (never started), 2 finished, 3 held, 4 in flight, 5 held,
	// 6 finished: only 1 holds back a finished record the commit could
	// pass; 3 and 5 are behind 4, which is not finished, so the commit
	// stops before them and the next owner consumes them anyway.
	tr, es := tracked([]int64{1, 2, 3, 4, 5, 6}, []bool{false, true, false, false, false, true})
	tr.Start(es[3])
	var got []int64
	for _, e := range tr.Stranded() {
		got = append(got, e.Record.Offset)
	}
	if want := []int64{1}; !slices.Equal(got, want) {
		t.Errorf("stranded %v, want %v", got, want)
	}
}

func TestCommittable(t *testing.T) {
	tr := &Tracker{}
	if _, ok := tr.Committable(); ok {
		t.Fatal("nothing tracked, yet something to commit")
	}
	e1, _, _ := tr.Track(&kgo.Record{Offset: 7, LeaderEpoch: 2})
	e2, _, _ := tr.Track(&kgo.Record{Offset: 8, LeaderEpoch: 2})
	tr.Finish(e2)
	if h, ok := tr.Committable(); !ok || h.Offset != 7 {
		t.Fatalf("head unfinished: %v %v, want offset 7", h, ok)
	}
	tr.Finish(e1)
	if h, ok := tr.Committable(); !ok || h.Offset != 9 || h.Epoch != 2 {
		t.Fatalf("all finished: %v %v, want offset 9 epoch 2", h, ok)
	}
}

// A sealed partition (its hand-off commit about to be made) marks nothing
// more, but its commit still tells everything that finished, sealed or
// not.
func TestSeal(t *testing.T) {
	tr, es := tracked([]int64{1, 2, 3, 4}, []bool{false, true, false, false})
	tr.Seal()
	if last := tr.Finish(es[0]); last != nil {
		t.Errorf("sealed: marked %v", last)
	}
	if _, skipped, mark := tr.Track(&kgo.Record{Offset: 5}); skipped != "" || mark != nil {
		t.Errorf("sealed: Track skipped %v, marked %v", skipped, mark)
	}
	tr.Finish(es[3])
	if h, ok := tr.Committable(); !ok || h.Offset != 3 {
		t.Errorf("sealed: Committable %v %v, want offset 3", h, ok)
	}
	if got, want := tr.Metadata(3, at), Encode(3, []Span{{4, 5}}, at); got != want {
		t.Errorf("sealed: metadata %q, want %q", got, want)
	}
	if tr.Owned() {
		t.Error("sealed: still owned, so ordinary commits would include it")
	}
	if _, ok := tr.Head(); ok {
		t.Error("sealed: Head asks for a commit of its own")
	}
}

// A commit that fails leaves the partition dirty, so the next one tells its
// finished offsets again; an acknowledgement of a commit written before a
// later finish leaves it dirty too.
func TestDirtyUntilAcked(t *testing.T) {
	tr, es := tracked([]int64{1, 2, 3, 4}, []bool{false, false, false, false})
	tr.Finish(es[2])
	tr.Metadata(1, at) // a commit issued ... that fails: no Acked
	if _, ok := tr.Head(); !ok {
		t.Fatal("a commit that was never acknowledged cleared the partition's dirty flag")
	}
	tr.Metadata(1, at) // issued again
	tr.Finish(es[3])   // a finish after its metadata was written
	tr.Acked()
	if _, ok := tr.Head(); !ok {
		t.Fatal("an acknowledgement cleared a finish its commit did not tell")
	}
	if got, want := tr.Metadata(1, at), Encode(1, []Span{{3, 5}}, at); got != want {
		t.Fatalf("metadata %q, want %q", got, want)
	}
	tr.Acked()
	if _, ok := tr.Head(); ok {
		t.Fatal("dirty after an acknowledged commit that told every finish")
	}
}

// Spans an earlier owner finished, known from its commit and from what it
// produced, may overlap; Track tells how each skipped one is known.
func TestSkipReasons(t *testing.T) {
	tr := &Tracker{}
	tr.SetPrior([]Span{{2, 4}}, "committed")
	tr.SetPrior([]Span{{3, 6}, {8, 9}}, "outcome")
	var got []string
	for o := int64(1); o < 10; o++ {
		_, why, _ := tr.Track(&kgo.Record{Offset: o})
		got = append(got, why)
	}
	want := []string{"", "committed", "committed", "outcome", "outcome", "", "", "outcome", ""}
	if !slices.Equal(got, want) {
		t.Errorf("skipped %q, want %q", got, want)
	}
}

// A record at an offset tracked already (the client's position went back)
// is not tracked again.
func TestTrackAgain(t *testing.T) {
	tr := &Tracker{}
	for _, o := range []int64{5, 6, 7} {
		if e, _, _ := tr.Track(&kgo.Record{Offset: o}); e == nil {
			t.Fatalf("offset %d refused the first time", o)
		}
	}
	for _, o := range []int64{0, 5, 7} {
		if e, _, _ := tr.Track(&kgo.Record{Offset: o}); e != nil {
			t.Errorf("offset %d tracked again", o)
		}
	}
	if e, _, _ := tr.Track(&kgo.Record{Offset: 9}); e == nil {
		t.Error("offset 9, new, refused")
	}
}
