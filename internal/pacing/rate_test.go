package pacing

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestFalseCutsPerMinute: devices throttled one by one at a share of 5%,
// an origin that refuses nothing else. Every cut of the rate law is then
// false, and how often it cuts must not grow with the rate at which
// answers come, before a limit is known (slow start judges 5% against
// 20%) or after (against the background). With the threshold fixed at
// cusumH, a processor answered 2,000 times a second cut in slow start
// 111 times a minute, and each false cut took what the group sent then
// as the origin's limit (fault scenario 5: three processors sent what one
// had).
func TestFalseCutsPerMinute(t *testing.T) {
	const (
		share   = 0.05
		seconds = 120
	)
	for _, known := range []bool{false, true} {
		for _, perSec := range []int{20, 200, 2000} {
			t.Run(fmt.Sprintf("known=%v/%d_per_s", known, perSec), func(t *testing.T) {
				cfg := DefaultConfig()
				now := time.Unix(1_800_000_000, 0)
				r := newRateLaw(&cfg, now)
				start := epoch{known: known, w: float64(perSec), t0: now}
				r.restore(start)
				if known {
					r.b, r.epochs = share, 1
				}
				rng := rand.New(rand.NewPCG(uint64(perSec), 1))
				cuts := 0
				for i := range seconds * perSec {
					at := now.Add(time.Duration(i) * time.Second / time.Duration(perSec))
					if r.observe(at, known, rng.Float64() < share, func() float64 { return float64(perSec) }) {
						cuts++
						start.t0 = at
						r.restore(start)
					}
				}
				// One in falseCutEvery on average; twice that is
				// chance, ten times the old threshold's doing.
				if got, want := float64(cuts)/seconds*60, 2*time.Minute.Seconds()/falseCutEvery.Seconds(); got > want {
					t.Errorf("%d false cuts in %d s (%.1f a minute), want at most %.0f a minute", cuts, seconds, got, want)
				}
			})
		}
	}
}

func TestThreshold(t *testing.T) {
	tests := []struct {
		p0, p1, perSec float64
		want           float64
	}{
		{0.01, 0.05, 20, cusumH},  // few answers: the evidence of old
		{0.06, 0.10, 20, cusumH},  // likewise
		{0.06, 0.10, 2000, 5.32},  // ln(2000·10·KL(6%‖10%))
		{0.05, 0.20, 10000, 9.15}, // slow start's 5% against 20%
	}
	for _, tt := range tests {
		if got := threshold(tt.p0, tt.p1, tt.perSec); got < tt.want-0.05 || got > tt.want+0.05 {
			t.Errorf("threshold(%v, %v, %v) = %.2f, want %.2f", tt.p0, tt.p1, tt.perSec, got, tt.want)
		}
	}
}
