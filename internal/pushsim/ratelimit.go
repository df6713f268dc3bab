package pushsim

import (
	"math"
	"sync"
	"time"
)

// maxBuckets bounds the per-origin bucket map; past it, buckets that are full again are dropped.
const maxBuckets = 4096

// limiter is a token bucket per origin, refilled lazily from the request time so it needs no
// background goroutine (and lets a testing/synctest bubble settle); or, perSecond set, a count
// of each whole second of the clock (a fixed window: rate at most in each, none carried over).
type limiter struct {
	rate      float64 // tokens per second; 0 = unlimited
	burst     float64
	perSecond bool

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst int, perSecond bool) *limiter {
	b := float64(burst)
	if b == 0 || perSecond {
		b = math.Max(1, math.Ceil(rate))
	}
	return &limiter{rate: rate, burst: b, perSecond: perSecond, buckets: make(map[string]*bucket)}
}

// allow takes a token from origin's bucket at now, reporting whether one was available.
func (l *limiter) allow(origin string, now time.Time) bool {
	if l.rate <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[origin]
	if !ok {
		if len(l.buckets) >= maxBuckets {
			l.evictFull(now)
		}
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[origin] = b
	}
	switch {
	case l.perSecond:
		if sec := now.Truncate(time.Second); !sec.Equal(b.last) {
			b.tokens, b.last = l.burst, sec
		}
	case now.Sub(b.last) > 0:
		b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// evictFull drops buckets that would be full at now: forgetting them changes nothing.
func (l *limiter) evictFull(now time.Time) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*l.rate >= l.burst || l.perSecond && now.Sub(b.last) >= time.Second {
			delete(l.buckets, k)
		}
	}
}
