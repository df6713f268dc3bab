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

// TestProbeBoundedByOwnCeiling: a lane sharing its origin probes up to
// probeCap of what the origin was seen to take from it (its ceiling), not
// of what its peers say they send: their rates rise with its own, and a
// bound taken from them rose in step (three processors sent 1.88× a limit
// that had doubled, in one second).
func TestProbeBoundedByOwnCeiling(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	p, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	l := newLane("https://push.example.net", p, start)
	l.slowStart, l.rate, l.ceiling, l.latency = false, 100, 100, 0.05
	l.lastCut = start.Add(-time.Minute)
	l.peers = map[string]peer{}
	for s := 1; s <= 20; s++ {
		now := start.Add(time.Duration(s) * time.Second)
		// Peers probing in step with this lane.
		for _, name := range []string{"p1", "p2"} {
			l.peers[name] = peer{rate: l.rate, at: now}
		}
		l.starved = true
		l.growLocked(p, now)
	}
	if l.rate > probeCap*l.ceiling*1.0001 {
		t.Errorf("rate %.0f after 20 s of probing in step with its peers, want at most %.0f (probeCap of the ceiling %.0f)", l.rate, probeCap*l.ceiling, l.ceiling)
	}
}
