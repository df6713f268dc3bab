package pacing

import (
	"testing"
	"time"
)

// TestAcceptedLeavesOutTheTickUnderWay: what the origin accepted while it
// refused is the median over windows of answers; a tick a few
// milliseconds old holds a few answers and must not count as a whole
// tenth of a second of them. Taken so, it read a tenth of the limit, and
// the cut after slow start landed between 260 and 420 sends/s against an
// origin of 400 (tier 1 behind a flood then waited for a second round).
func TestAcceptedLeavesOutTheTickUnderWay(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	l := newLane("https://push.example.net", p, start)
	// answer records n answers (k of them 429s) spread over the tick
	// starting at, from its first millisecond.
	answer := func(at time.Time, n, k int) {
		for i := range n {
			l.recordLocked(at, at.Add(time.Duration(i)*tickSpan/time.Duration(n)+time.Millisecond), i < k, false, false)
		}
	}
	// Three tenths at 300, 500 and 400 accepted a second, the origin
	// refusing most of what was sent: it takes 400.
	answer(start, 150, 120)
	answer(start.Add(tickSpan), 150, 100)
	answer(start.Add(2*tickSpan), 150, 110)
	// Two milliseconds into the fourth tenth: an answer and a 429.
	now := start.Add(3*tickSpan + 2*time.Millisecond)
	l.recordLocked(now, now, false, false, false)
	l.recordLocked(now, now, true, false, false)
	if got := l.acceptedLocked(now); got < 380 || got > 420 {
		t.Errorf("accepted %.0f/s, want about 400 (the whole tenths' median)", got)
	}
}
