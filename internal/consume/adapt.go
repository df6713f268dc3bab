package consume

import (
	"context"
	"time"
)

// The window of records in flight shrinks while retries are picked up late.
//
// A send that the push service answers at once is CPU work on a few
// goroutines (handler, HTTP write and read loops, Kafka producer). With
// more of them runnable than the cores can run, each waits for a CPU
// behind all the others, and so does a retry that comes due: with
// --max-in-flight 768 on two busy cores, retries were sent 0.1–0.4 s after
// their due time (64 in flight: 23 ms). A push service that answers in
// 50 ms, on the other hand, needs hundreds of sends in flight to keep the
// cores busy, and a small window costs first attempts throughput. So the
// window is sized by the symptom that matters: every adaptInterval, if
// more than 1 % of the retries picked up (at least adaptMinSamples) waited
// for a CPU longer than Config.RetryLateness (notePickup), it shrinks by a
// quarter; when none did, or none was due, it grows by an eighth, up to
// MaxInFlight. Without retries nothing changes; a retry waiting for a
// throttled push service waits in the pacer, after pick-up, and does not
// count. The tier topics keep fetching up to MaxInFlight records ahead
// (pollFor) either way.

const (
	adaptInterval = 100 * time.Millisecond
	// adaptMinSamples: fewer pick-ups than this in an interval say too
	// little to shrink on.
	adaptMinSamples = 20
	// adaptFloor is the smallest window (or MaxInFlight, if smaller).
	adaptFloor = 32
)

// notePickup counts a retry record picked up at now, and whether it was
// late for the CPU: the time from its due time (or its arrival, if it came
// overdue) until the dispatcher found it, plus the time from its window
// slot until its handler ran. The wait for a slot is left out: when many
// retries are due at once they wait for each other, and a smaller window
// would not help them.
func (c *Consumer) notePickup(t *task, now time.Time) {
	if t.readyAt.IsZero() || t.startAt.IsZero() {
		return
	}
	late := t.readyAt.Sub(later(t.due, t.received)) + now.Sub(t.startAt)
	c.pickups.Add(1)
	if late > c.cfg.RetryLateness {
		c.latePickups.Add(1)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// adapt resizes the window every adaptInterval until ctx is done.
// Config.RetryLateness 0 keeps it at MaxInFlight.
func (c *Consumer) adapt(ctx context.Context) {
	if c.cfg.RetryLateness <= 0 {
		return
	}
	t := time.NewTicker(adaptInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.adaptStep()
		}
	}
}

// adaptStep resizes the window by the pick-ups since the last step.
func (c *Consumer) adaptStep() {
	n, late := c.pickups.Swap(0), c.latePickups.Swap(0)
	cur := c.window.limit()
	if next := nextLimit(cur, min(adaptFloor, c.cfg.MaxInFlight), c.cfg.MaxInFlight, n, late); next != cur {
		c.window.resize(next)
	}
}

// nextLimit is the window after an interval with n retry pick-ups, late of
// them late: a quarter less when over 1 % of at least adaptMinSamples were,
// an eighth more when none was, the same otherwise.
func nextLimit(cur, floor, ceil int, n, late int64) int {
	switch {
	case n >= adaptMinSamples && late*100 > n:
		return max(floor, cur*3/4)
	case late == 0:
		return min(ceil, cur+max(1, cur/8))
	}
	return cur
}
