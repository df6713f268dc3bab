package pacing

import (
	"math"
	"slices"
	"time"
)

// The rate law. For the whole group, per origin, the rate E the origin is
// believed to accept:
//
//	E(t) = W·(1 + c·(t − t0 − K)³),   K = ∛((1 − β)/c),   E ≤ max(W, 2·A)
//
// W is what the group was seen to get accepted per second when the last cut
// was made, at t0; β is CutFactor. Right after a cut E = β·W; in K seconds
// it is back at W, lingers there, then probes beyond: a limit that doubled
// is reached growDouble after the cut (a normalised CUBIC, as in the AWS
// SDKs' adaptive retry mode). A is what the group had accepted over the
// last second: a group that sends less than E does not let E run ahead of
// what it sends. Every processor that knows (W, t0) computes the same E.
// Before the first cut the limit is unknown and E is unbounded; the
// concurrency law's slow start is the ramp.
//
// Cuts come from a Bernoulli CUSUM over the answers to the sends granted
// since t0: each adds ln(p1/p0) when it is a 429 and ln((1−p1)/(1−p0))
// when not, the sum kept at 0 or more; at cusumH, on MinSamples answers at
// least, it cuts; where answers come fast, at h such that a share of p0
// would reach it by chance once in falseCutEvery (threshold). Once a limit
// is known, p0 = b + bMargin and p1 = b +
// CutRate, where b, the background (devices throttled one by one, whatever
// the rate), is the least 429 share of the answers to sends granted below
// W, what the origin was just seen to accept, in the last epochs that had
// enough of them. Before any cut (slow start), p0 = CutRate and p1 =
// HaltRate: slow start, which doubles every round trip, ends on the burst
// of 429s its overshoot earns, not on devices' throttling.
const (
	// capFactor: E is at most this many times what the group accepted.
	capFactor = 2.0
	// growDouble: E reaches twice W this long after a cut.
	growDouble = 9 * time.Second
	cusumH     = 4.0
	// falseCutEvery: how seldom a background share may cut by chance.
	falseCutEvery = 10 * time.Second
	epochsKept    = 4
	bMargin       = 0.01
	minRate       = 0.5 // sends per second
	// tokenSpan is how much of the rate the send bucket holds: sends are
	// spread, so an origin that allows little burst sees none.
	tokenSpan = 10 * time.Millisecond
)

// epoch is a cut: W and t0.
type epoch struct {
	known bool // false: no limit is known (slow start)
	w     float64
	t0    time.Time
}

type rateLaw struct {
	cfg *Config
	c   float64 // the cubic's constant, from growDouble and β
	epoch
	// The detector, over the answers to sends granted since t0: their
	// count and 429s; the background's count, over answers below W.
	cusum  float64
	n, k   int
	bn, bk int
	b      float64
	shares [epochsKept]float64 // of the answers below W, in the last epochs
	epochs int
	// The send bucket.
	tokens float64
	tokAt  time.Time
}

func newRateLaw(cfg *Config, now time.Time) rateLaw {
	k := (math.Cbrt(1-cfg.CutFactor) + 1) / growDouble.Seconds()
	return rateLaw{cfg: cfg, c: k * k * k, epoch: epoch{t0: now}, tokAt: now}
}

// estimate is E at now, given A, what the group accepted over the last
// second; +Inf while the limit is unknown.
func (r *rateLaw) estimate(now time.Time, accepted float64) float64 {
	if !r.known {
		return math.Inf(1)
	}
	x := now.Sub(r.t0).Seconds() - math.Cbrt((1-r.cfg.CutFactor)/r.c)
	return max(minRate, min(r.w*(1+r.c*x*x*x), max(r.w, capFactor*accepted)))
}

// below tells whether a send granted at E = e is below what the origin
// was last seen to accept.
func (r *rateLaw) below(e float64) bool { return r.known && e < r.w }

// observe judges an answer to a send granted at granted (below: while E
// was below W), answers coming at perSec() (read only when the evidence
// is past cusumH), and reports whether it is time to cut.
func (r *rateLaw) observe(granted time.Time, below, throttled bool, perSec func() float64) bool {
	if granted.Before(r.t0) {
		return false // sent before the last change: says nothing of it
	}
	p0, p1 := r.cfg.CutRate, r.cfg.HaltRate
	if r.known {
		p0, p1 = r.b+bMargin, r.b+r.cfg.CutRate
	}
	r.n++
	if throttled {
		r.k++
		r.cusum += math.Log(p1 / p0)
	} else {
		r.cusum = max(0, r.cusum+math.Log((1-p1)/(1-p0)))
	}
	if below {
		r.bn++
		if throttled {
			r.bk++
		}
	}
	return r.cusum >= cusumH && r.n >= r.cfg.MinSamples && r.cusum >= threshold(p0, p1, perSec())
}

// threshold is the evidence a cut needs: cusumH, or more where answers
// come fast enough that a share of p0 would reach cusumH by chance more
// often than once in falseCutEvery. (The CUSUM's run length at p0 is about
// e^h/KL(p0‖p1) answers, Siegmund's approximation.)
func threshold(p0, p1, perSec float64) float64 {
	kl := p0*math.Log(p0/p1) + (1-p0)*math.Log((1-p0)/(1-p1))
	return max(cusumH, math.Log(perSec*falseCutEvery.Seconds()*kl))
}

// cut starts a new epoch at now on what the group got accepted; the epoch
// it ends tells the background. A cut on an origin that accepted nothing
// knows no rate: it ramps afresh (once the halt that comes with it ends).
func (r *rateLaw) cut(now time.Time, accepted float64) {
	if r.bn >= 2*r.cfg.MinSamples {
		r.shares[r.epochs%epochsKept] = float64(r.bk) / float64(r.bn)
		r.epochs++
		r.b = min(r.cfg.HaltRate-r.cfg.CutRate, slices.Min(r.shares[:min(r.epochs, epochsKept)]))
	}
	r.restore(epoch{known: accepted >= minRate, w: accepted, t0: now})
}

// restore makes e the epoch in force, with a fresh detector.
func (r *rateLaw) restore(e epoch) {
	r.epoch = e
	r.cusum, r.n, r.k, r.bn, r.bk = 0, 0, 0, 0, 0
}

// adopt takes another processor's epoch when it is newer than this one's.
func (r *rateLaw) adopt(e epoch) bool {
	if !e.known || (r.known && !e.t0.After(r.t0)) {
		return false
	}
	r.restore(e)
	return true
}

// take takes a token from the send bucket filled at rate, or tells how
// long until one is there.
func (r *rateLaw) take(now time.Time, rate float64) (bool, time.Duration) {
	if math.IsInf(rate, 1) {
		return true, 0
	}
	depth := max(1, rate*tokenSpan.Seconds())
	r.tokens = min(depth, r.tokens+rate*now.Sub(r.tokAt).Seconds())
	r.tokAt = now
	if r.tokens >= 1 {
		r.tokens--
		return true, 0
	}
	return false, time.Duration(math.Ceil((1-r.tokens)/rate*float64(time.Second))) + time.Microsecond
}
