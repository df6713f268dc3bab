package pacing

import (
	"slices"
	"time"

	"github.com/tierpush/tierpush/tiers"
)

// defaultHold is how long a request that names no Hold may wait in
// memory: the shortest step of the default ladders.
const defaultHold = 2 * time.Second

type grant struct {
	slot  *Slot
	until time.Time
}

// waiter is a request waiting for a slot.
type waiter struct {
	ch  chan grant
	req Request
}

func (w *waiter) hold() time.Duration {
	if w.req.Hold > 0 {
		return w.req.Hold
	}
	return defaultHold
}

// queue holds the requests waiting for a slot, oldest first within a tier.
// Tier 1 (2FA codes, password resets) goes first; tiers 2 and 3 take turns
// by their weights (smooth weighted round robin) in what tier 1 leaves.
type queue struct {
	tiers [3][]*waiter
	turns tiers.RoundRobin
	n     int
}

func (q *queue) push(w *waiter) {
	i := w.req.Tier.Index()
	q.tiers[i] = append(q.tiers[i], w)
	q.n++
}

// pop takes the waiter whose turn it is; nil when none waits.
func (q *queue) pop() *waiter {
	i := 0
	if len(q.tiers[0]) == 0 {
		i = q.turns.Next(func(i int) bool { return i > 0 && len(q.tiers[i]) > 0 })
	}
	if i < 0 {
		return nil
	}
	w := q.tiers[i][0]
	q.tiers[i][0] = nil
	q.tiers[i] = q.tiers[i][1:]
	q.n--
	return w
}

// remove takes w out; false when it is no longer waiting.
func (q *queue) remove(w *waiter) bool {
	i := w.req.Tier.Index()
	at := slices.Index(q.tiers[i], w)
	if at < 0 {
		return false
	}
	q.tiers[i] = slices.Delete(q.tiers[i], at, at+1)
	q.n--
	return true
}

// ahead counts the waiters a request of tier index ti waits behind: those
// of its tier and of the tiers above it.
func (q *queue) ahead(ti int) int {
	n := 0
	for i := 0; i <= ti; i++ {
		n += len(q.tiers[i])
	}
	return n
}

// class counts the waiters of tier index ti's class: tier 1, or the lower
// tiers together, as the pipeline's window reserves slots for tier 1 and
// keeps a part for the lower tiers: tier 1 never waits behind the lower
// tiers' share, nor they behind its.
func (q *queue) class(ti int) int {
	if ti == 0 {
		return len(q.tiers[0])
	}
	return len(q.tiers[1]) + len(q.tiers[2])
}

// shed takes out every waiter that would rather go back to the ladder
// than wait out a halt of pause, each until the halt ends.
func (q *queue) shed(pause time.Duration, now time.Time) []granted {
	if pause <= 0 {
		return nil
	}
	var out []granted
	for i := range q.tiers {
		q.tiers[i] = slices.DeleteFunc(q.tiers[i], func(w *waiter) bool {
			if pause > w.hold() {
				out = append(out, granted{w, grant{until: now.Add(pause)}})
				return true
			}
			return false
		})
	}
	q.n -= len(out)
	return out
}

// queued is how long the k-th in a queue served at rate per second waits.
func queued(k int, rate float64) time.Duration {
	return time.Duration(float64(k) / rate * float64(time.Second))
}
