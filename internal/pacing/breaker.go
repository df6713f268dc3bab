package pacing

import (
	"math"
	"time"
)

// Breaker states.
const (
	Closed   = "closed"
	Open     = "open"
	HalfOpen = "half-open"
)

// The breaker. Closed, it counts the answers of the last errorSpan: past
// ErrorHaltRate of 5xx and transport errors (with 95% confidence, on
// MinSamples answers at least) it opens for OpenFor, an outage. The rate
// law opens it too, for the origin's Retry-After, when a cut finds the
// 429 share past HaltRate: a halt. Open, nothing is sent; when it is due,
// Probes sends go half-open: it closes once they are answered and one
// succeeded; a 429, or all of them failing, opens it again, each time in a
// row for twice as long (up to maxOpen).
const (
	errorSpan = 10 // seconds
	maxOpen   = 5 * time.Minute
	z95       = 1.645
)

type breaker struct {
	state  string
	until  time.Time
	opens  int // in a row
	pause  time.Duration
	probes int // half-open sends in flight
	passed int // half-open sends that succeeded
	failed int // half-open sends that failed
	secs   [errorSpan]struct {
		at        int64
		n, failed int
	}
}

// allow tells whether a send may go now, and whether as a probe; when it
// may not, until is when the breaker is due (zero while probes are out).
// It reports the move to half-open.
func (b *breaker) allow(cfg *Config, now time.Time) (ok, probe bool, until time.Time, moved bool) {
	switch {
	case b.state == Open && now.Before(b.until):
		return false, false, b.until, false
	case b.state == Open:
		b.state, b.probes, b.passed, b.failed, moved = HalfOpen, 0, 0, 0, true
		fallthrough
	case b.state == HalfOpen:
		if b.probes+b.passed+b.failed < cfg.Probes {
			return true, true, time.Time{}, moved
		}
		return false, false, time.Time{}, moved
	}
	return true, false, time.Time{}, false
}

// answer takes a send's answer: failed (a 5xx or transport error),
// throttled (a 429), failing (the notification's last attempt failed too:
// its errors say nothing of the origin). It returns the new state when it
// changed.
func (b *breaker) answer(cfg *Config, now time.Time, probe, failed, throttled, failing bool) string {
	if probe {
		b.probes--
		switch {
		case failed && failing:
			return "" // says more of the notification than of the origin
		case throttled:
			b.open(now, b.pause)
			return Open
		case failed:
			b.failed++
		default:
			b.passed++
		}
		// The probes judge together: one that fails may be its own
		// subscription's, an outage fails them all.
		switch {
		case b.state != HalfOpen || b.passed+b.failed < cfg.Probes:
			return ""
		case b.passed == 0:
			b.open(now, b.pause)
			return Open
		}
		b.state, b.opens = Closed, 0
		return Closed
	}
	if b.state != Closed || failing {
		return ""
	}
	sec := now.Unix()
	s := &b.secs[sec%errorSpan]
	if s.at != sec {
		s.at, s.n, s.failed = sec, 0, 0
	}
	s.n++
	if failed {
		s.failed++
	}
	var n, k int
	for _, s := range b.secs {
		if sec-s.at < errorSpan {
			n, k = n+s.n, k+s.failed
		}
	}
	if n >= cfg.MinSamples && lowerBound(k, n) > cfg.ErrorHaltRate {
		b.open(now, cfg.OpenFor)
		return Open
	}
	return ""
}

// open opens the breaker for pause, doubled for each opening in a row.
func (b *breaker) open(now time.Time, pause time.Duration) {
	if b.state == Closed {
		b.pause = pause
	}
	d := min(maxOpen, b.pause<<min(b.opens, 10))
	b.state, b.until, b.opens = Open, later(b.until, now.Add(d)), b.opens+1
	b.probes, b.passed, b.failed = 0, 0, 0
	b.secs = [errorSpan]struct {
		at        int64
		n, failed int
	}{}
}

// hold opens the breaker until until, another processor's halt, unless it
// is already open for longer.
func (b *breaker) hold(now, until time.Time) bool {
	if b.state == Open && !until.After(b.until) {
		return false
	}
	if b.state == Closed {
		b.pause = until.Sub(now)
	}
	b.state, b.until, b.probes, b.passed, b.failed = Open, until, 0, 0, 0
	return true
}

// lowerBound is the Wilson score lower bound of the share k/n, one-sided
// at 95%.
func lowerBound(k, n int) float64 {
	p, z2 := float64(k)/float64(n), z95*z95
	return (p + z2/(2*float64(n)) - z95*math.Sqrt(p*(1-p)/float64(n)+z2/(4*float64(n)*float64(n)))) / (1 + z2/float64(n))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
