package pushsim

import (
	"testing"
	"time"
)

// TestLimiterPerSecond: a count per whole second takes the limit in each
// second of the clock however it is spread, refuses the rest of that
// second, and carries nothing over an idle spell.
func TestLimiterPerSecond(t *testing.T) {
	l := newLimiter(3, 0, true)
	at := time.Unix(1_800_000_000, 0)
	take := func(offset time.Duration, n int) (allowed int) {
		for range n {
			if l.allow("https://push.example.net", at.Add(offset)) {
				allowed++
			}
		}
		return allowed
	}
	if got := take(100*time.Millisecond, 5); got != 3 {
		t.Errorf("5 requests at 0.1 s: %d allowed, want 3", got)
	}
	if got := take(999*time.Millisecond, 1); got != 0 {
		t.Errorf("a request at 0.999 s: %d allowed, want 0 (the second is spent)", got)
	}
	if got := take(time.Second, 4); got != 3 {
		t.Errorf("4 requests at 1 s: %d allowed, want 3 (a new second)", got)
	}
	if got := take(7*time.Second, 10); got != 3 {
		t.Errorf("10 requests after 6 s idle: %d allowed, want 3 (nothing carried over)", got)
	}
}
