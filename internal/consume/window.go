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
// only while more slots are free than tier 1 has yet to take of its half,
// so a burst of tier-1 records that arrives while a flood of tier 3 fills
// the window (waiting for the pacer, say) starts at once instead of behind
// the backlog, and within one round trip to the push service rather than
// as its slots free. In turn a quarter is the lower tiers' while they have
// records waiting: tier-1 records held back by a throttled push service
// (a 429 storm, a breaker) never take the last slots from tier 2 and 3
// sending to healthy ones. A tier alone still takes every slot.
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
	taken    [3]int              // slots taken, by tier
	reserved int                 // tier 1's slots: size/reserveDiv
	lower    int                 // the lower tiers' while they wait: size/lowerDiv
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
	return &window{size: size, free: size, reserved: size / reserveDiv, lower: size / lowerDiv, turns: [2]tiers.RoundRobin{rr, rr}, start: start}
}

// reserveDiv and lowerDiv: a window's size over the slots kept for tier 1,
// and for the lower tiers while they wait.
const (
	reserveDiv = 2
	lowerDiv   = 4
)

// mayStartLocked tells whether a record of tier index tier may take a
// free slot now. Tier 1's reserve stays free for it as long as it does not
// use it; beyond it, while tier 1 has records waiting, the lower tiers take
// slots only up to their quarter, and tier 1 none of the last of that
// quarter while they wait for it.
func (w *window) mayStartLocked(tier int) bool {
	lower := w.taken[1] + w.taken[2]
	if tier > 0 {
		return w.free > max(0, w.reserved-w.taken[0]) && (!w.waitingLocked(0) || lower < w.lower || w.free > w.reserved)
	}
	return w.free > 0 && (!w.waitingLocked(1, 2) || w.free > max(0, w.lower-lower))
}

// waitingLocked tells whether records of any of the tier indexes wait for
// a slot.
func (w *window) waitingLocked(idx ...int) bool {
	for _, t := range idx {
		if len(w.queues[0][t])+len(w.queues[1][t]) > 0 {
			return true
		}
	}
	return false
}

// takeLocked takes a free slot for a record of tier index tier.
func (w *window) takeLocked(tier int) {
	w.free--
	w.taken[tier]++
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
		retry, tier := windowClass(ps.src)
		if !w.mayStartLocked(tier) {
			w.queues[retry][tier] = append(w.queues[retry][tier], ps)
			ps.inWindow = true
			w.waiting++
			w.mu.Unlock()
			return
		}
		w.takeLocked(tier)
		w.mu.Unlock()
		started, more := w.start(ps)
		if !started {
			w.release(tier)
			return
		}
		if !more {
			return
		}
	}
}

// release gives back a slot a record of tier index tier held and hands it
// on in the same hold of the lock, so no offer jumps the partitions that
// wait (free slots mean nobody waits).
func (w *window) release(tier int) {
	w.mu.Lock()
	w.free++
	w.taken[tier]--
	w.handLocked()
}

// hand starts waiting records on the free slots (resize).
func (w *window) hand() {
	w.mu.Lock()
	w.handLocked()
}

// handLocked starts the next record of the partition whose turn it is on
// a free slot, or keeps the slot free when none may start (nobody waits,
// or the window has shrunk below the slots in use). A partition that has
// nothing to start when its turn comes (handed back) passes the slot on.
// It is called with w.mu held and returns with it released.
func (w *window) handLocked() {
	for {
		ps := w.pickLocked()
		if ps == nil {
			w.mu.Unlock()
			return
		}
		_, tier := windowClass(ps.src)
		w.takeLocked(tier)
		ps.inWindow = false
		w.mu.Unlock()
		started, more := w.start(ps)
		if more {
			w.offer(ps) // to the back of its class's queue
		}
		if started {
			return
		}
		w.mu.Lock()
		w.free++
		w.taken[tier]--
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
	w.size, w.reserved, w.lower = size, size/reserveDiv, size/lowerDiv
	w.free += grow
	w.mu.Unlock()
	for range grow {
		w.hand()
	}
}
