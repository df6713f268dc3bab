package pipeline

import (
	"slices"
	"sync"

	"github.com/tierpush/tierpush/topology"
)

// window bounds the records in flight (MaxInFlight) and decides which
// partition's dispatcher gets a slot that frees: retry records before first
// attempts, and within each, the tiers by smooth weighted round robin over
// those waiting, with the tiers' weights (tier 1 keeps its share, tier 3
// yields first; a tier alone takes every slot).
//
// Retries go first because they have a due time to keep and come only from
// sends made a step earlier, so they cannot crowd first attempts out for
// long. A channel would serve dispatchers in arrival order: in a backlog,
// the due records of one retry partition waited behind a turn of every tier
// partition, seconds late.
type window struct {
	mu      sync.Mutex
	size    int
	free    int
	weights [3]int
	wrr     [2][3]int
	queues  [2][3][]chan struct{} // {first, retry} × tier
	waiting int
}

func newWindow(size int, weights [3]int) *window {
	return &window{size: size, free: size, weights: weights}
}

// windowClass is the queue a partition's dispatcher waits in.
func windowClass(src topology.Source) (retry, tier int) {
	retry = 0
	if src.Retry {
		retry = 1
	}
	return retry, src.Tier.Index()
}

// acquire takes a slot for a dispatcher of class (retry, tier), waiting
// its turn. It returns false, holding nothing, once stop is closed first.
func (w *window) acquire(retry, tier int, stop <-chan struct{}) bool {
	w.mu.Lock()
	if w.free > 0 {
		w.free-- // free slots mean nobody waits: release hands them over
		w.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	q := &w.queues[retry][tier]
	*q = append(*q, ch)
	w.waiting++
	w.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-stop:
	}
	w.mu.Lock()
	if i := slices.Index(*q, ch); i >= 0 {
		*q = slices.Delete(*q, i, i+1)
		w.waiting--
		w.mu.Unlock()
		return false
	}
	w.mu.Unlock()
	w.release() // granted as stop closed: pass it on
	return false
}

// release gives a slot back, to the next waiter if there is one.
func (w *window) release() {
	w.mu.Lock()
	ch := w.pickLocked()
	if ch == nil {
		w.free++
	}
	w.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

func (w *window) pickLocked() chan struct{} {
	if w.waiting == 0 {
		return nil
	}
	for retry := 1; retry >= 0; retry-- {
		qs := &w.queues[retry]
		best, total := -1, 0
		for t := range qs {
			if len(qs[t]) == 0 {
				continue
			}
			w.wrr[retry][t] += w.weights[t]
			total += w.weights[t]
			if best < 0 || w.wrr[retry][t] > w.wrr[retry][best] {
				best = t
			}
		}
		if best < 0 {
			continue
		}
		w.wrr[retry][best] -= total
		ch := qs[best][0]
		qs[best][0] = nil
		qs[best] = qs[best][1:]
		w.waiting--
		return ch
	}
	return nil
}

// inUse is the number of slots taken.
func (w *window) inUse() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.size - w.free
}
