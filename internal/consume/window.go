package consume

import (
	"sync"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// window bounds the records in flight (MaxInFlight) and decides whose
// record a slot that frees starts: a retry partition's before a tier
// partition's, and within each, the tiers by smooth weighted round robin
// over those waiting, with the tiers' weights (tier 1 keeps its share,
// tier 3 yields first; a tier alone takes every slot). Partitions of one
// class take turns, a record each.
//
// Half the slots are tier 1's (reserved): the lower tiers start records
// only while more slots than that are free, so a burst of tier-1 records
// that arrives while a flood of tier 3 fills the window (waiting for the
// pacer, say) starts at once instead of behind the backlog, and within one
// round trip to the push service rather than as its slots free.
//
// Retries go first because they have a due time to keep and come only from
// sends made a step earlier, so they cannot crowd first attempts out for
// long.
//
// The goroutine that frees a slot starts the next record itself (start),
// so a record due while the window is full waits for a slot only, not also
// for its dispatcher to be scheduled: on saturated cores each such wake-up
// waited behind every runnable goroutine, and a partition with many records
// due at once woke once per record (c: retry lateness p99 0.4 s).
type window struct {
	start func(*worker) (started, more bool)

	mu       sync.Mutex
	size     int
	free     int
	reserved int                 // slots only tier 1 may take: size/reserveDiv
	turns    [2]tiers.RoundRobin // {first, retry}
	queues   [2][3][]*worker     // {first, retry} × tier; worker.inWindow
	waiting  int
}

// newWindow returns a window of size slots. start starts the next ready
// record of a partition on a slot taken for it; it reports whether it did
// (not if the partition was handed back or has nothing ready) and whether
// the partition has more ready. It must not block or call the window.
func newWindow(size int, weights [3]int, start func(*worker) (started, more bool)) *window {
	rr := tiers.NewRoundRobin(weights)
	return &window{size: size, free: size, reserved: size / reserveDiv, turns: [2]tiers.RoundRobin{rr, rr}, start: start}
}

// reserveDiv: a window's size over the slots reserved for tier 1.
const reserveDiv = 2

// mayStartLocked tells whether a record of tier index tier may take a
// free slot now.
func (w *window) mayStartLocked(tier int) bool {
	return w.free > 0 && (tier == 0 || w.free > w.reserved)
}

// windowClass is the queue a partition waits in.
func windowClass(src topology.Source) (retry, tier int) {
	retry = 0
	if src.Retry {
		retry = 1
	}
	return retry, src.Tier.Index()
}

// offer is called when ps has records ready: it starts them while slots
// are free, and otherwise queues ps for the next slot that frees, unless
// it is queued already.
func (w *window) offer(ps *worker) {
	for {
		w.mu.Lock()
		if ps.inWindow {
			w.mu.Unlock()
			return
		}
		if retry, tier := windowClass(ps.src); !w.mayStartLocked(tier) {
			w.queues[retry][tier] = append(w.queues[retry][tier], ps)
			ps.inWindow = true
			w.waiting++
			w.mu.Unlock()
			return
		}
		w.free-- // free slots mean nobody waits: release hands them over
		w.mu.Unlock()
		started, more := w.start(ps)
		if !started {
			w.release()
			return
		}
		if !more {
			return
		}
	}
}

// release gives a slot back: it starts the next record of the partition
// whose turn it is, or keeps the slot free when none waits or the window
// has shrunk below the slots in use.
func (w *window) release() {
	for {
		w.mu.Lock()
		w.free++
		ps := w.pickLocked()
		if ps == nil {
			w.mu.Unlock()
			return
		}
		w.free--
		ps.inWindow = false
		w.mu.Unlock()
		started, more := w.start(ps)
		if more {
			w.offer(ps) // to the back of its class's queue
		}
		if started {
			return
		}
	}
}

func (w *window) pickLocked() *worker {
	if w.waiting == 0 {
		return nil
	}
	for retry := 1; retry >= 0; retry-- {
		qs := &w.queues[retry]
		t := w.turns[retry].Next(func(i int) bool { return len(qs[i]) > 0 && w.mayStartLocked(i) })
		if t < 0 {
			continue
		}
		ps := qs[t][0]
		qs[t][0] = nil
		qs[t] = qs[t][1:]
		w.waiting--
		return ps
	}
	return nil
}

// inUse is the number of slots taken.
func (w *window) inUse() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size - w.free
}

// limit is the number of slots.
func (w *window) limit() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size
}

// resize sets the number of slots. Shrinking takes nothing back from the
// records in flight: slots freed past the new size are not handed on.
// Growing starts waiting records on the new slots.
func (w *window) resize(size int) {
	w.mu.Lock()
	grow := size - w.size
	w.size, w.reserved = size, size/reserveDiv
	if grow < 0 {
		w.free += grow
	}
	w.mu.Unlock()
	for range grow {
		w.release()
	}
}
