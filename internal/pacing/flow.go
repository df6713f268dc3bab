package pacing

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// The concurrency law. Per origin and processor, the sends in flight are
// bounded by C. A round is the answers to the sends granted after the
// previous round ended; at its end, with least and q its least and median
// latency and base the least latency of the last baseWindow:
//
//	least > queueTolerance·base (and base + queueFloor)   C = max(MinLimit, ⌈n·base/q⌉)   (n: the most in flight in the round)
//	else, if C bound          C = 2·C before the first such cut (slow start), C + ⌈C/8⌉ after
//
// A service that queues what it cannot serve at once delays every answer
// of a round, the fastest too: that is the test of a queue. What it serves
// in a base round trip is then n·base/q, and the cut brings the sends in
// flight back to it, so the queue drains, base is measured again, and no
// send waits inside the service much longer than half a base round trip.
// Latency that not every answer of a round shares — a busy CPU delaying
// answers at random, a slow device — is not a queue and changes nothing:
// judged by its median, a round on a contended CPU read as a queue and
// cut C to its floor at any load (TestGridContended: 9-141/s against
// limits of 100-3,000/s). Only answers the service worked on count: 429s
// and errors come back fast or not at all.
const (
	queueTolerance = 1.15
	baseWindow     = 10 * time.Second
	startLimit     = 4
	// queueFloor: latency within this of the base is a busy CPU or a new
	// connection, not a queue worth cutting for.
	queueFloor   = 5 * time.Millisecond
	roundAnswers = 4
)

type flow struct {
	limit     int
	slowStart bool
	inFlight  int
	// The round under way: the grant that ends it, the most in flight in
	// it, whether the limit held a send back, its latencies.
	seq, end uint64
	peak     int
	bound    bool
	lat      []time.Duration
	// base is the least of two half windows, the current one from baseAt
	// and for rounds rounds so far.
	base   [2]time.Duration
	baseAt time.Time
	rounds int
}

func newFlow(cfg *Config, now time.Time) flow {
	return flow{limit: max(cfg.MinLimit, min(startLimit, cfg.MaxLimit)), slowStart: true, baseAt: now}
}

// full tells whether the limit holds the next send back.
func (f *flow) full() bool {
	if f.inFlight >= f.limit {
		f.bound = true
		return true
	}
	return false
}

// grant counts a send out and returns its sequence number.
func (f *flow) grant() uint64 {
	f.seq++
	f.inFlight++
	f.peak = max(f.peak, f.inFlight)
	return f.seq
}

// baseRTT is the least latency of the last baseWindow (0: none yet).
func (f *flow) baseRTT() time.Duration {
	if f.base[1] == 0 || (f.base[0] != 0 && f.base[0] < f.base[1]) {
		return f.base[0]
	}
	return f.base[1]
}

// answer takes the answer to send seq, whose latency counts when the
// service worked on it, and reports a cut as the new limit (0: none).
func (f *flow) answer(cfg *Config, now time.Time, seq uint64, latency time.Duration, counts bool) (cut int) {
	f.inFlight--
	if counts {
		if now.Sub(f.baseAt) >= baseWindow/2 && f.rounds >= 4 {
			f.base, f.baseAt, f.rounds = [2]time.Duration{0, f.base[0]}, now, 0
		}
		if f.base[0] == 0 || latency < f.base[0] {
			f.base[0] = latency
		}
		f.lat = append(f.lat, latency)
	}
	if seq < f.end {
		return 0
	}
	base, least, q := f.baseRTT(), time.Duration(0), time.Duration(0)
	if len(f.lat) > 0 {
		slices.SortFunc(f.lat, func(a, b time.Duration) int { return cmp.Compare(a, b) })
		least, q = f.lat[0], f.lat[len(f.lat)/2]
	}
	switch {
	case len(f.lat) >= roundAnswers && float64(least) > queueTolerance*float64(base) && least-base > queueFloor:
		// (Fewer answers cannot tell a queue from one slow send.)
		f.limit = max(cfg.MinLimit, int(math.Ceil(float64(f.peak)*float64(base)/float64(q))))
		f.slowStart = false
		cut = f.limit
	case f.bound && f.slowStart:
		f.limit = min(cfg.MaxLimit, 2*f.limit)
	case f.bound:
		f.limit = min(cfg.MaxLimit, f.limit+(f.limit+7)/8)
	}
	f.end, f.peak, f.bound, f.lat, f.rounds = f.seq+1, f.inFlight, false, f.lat[:0], f.rounds+1
	return cut
}

// queued ends slow start on another processor's word that the origin
// queues: the limit halves, and the next round judges.
func (f *flow) queued(cfg *Config) bool {
	if !f.slowStart {
		return false
	}
	f.slowStart, f.limit = false, max(cfg.MinLimit, f.limit/2)
	return true
}

// release frees the slot of a send that was never made.
func (f *flow) release() { f.inFlight-- }
