// Package checkpoint keeps one partition's checkpoint: which consumed
// records are finished (every record they led to acknowledged), the offset
// that may be committed (the first unfinished one), and the finished offsets
// after it that every commit carries in its metadata, so that a new owner
// skips them (meta.go). It owns no goroutine and talks to no broker: the
// consumer asks it at every commit, including those on revoke and shutdown.
package checkpoint

import (
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Entry is one tracked record.
type Entry struct {
	Record  *kgo.Record
	started bool // handed to a handler: in flight, finished or failed
	done    bool // every output acknowledged
}

// Tracker is the checkpoint of one partition. It is safe for concurrent
// use: the partition's worker tracks and finishes records while the
// client's commits read it.
type Tracker struct {
	mu    sync.Mutex
	queue []*Entry // tracked, not yet passed by the head, in offset order
	// prior are the offsets finished before this owner consumed them
	// (by an earlier owner), sorted by From; they may overlap.
	prior []prior
	// dirty: a record finished behind an unfinished one since the last
	// commit the broker acknowledged told which. changes counts those
	// finishes, told is changes when the last commit's metadata was
	// written (Metadata): an acknowledgement clears dirty only if no
	// finish came between (Acked).
	dirty         bool
	changes, told uint64
	sealed        bool // committed for the last time: mark nothing more
	closed        bool // handed over: tell nothing more
	// next is the offset after the last record the head passed (its
	// position only: a record kept here would keep its whole fetch).
	next    kgo.EpochOffset
	hasNext bool
	// tracked is one past the highest offset tracked (0: none yet).
	tracked int64
}

// prior is a span finished before this owner consumed it, and how that is
// known.
type prior struct {
	Span
	why string
}

// SetPrior adds spans finished before this owner consumed them: by an
// earlier owner, as its commit said, or as what it produced shows
// (internal/consume). why says how it is known; Track skips them and
// returns it.
func (t *Tracker) SetPrior(spans []Span, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range spans {
		t.prior = append(t.prior, prior{s, why})
	}
	slices.SortStableFunc(t.prior, func(a, b prior) int { return cmpOffset(a.From, b.From) })
}

func cmpOffset(a, b int64) int { return int(min(max(a-b, -1), 1)) }

// Track appends a consumed record. A record finished before this owner
// consumed it (SetPrior) is tracked as finished already: skipped says how
// that is known ("" when it is not skipped), and mark is the newest record
// that may now be marked for commit, if the head moved.
//
// A record at an offset this tracker has had already is consumed again
// because the client's position went back: Track returns a nil e, and the
// record must be dropped. kgo moves it back when a broker's answer reads as
// records lost (KIP-320); a broker elected cleanly never loses what a
// consumer read (it reads up to the high watermark), and the embedded
// broker's answers after a leader change read that way falsely (the
// earlier epoch's end unknown, so kgo resets to the log's start).
// Handling those records again would send them again, and break the
// order the tracker keeps.
func (t *Tracker) Track(r *kgo.Record) (e *Entry, skipped string, mark *kgo.Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.Offset < t.tracked {
		return nil, "", nil
	}
	t.tracked = r.Offset + 1
	e = &Entry{Record: r}
	t.queue = append(t.queue, e)
	why := t.skipLocked(r.Offset)
	if why == "" {
		return e, "", nil
	}
	e.started = true
	return e, why, t.finishLocked(e)
}

// Start records that e was handed to a handler.
func (t *Tracker) Start(e *Entry) {
	t.mu.Lock()
	e.started = true
	t.mu.Unlock()
}

// Finish marks e finished and returns the newest record that may now be
// marked for commit, or nil when the head did not move or the partition was
// handed over.
func (t *Tracker) Finish(e *Entry) *kgo.Record {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.finishLocked(e)
}

func (t *Tracker) finishLocked(e *Entry) *kgo.Record {
	e.done = true
	var last *kgo.Record
	i := 0
	for ; i < len(t.queue) && t.queue[i].done; i++ {
		last = t.queue[i].Record
	}
	if i > 0 {
		t.next, t.hasNext = kgo.EpochOffset{Epoch: last.LeaderEpoch, Offset: last.Offset + 1}, true
		n := copy(t.queue, t.queue[i:])
		clear(t.queue[n:])
		t.queue = t.queue[:n]
	}
	if len(t.queue) > 0 && e.Record.Offset > t.queue[0].Record.Offset {
		t.dirty = true
		t.changes++
	}
	if t.closed || t.sealed {
		return nil
	}
	return last
}

// skipLocked returns how it is known that offset o was finished before
// this owner consumed it, or "", dropping the spans behind o (offsets are
// tracked in order).
func (t *Tracker) skipLocked(o int64) string {
	for len(t.prior) > 0 && t.prior[0].To <= o {
		t.prior = t.prior[1:]
	}
	if len(t.prior) > 0 && t.prior[0].From <= o {
		return t.prior[0].why
	}
	return ""
}

// Head returns the first unfinished record's offset when records finished
// behind it that no acknowledged commit told: kgo's autocommit sends only
// partitions whose head moved, so the caller commits these itself. A sealed
// or handed-over partition has none.
func (t *Tracker) Head() (kgo.EpochOffset, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.dirty || t.closed || t.sealed || len(t.queue) == 0 {
		return kgo.EpochOffset{}, false
	}
	h := t.queue[0].Record
	return kgo.EpochOffset{Epoch: h.LeaderEpoch, Offset: h.Offset}, true
}

// Committable returns the offset a commit of the partition may name now:
// the first unfinished record's, or the one after the last record the head
// passed; ok is false when nothing was tracked yet.
func (t *Tracker) Committable() (kgo.EpochOffset, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case len(t.queue) > 0:
		h := t.queue[0].Record
		return kgo.EpochOffset{Epoch: h.LeaderEpoch, Offset: h.Offset}, true
	case t.hasNext:
		return t.next, true
	}
	return kgo.EpochOffset{}, false
}

// Metadata returns the commit metadata of a commit at committed written at
// at: the finished offsets after it and the time (meta.go); "" once the
// partition was handed over.
func (t *Tracker) Metadata(committed int64, at time.Time) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return ""
	}
	t.told = t.changes
	return Encode(committed, t.spansLocked(committed), at)
}

// Acked records that the broker acknowledged the commit whose metadata was
// written last (kgo issues a group's commits one after another): the
// finishes it told need no commit of their own any more, unless more came
// since it was written. A commit that failed is not acknowledged, so the
// partition stays dirty and is committed again (Head).
func (t *Tracker) Acked() {
	t.mu.Lock()
	if t.told == t.changes {
		t.dirty = false
	}
	t.mu.Unlock()
}

// Owned reports whether the partition may be committed by any commit but
// its hand-off's own: not sealed for that commit, not handed over.
func (t *Tracker) Owned() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.sealed && !t.closed
}

// spansLocked returns the offsets at or after committed known to be
// finished: those the head has passed, the finished records in the queue,
// and those an earlier owner finished that have not been consumed again
// yet. Offsets between two finished records that no record has
// (transaction markers, compacted records) count as finished.
func (t *Tracker) spansLocked(committed int64) []Span {
	var out []Span
	if len(t.queue) > 0 {
		if head := t.queue[0].Record.Offset; committed < head {
			out = append(out, Span{committed, head})
		}
		open := false
		for _, e := range t.queue {
			o := e.Record.Offset
			switch {
			case !e.done:
				open = false
			case open:
				out[len(out)-1].To = o + 1
			default:
				out = append(out, Span{o, o + 1})
				open = true
			}
		}
	}
	for _, p := range t.prior {
		out = append(out, p.Span)
	}
	slices.SortFunc(out, func(a, b Span) int { return cmpOffset(a.From, b.From) })
	merged := out[:0]
	for _, s := range out {
		if s.To <= committed {
			continue
		}
		s.From = max(s.From, committed)
		if n := len(merged); n > 0 && merged[n-1].To >= s.From {
			merged[n-1].To = max(merged[n-1].To, s.To)
			continue
		}
		merged = append(merged, s)
	}
	return merged
}

// Stranded returns the records never started that the head cannot pass
// although a later record is finished: those between the head and its last
// finished record that comes before any record started but unfinished (in
// flight, or failed: nothing past it can be committed anyway). A hand-off
// re-produces them so the commit can pass them (consume). Records never
// started after that point need nothing: they are not committed, so the
// next owner consumes them. A tier partition, started in offset order, has
// none.
func (t *Tracker) Stranded() []*Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	last := -1
	for i, e := range t.queue {
		if e.done {
			last = i
			continue
		}
		if e.started {
			break
		}
	}
	var out []*Entry
	for _, e := range t.queue[:last+1] {
		if !e.started && !e.done {
			out = append(out, e)
		}
	}
	return out
}

// Seal precedes a graceful hand-off's commit, the partition's last: from
// now on Track and Finish return nothing to mark, so a record finishing
// after it cannot move the client's head past that commit (an automatic
// commit of it would not carry the finished offsets), while Committable
// and Metadata still tell what finished for the commit itself.
func (t *Tracker) Seal() {
	t.mu.Lock()
	t.sealed = true
	t.mu.Unlock()
}

// Close hands the partition over: from now on nothing is marked and no
// metadata is written (another member may own it).
func (t *Tracker) Close() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}
