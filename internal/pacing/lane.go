package pacing

import (
	"iter"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
)

// A lane paces one origin. Its rate is the controller (docs/design.md,
// "Pacing"): sends take tokens from a bucket filled at rate; the rate
// starts at StartRate and doubles every round trip while sends wait for it
// (slow start); a 429 share above the background plus CutRate, among
// answers to sends made since the last change, cuts it to CutFactor of
// what the origin accepted over the last second, which converges on the
// origin's limit from above; afterwards it grows again, slowly at first
// and faster the longer nothing is throttled, which finds a limit that
// rose. The 429 share of sends at or below the ceiling is learnt as
// background (devices throttled one by one), and a cut on an origin that
// took all of what was sent but such a share keeps the ceiling and that
// evidence: cut after cut on devices' 429s would otherwise spiral the
// rate down. The concurrency limit follows the rate (Little's law) as a
// second guard.

type grant struct {
	slot  *Slot
	until time.Time
}

type waiter struct {
	ch  chan grant
	req Request
	seq uint64
	enq time.Time
}

// second holds one second of answers, for the rolling window.
type second struct {
	sec                           int64
	attempts, throttled, accepted int
	// Answers to sends made at or below the ceiling, and their 429s: the
	// background share (backgroundLocked).
	safe, safeThrottled int
}

// tick holds 100 ms of answers by the time they came: all of them (for
// the accepted rate) and those to sends granted since the lane last
// changed (fresh: the evidence decisions are made on).
type tick struct {
	at                                  int64 // unix time in tenths of a second
	granted                             int   // sends granted in it
	accepted, throttled                 int
	freshN, freshThrottled, freshFailed int
}

const (
	tickSpan = 100 * time.Millisecond
	// ticks is the span the accepted rate is estimated over.
	ticks = 30 // 3 s
	// keptTicks is how many ticks the lane keeps: decisions look back up
	// to them for MinSamples answers, so that an origin answering a few
	// sends a second (a rate cut far down by a service that throttles at
	// random) is still judged.
	keptTicks = 100 // 10 s
	// judgeSpan is the least span decisions look at; they look further
	// back, up to the ticks kept, until MinSamples answers are seen.
	judgeSpan = 10 // ticks: 1 s
)

type peer struct {
	rate float64
	at   time.Time
	// answers and throttled: its rolling counts (rollingLocked).
	answers, throttled int
}

type lane struct {
	origin string
	cfg    *Config
	z      float64 // of cfg.Confidence
	pacer  *Pacer

	mu        sync.Mutex
	inFlight  int
	retries   int             // retries in flight
	probes    int             // half-open probes in flight
	queues    [3][2][]*waiter // tier × {first, retry}
	waiting   int
	seq       uint64
	turns     tiers.RoundRobin // the tiers' turns (cfg.Weights)
	timer     *time.Timer      // wakes waiters at the end of a pause or for a token
	armed     time.Time        // when timer fires; zero when not armed
	lastUsed  time.Time        // the last request or result
	lastGrant time.Time        // the last slot granted
	created   time.Time

	breaker   string
	openUntil time.Time
	paused    time.Time // until
	pausedAt  time.Time // when the pause in force began
	// The first 429 to a send granted after the last pause ended: what
	// the pause refilled of a limit's allowance is spent by then. Of the
	// answers accepted before it, refilled counts those in the tenth
	// refilledAt; refillCut those of them in the tenth of that 429.
	refusedAfter time.Time
	refilledAt   int64
	refilled     int
	refillCut    int
	// All the answers accepted before that 429 (refilledRateLocked).
	refillTook int
	// When a cut read an origin that gave a second's worth and then
	// refused everything (closedRun, closedLocked): the storm on the
	// sends that met the rest of that second is held once (tailLocked).
	closedCut time.Time
	// 429s since the last accepted answer.
	refusedInRow int
	// What the origin is believed to have spared: see spareLocked.
	spare     float64
	spareAt   time.Time
	spareFrom time.Time // the pause in force earns it from here
	spent     float64   // of the spare, by the tier-1 burst under way
	spentAt   time.Time // when tier 1 last spent of it
	t1Waited  time.Time // when a tier-1 request last had to wait
	// What the origin was seen to take at once beyond the rate: tier 1
	// goes ahead of the rate by this much at most (allowanceLocked). Zero
	// while nothing is known of it.
	allowance   float64
	allowanceAt time.Time
	// The answers to sends granted since judgeFrom that went ahead of the
	// rate (tier 1 on its debt, the spare or in slow start) and to those
	// that waited for it: where the first are refused and the second not,
	// the origin refuses bursts, not the rate (burstsRefusedLocked).
	ahead, paced answers

	seconds []second
	ticks   [keptTicks]tick
	// The Retry-After of the last 429s, oldest overwritten first: a pause
	// waits the one most of them carry (retryAfterLocked).
	retryAfters [retryAfterKept]time.Duration
	retryAfterN int
	// What the origin accepted at the last cuts, likewise: a lone lane
	// holds an overstated one to their median (readLocked).
	readings [readingsKept]reading
	readingN int

	// The controller.
	rate       float64 // sends per second
	slowStart  bool
	tokens     float64
	tokAt      time.Time
	starved    bool      // a send waited for a token since lastGrow
	lastGrow   time.Time // growth is applied lazily, from here
	lastCut    time.Time // the last cut, pause or peer's cut
	judgeFrom  time.Time // only answers to sends granted since count
	freshFrom  time.Time // when the first of them came; zero until then
	latency    float64   // seconds, moving average of answers other than 429
	ceiling    float64   // what the origin accepted per second at the last cut
	probeFrom  time.Time // when the origin first proved more than the ceiling
	storms     int       // cuts and pauses in a row with no clean judgement
	cutsInRow  int       // cuts since settleFor after slow start, likewise
	cutShare   float64   // the 429 share the last cut or pause answered
	settled    time.Time // when slow start last ended
	raisedAt   time.Time // the last "raise" event and the rate then
	raisedFrom float64
	reported   time.Time // the last "rate" signal
	peers      map[string]peer
}

func newLane(origin string, p *Pacer, now time.Time) *lane {
	cfg := &p.cfg
	return &lane{origin: origin, cfg: cfg, z: cfg.z(), pacer: p, breaker: Closed,
		seconds: make([]second, max(int(cfg.Window/time.Second), 1)),
		turns:   tiers.NewRoundRobin(cfg.Weights),
		rate:    cfg.StartRate, slowStart: true, tokens: max(1, cfg.StartRate*burstFor), tokAt: now, lastGrow: now,
		lastCut: now.Add(-cfg.CutCooldown), judgeFrom: now, created: now, raisedAt: now, raisedFrom: cfg.StartRate}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// admit grants a slot now, defers, or queues the request (returning its
// waiter).
func (l *lane) admit(p *Pacer, req Request, now time.Time) (*waiter, *Slot, time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastUsed = now
	ti := req.Tier.Index()
	if now.Before(l.paused) && ti > l.heldToLocked(now) {
		return nil, nil, l.paused
	}
	switch l.breaker {
	case Open:
		if now.Before(l.openUntil) {
			return nil, nil, l.openUntil
		}
		l.breaker = HalfOpen
		l.event(p, Event{At: now, Kind: HalfOpen})
		fallthrough
	case HalfOpen:
		if l.probes >= l.cfg.Probes {
			return nil, nil, now.Add(l.cfg.OpenFor / 2)
		}
		l.probes++
		l.inFlight++
		return nil, &Slot{p: p, l: l, req: req, probe: true, granted: now}, time.Time{}
	}
	l.growLocked(p, now)
	if l.waiting == 0 && !now.Before(l.paused) && l.inFlight < l.limitFor(ti, now) && l.retryAllowed(req.Retry, false) && l.tokenLocked(ti, now) {
		return nil, l.grantLocked(p, req, now), time.Time{}
	}
	if l.waiting >= l.queueLimit() && (!l.slowStart || l.stillLocked(now)) {
		// Full, and the origin has throttled us or its queue stands
		// still: the lowest tier waiting yields, if it is lower than ours.
		// A burst to a healthy origin that drains its queue waits instead.
		victim := l.evictLocked(ti)
		if victim == nil {
			return nil, nil, time.Time{}
		}
		victim.ch <- grant{}
	}
	l.seq++
	if ti == 0 && !now.Before(l.paused) {
		// Held by the rate, not by a pause: a backlog of tier 1.
		l.t1Waited = now
	}
	w := &waiter{ch: make(chan grant, 1), req: req, seq: l.seq, enq: now}
	q := &l.queues[ti][boolIndex(req.Retry)]
	*q = append(*q, w)
	l.waiting++
	l.armLocked(now)
	return w, nil, time.Time{}
}

// pauseLocked pauses the origin until until (or longer, if it is).
func (l *lane) pauseLocked(now, until time.Time) {
	if !until.After(l.paused) {
		return
	}
	if !now.Before(l.paused) {
		l.pausedAt, l.refillTook = now, 0
		// The sends on their way spend the first of what the pause
		// lets the origin save.
		l.spareLocked(now)
		l.spare = -float64(l.inFlight)
		l.spareFrom = now
		if now.Sub(l.spentAt) < sparedAgain {
			// A storm that follows a tier-1 burst on the spare: the
			// spare was not the origin's to give. Nothing is saved over
			// this pause, else burst, storm and pause feed each other
			// (at 20 req/s, a pause a second and 40% 429s).
			l.spareFrom = until
		}
	}
	l.paused = until
}

// sparedAgain: a pause within this of a tier-1 burst on the spare saves
// nothing up.
const sparedAgain = 5 * time.Second

// queueLimit is how many requests may wait: QueueLimit, or what the rate
// sends in shedSpan when that is more. A request that would wait longer
// might as well take the ladder's first step. In slow start too: the rate
// doubles every round trip, and a queue held to QueueLimit while it did
// shed a healthy origin's backlog to the ladder (6,000 events at once:
// 441 deferred to the 2 s and 8 s steps, the run's last outcome at 10 s).
func (l *lane) queueLimit() int {
	return max(l.cfg.QueueLimit, int(l.rate*shedSpan.Seconds()))
}

// shedSpan: see queueLimit.
const shedSpan = 2 * time.Second

// stillLocked tells whether the queue stands still: its oldest request has
// waited ShedAfter and nothing was granted meanwhile. A queue that moves,
// however slowly slow start's first round trips let it (a TLS handshake
// per connection counts in the latency the rate doubles by), takes its
// burst: shed once it had waited, 3,150 of 6,000 events to a healthy
// origin went to the ladder's 2 s and 8 s steps.
func (l *lane) stillLocked(now time.Time) bool {
	return now.Sub(l.oldestLocked()) >= l.cfg.ShedAfter && now.Sub(l.lastGrant) >= l.cfg.ShedAfter
}

// oldestLocked is when the longest-waiting request was queued.
func (l *lane) oldestLocked() time.Time {
	var oldest *waiter
	for t := range l.queues {
		for r := range l.queues[t] {
			if q := l.queues[t][r]; len(q) > 0 && (oldest == nil || q[0].seq < oldest.seq) {
				oldest = q[0]
			}
		}
	}
	if oldest == nil {
		return time.Time{}
	}
	return oldest.enq
}

// insensitive: after a cut the share stayed above this part of itself,
// so it did not follow the rate.
const insensitive = 0.8

// maxHold is the longest pause requests wait out in the queue rather than
// going back to the ladder.
const maxHold = 2 * time.Second

// heldToLocked is the lowest tier index that waits out the pause under way
// in the queue rather than going back to the ladder (-1: none): tier 1
// through any pause of up to maxHold; the lower tiers too through one that
// comes settleFor after slow start ended. Sent back, a backlog runs through the
// ladder's first step as fast as it is consumed: a 1 s pause moved a
// flood of 12,000 tier-3 events to the 8 s step, the origin idle for
// 7 s, and round the ladder again when they all came due at once. The
// pause that ends slow start still sends the lower tiers back: the rate
// it resumes at was taken over the burst allowance slow start spent, so
// the origin runs short of it a second or two later, and a tier-1 burst
// then would meet a second storm (held through that pause, tier 1 three
// seconds into a flood had 76 to 202 of 300 sends throttled).
func (l *lane) heldToLocked(now time.Time) int {
	switch {
	case l.paused.Sub(now) > maxHold:
		return -1
	case !l.slowStart && now.Sub(l.settled) >= settleFor:
		return 2
	}
	return 0
}

// burstFor is how much sending the bucket may save up while nothing waits:
// a tenth of a second of the rate.
const burstFor = 0.1

// tier1Debt is how far tier 1 may draw ahead of the rate, in seconds of
// it, or further, what the origin has spared (spareLocked): a burst of
// tier-1 sends goes at once, and the lower tiers wait the debt out.
const tier1Debt = 0.25

// spareFor bounds what the origin is believed to have spared, in seconds
// of the ceiling: an origin that refuses past its rate allows a burst of
// about a second of it (a token bucket of its rate's size), at least after
// a pause or a while below it.
const spareFor = 1.0

// spareLocked brings up to date what the origin has spared: it earns
// CutFactor of the ceiling (what the origin accepted when it refused, less
// the margin the rate keeps) per second of a pause, the one time the
// origin is sure to refill its allowance, up to spareFor of that; every
// send spends one (grantLocked), a 429 shows it spent. Nothing is known of
// it before the first cut, nor while peers share the origin.
func (l *lane) spareLocked(now time.Time) float64 {
	to, from := l.paused, l.spareAt
	if now.Before(to) {
		to = now
	}
	if l.spareFrom.After(from) {
		from = l.spareFrom
	}
	if d := to.Sub(from); d > 0 {
		safe := l.cfg.CutFactor * l.ceiling
		l.spare = min(l.spare+safe*d.Seconds(), safe*spareFor)
	}
	l.spareAt = now
	if l.fairLocked(now) > 0 {
		// Peers spend the origin's allowance too, unseen here.
		return 0
	}
	return l.spare
}

// burstLocked tells whether tier 1 arrives as a burst, not a backlog: no
// tier-1 request has had to wait for the rate in the last second, a pause
// since not counted (tier 1 that queued through a pause was a backlog if
// it waited for the rate before it). A backlog of tier 1 is held to the
// rate (and its debt) like any other; only a burst draws on what the
// origin spared.
func (l *lane) burstLocked(now time.Time) bool {
	quiet := now.Sub(l.t1Waited)
	from, to := l.pausedAt, l.paused
	if l.t1Waited.After(from) {
		from = l.t1Waited
	}
	if now.Before(to) {
		to = now
	}
	if to.After(from) {
		quiet -= to.Sub(from)
	}
	return quiet >= time.Second
}

// allowedLocked tells whether a send of tier index ti may take a token
// now (a pause holds every tier: see admit and wakeLocked). The lower
// tiers need one there; tier 1 may overdraw by its debt (debtLocked), and
// the lower tiers wait the debt out, so the average stays the rate. In
// slow start, while nothing is known of the origin yet, tier 1 is not
// held at all (unheldLocked).
func (l *lane) allowedLocked(ti int, now time.Time) bool {
	switch {
	case ti > 0:
		return l.tokens >= 1
	case l.unheldLocked(ti, now):
		return true
	}
	return l.tokens >= 1-l.debtLocked(now)
}

// debtLocked is how many tokens tier 1 may overdraw: tier1Debt of the
// rate, or up to spareFor of the ceiling while the origin has spared
// anything (spareLocked) and tier 1 comes as a burst, so that it goes at
// once on what the origin saved; never more than the origin has been seen
// to take at once (allowanceLocked).
func (l *lane) debtLocked(now time.Time) float64 {
	debt := l.spent + max(1, l.rate*tier1Debt)
	if !l.slowStart && l.burstLocked(now) && l.spareLocked(now) >= 1 {
		debt = max(debt, l.ceiling*spareFor)
	}
	return min(debt, l.allowanceLocked(now))
}

// unheldLocked tells whether a send of tier index ti goes without a
// token: tier 1 in slow start, unless the origin has been seen to refuse
// its bursts.
func (l *lane) unheldLocked(ti int, now time.Time) bool {
	return ti == 0 && l.slowStart && math.IsInf(l.allowanceLocked(now), 1)
}

// allowanceLocked is how many sends the origin has been seen to take at
// once beyond the rate, learnt within allowanceFor; +Inf while nothing is
// known of it. A token bucket of a second of its rate (internal/pushsim's,
// and most limits') takes a burst of tier 1 whole; one of a twentieth of a
// second, or a count per whole second, refuses most of it and none of the
// sends that waited for the rate (burstsRefusedLocked).
func (l *lane) allowanceLocked(now time.Time) float64 {
	if l.allowance <= 0 || now.Sub(l.allowanceAt) >= allowanceFor {
		return math.Inf(1)
	}
	return l.allowance
}

// allowanceFor is how long a learnt allowance holds; then tier 1 may go
// ahead as before, and a refused burst teaches it again.
const allowanceFor = 10 * time.Minute

// refillLocked adds the tokens earned since the last refill.
func (l *lane) refillLocked(now time.Time) {
	if d := now.Sub(l.tokAt); d > 0 {
		l.tokens = min(l.tokens+l.rate*d.Seconds(), l.bucketLocked(now))
	}
	l.tokAt = now
	if l.tokens >= 0 {
		// The burst's debt is paid back.
		l.spent = 0
	}
}

// bucketLocked is how many tokens the bucket holds: burstFor of the rate,
// one at least; what it saves up is a burst too, so no more than the
// origin was seen to take at once (allowanceLocked), but for what the rate
// earns in tokenGrain. The lane's timer wakes waiters a millisecond apart
// at the soonest: held to one token, 3,000 sends/s went out at 1,800.
// Saved up over a pause, 0.1 s of the rate met a bucket of a twentieth of
// a second at its end, and a lone processor paused again every second.
func (l *lane) bucketLocked(now time.Time) float64 {
	return max(1, min(l.rate*burstFor, max(l.allowanceLocked(now), l.rate*tokenGrain)))
}

// tokenGrain: see bucketLocked.
const tokenGrain = 0.005

// tokenLocked takes a token for a send of tier index ti, or reports that
// it must wait for one (allowedLocked).
func (l *lane) tokenLocked(ti int, now time.Time) bool {
	l.refillLocked(now)
	if l.unheldLocked(ti, now) {
		return true
	}
	if !l.allowedLocked(ti, now) {
		l.starved = true
		return false
	}
	l.tokens--
	return true
}

// growLocked applies the growth due since it was last applied: none unless
// the rate is what holds sends back (a send waited for a token meanwhile),
// nothing is paused and the last cut has been answered. In slow start the
// rate doubles every round trip, and is no less than what the origin took
// over the last second while it refused none (tookCleanLocked): tier 1
// goes ahead of the rate there, and a burst of it taken whole is proof
// for the tiers that wait. After a cut it comes back quickly (half
// the gap every 0.35 s) to CutFactor of the ceiling, what the origin
// accepted at the cut; from there it probes at ProbeRate a second, and
// once the origin has taken more than the ceiling for three seconds, twice
// that, doubling every ProbeDouble, up to ProbeMax.
func (l *lane) growLocked(p *Pacer, now time.Time) {
	dt := now.Sub(l.lastGrow)
	if dt < 50*time.Millisecond {
		return
	}
	l.lastGrow = now
	starved := l.starved
	l.starved = false
	if !starved || l.breaker != Closed || now.Before(l.paused) || l.latency == 0 {
		return
	}
	l.refillLocked(now)
	secs := min(dt.Seconds(), 1)
	if l.slowStart {
		l.rate = min(max(l.rate*math.Pow(2, secs/l.roundTrip()), l.tookCleanLocked(now)), maxRate)
		return
	}
	if now.Sub(laterOf(l.lastCut, l.paused)) < l.holdAfterCut() {
		// Not before the sends made at the new rate are answered: after a
		// pause, those made since it ended.
		return
	}
	ceiling := max(l.ceiling, l.fairLocked(now))
	if floor := l.cfg.CutFactor * ceiling; l.rate < floor {
		l.rate += (floor - l.rate) * (1 - math.Exp2(-secs/0.35))
		if l.rate >= 0.99*floor {
			l.rate = floor
		}
		return
	}
	// A limit that rose shows as seconds the origin took more than the
	// ceiling without a 429; a burst allowance cannot last that long.
	// Until then the probe stays slow and short of probeCap; from then on
	// it speeds up, doubling every ProbeDouble.
	if proven := l.provenLocked(now); proven > l.ceiling {
		l.ceiling = proven
		if m, _ := l.medianReadingLocked(now); proven > probeCap*m {
			// A burst allowance of a second cannot fake that much for
			// proofSeconds: the limit rose, and the readings before
			// the rise say nothing of it.
			l.readingN = 0
		}
		if l.probeFrom.IsZero() {
			l.probeFrom = now
		}
	}
	g := l.cfg.ProbeRate
	if !l.probeFrom.IsZero() {
		g = min(g*math.Pow(2, 1+math.Floor(now.Sub(l.probeFrom).Seconds()/l.cfg.ProbeDouble.Seconds())), l.cfg.ProbeMax)
	}
	// A rate cut far below the start rate (by 429s that did not follow
	// it) grows as if from half of it, and may probe up to it: else a few
	// sends a second take minutes to prove more, one at a time, after the
	// origin has recovered. Processors sharing the origin take an equal
	// part of both, so that together they grow as one would alone: each
	// growing from half the start rate, three sharing 20/s probed past it
	// half again as fast, and 4% of their sends met 429s (a draw in four
	// past 5%).
	sharing := float64(l.sharingLocked(now))
	grown := l.rate + max(l.rate, l.cfg.StartRate/2/sharing)*(math.Pow(1+g, secs)-1)
	// The probe is bounded by what this lane's origin has been seen to
	// take (the ceiling); by an equal part of what the processors send
	// together only while it has none. That part follows the rates it
	// bounds, so processors probing together raised it in step: three of
	// them sent 1.86× a limit that had doubled, in one second.
	base := l.ceiling
	if base <= 0 {
		base = l.fairLocked(now)
	}
	// Growth never lowers the rate: a lane that recovered toward fair
	// past its own bound waits there for a proof.
	l.rate = max(l.rate, min(grown, max(l.probeCapLocked(now)*base, l.cfg.StartRate/sharing), maxRate))
	if l.rate >= 1.2*l.raisedFrom && now.Sub(l.raisedAt) >= 2*time.Second {
		l.raisedAt, l.raisedFrom = now, l.rate
		l.event(p, Event{At: now, Kind: "raise"})
	}
}

// freshPeersLocked yields the peers that reported within peerFresh: the
// processors sending to the origin beside this one.
func (l *lane) freshPeersLocked(now time.Time) iter.Seq[peer] {
	return func(yield func(peer) bool) {
		for _, pr := range l.peers {
			if now.Sub(pr.at) <= peerFresh && !yield(pr) {
				return
			}
		}
	}
}

// sharingLocked is how many processors send to the origin, this one
// among them.
func (l *lane) sharingLocked(now time.Time) int {
	n := 1
	for range l.freshPeersLocked(now) {
		n++
	}
	return n
}

// fairLocked is an equal part of what the processors sending to the
// origin send together, by their last reports; 0 alone.
func (l *lane) fairLocked(now time.Time) float64 {
	total, n := l.rate, 1
	for pr := range l.freshPeersLocked(now) {
		total += pr.rate
		n++
	}
	if n == 1 {
		return 0
	}
	return total / float64(n)
}

// probeCapLocked bounds the probe, as a multiple of the ceiling: probeCap
// until the origin has proven more than the ceiling, then wider by
// probeWiden for every proofSeconds it goes on proving more, up to
// maxProbeCap. A ceiling far below the limit (a slow start that ended on
// the first answers to a burst) is left in seconds, not in half a minute
// of 1.3× steps; a burst allowance of a second cannot fake any of these
// proofs (at 1.3× it lasts 3.3 s).
func (l *lane) probeCapLocked(now time.Time) float64 {
	if l.probeFrom.IsZero() {
		return probeCap
	}
	return min(probeCap+probeWiden*math.Floor(now.Sub(l.probeFrom).Seconds()/proofSeconds), maxProbeCap)
}

const (
	probeWiden  = 0.3
	maxProbeCap = 2
)

// proofSeconds is how long an origin must take more than the ceiling to
// prove a higher limit (provenLocked).
const proofSeconds = 4

// probeCap bounds a probe: at most this multiple of the ceiling until the
// origin has proven more (provenLocked).
const probeCap = 1.3

// provenLocked is the least the origin accepted in each of the last
// proofSeconds whole seconds, if none of them had a 429 share that would
// cut; else 0. A second of burst allowance lets an origin take 1.3× its
// limit for three seconds (3.9 s of tokens of 4 s), not for four.
func (l *lane) provenLocked(now time.Time) float64 {
	least := math.Inf(1)
	limit := l.cutThresholdLocked(now)
	for sec := now.Unix() - proofSeconds; sec < now.Unix(); sec++ {
		b := l.seconds[int(sec%int64(len(l.seconds)))]
		if b.sec != sec || float64(b.throttled) > limit*float64(b.attempts)+1 {
			return 0
		}
		least = min(least, float64(b.accepted))
	}
	return least
}

// grantedLocked is the sends granted per second over the last second.
func (l *lane) grantedLocked(now time.Time) float64 {
	n := 0
	for t := range l.lastSecond(now) {
		n += t.granted
	}
	span := min(time.Second, max(now.Sub(l.created), tickSpan))
	return float64(n) / span.Seconds()
}

// maxRate bounds the rate: far above what any push service takes from one
// sender, and low enough that its arithmetic stays exact.
const maxRate = 1e6

// tookCleanLocked is what the origin accepted over the last second, of
// every tier, when it refused none of it; zero when it refused any.
func (l *lane) tookCleanLocked(now time.Time) float64 {
	took := 0
	for t := range l.lastSecond(now) {
		if t.throttled > 0 {
			return 0
		}
		took += t.accepted
	}
	return float64(took) / (judgeSpan * tickSpan).Seconds()
}

// lastSecond yields the ticks kept of the last second, newest first.
func (l *lane) lastSecond(now time.Time) iter.Seq[*tick] {
	return func(yield func(*tick) bool) {
		at := now.UnixNano() / int64(tickSpan)
		for i := range int64(judgeSpan) {
			if t := l.tickAt(at - i); t != nil && !yield(t) {
				return
			}
		}
	}
}

// roundTrip is the time a send's answer takes to come back: twice the
// mean latency, a tenth of a second at least.
func (l *lane) roundTrip() float64 { return max(0.1, 2*l.latency) }

// holdAfterCut is how long growth waits after a cut: until answers to the
// sends made at the new rate are in.
func (l *lane) holdAfterCut() time.Duration {
	return max(l.cfg.CutCooldown, time.Duration(l.roundTrip()*float64(time.Second)))
}

// armLocked sets the lane's timer for the moment waiters can next move:
// the end of a pause, or the next token.
func (l *lane) armLocked(now time.Time) {
	if l.waiting == 0 {
		return
	}
	var at time.Time
	switch {
	case now.Before(l.paused):
		at = l.paused
	case l.tokens < 1:
		// Rounded up to whole milliseconds: a wait that rounds to zero
		// would wake at the same instant, forever.
		wait := time.Duration(math.Ceil(l.waitLocked(now) * 1000))
		at = now.Add(max(wait, 1) * time.Millisecond)
	default:
		return
	}
	if !l.armed.IsZero() && !l.armed.After(at) {
		return
	}
	l.armed = at
	d := at.Sub(now)
	if l.timer == nil {
		p := l.pacer
		l.timer = time.AfterFunc(d, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.armed = time.Time{}
			now := p.now()
			l.growLocked(p, now)
			l.wakeLocked(p, now)
		})
		return
	}
	l.timer.Reset(d)
}

// waitLocked is how long, in seconds, until a waiter may take a token
// (allowedLocked): a lower tier's when one token is there; tier 1's when
// its debt allows.
func (l *lane) waitLocked(now time.Time) float64 {
	until := func(level float64) float64 { return max(0, (level-l.tokens)/l.rate) }
	if len(l.queues[0][0])+len(l.queues[0][1]) == 0 || l.unheldLocked(0, now) {
		return until(1)
	}
	return until(1 - l.debtLocked(now))
}

// limitInt is the concurrency limit: in slow start the configured
// maximum (the rate is the guard); afterwards what the rate needs in
// flight at twice the mean latency (Little's law), plus a little.
func (l *lane) limitInt() int {
	if l.slowStart || l.latency == 0 {
		return l.cfg.MaxLimit
	}
	need := int(math.Ceil(2*l.rate*l.latency)) + 4
	return min(max(need, l.cfg.MinLimit), l.cfg.MaxLimit)
}

// limitFor is the concurrency limit for a send of tier index ti: tier 1
// may have as many more in flight as it may overdraw tokens
// (allowedLocked): its burst is not held to what the rate needs in flight.
func (l *lane) limitFor(ti int, now time.Time) int {
	if ti > 0 || l.slowStart {
		return l.limitInt()
	}
	ahead := min(max(l.rate*tier1Debt, l.ceiling*spareFor), l.allowanceLocked(now))
	return min(l.limitInt()+int(ahead)+1, l.cfg.MaxLimit)
}

// retryAllowed applies the retry budget: retries may hold at most
// RetryShare of the slots while first attempts wait.
func (l *lane) retryAllowed(retry, firstsWaiting bool) bool {
	if !retry || !firstsWaiting {
		return true
	}
	return float64(l.retries+1) <= math.Max(1, l.cfg.RetryShare*float64(l.limitInt()))
}

func (l *lane) grantLocked(p *Pacer, req Request, now time.Time) *Slot {
	l.tickLocked(now).granted++
	l.lastGrant = now
	if l.spareLocked(now) > 0 {
		if req.Tier.Index() == 0 && l.spare >= 1 && l.burstLocked(now) {
			// Tier 1's debt after a burst counts from what it spent of
			// the spare: the burst's last sends, beyond the spare, go at
			// once too.
			l.spent++
			l.spentAt = now
		}
		l.spare = max(l.spare-1, 0)
	}
	l.inFlight++
	if req.Retry {
		l.retries++
	}
	// A send is safe, its 429 counted as background (backgroundLocked),
	// at or below a ceiling that has stood settleFor since slow start:
	// slow start's ceilings are taken over the burst allowance it spent
	// (80/s against a limit of 20), and a limit's 429s under them, learnt
	// as background, lifted the threshold past what the limit then
	// throttled (4 to 6 429s a second at 20/s, uncut for 4 s). At or
	// below CutFactor of the ceiling, as it was, only the moments after a
	// cut counted: a lane probing on devices' 429s learnt nothing, and cut
	// on them again and again.
	safe := !l.slowStart && now.Sub(l.settled) >= settleFor && l.rate <= l.ceiling*1.001
	probing := l.slowStart || (l.ceiling > 0 && l.rate > l.ceiling)
	// Ahead of the rate: tier 1 that took no token, or one not yet
	// earned.
	ti := req.Tier.Index()
	ahead := l.unheldLocked(ti, now) || ti == 0 && l.tokens < 0
	return &Slot{p: p, l: l, req: req, granted: now, safe: safe, probing: probing, ahead: ahead}
}

// evictLocked removes and returns the newest waiter of the lowest tier
// below tier ti, or nil.
func (l *lane) evictLocked(ti int) *waiter {
	for t := 2; t > ti; t-- {
		for r := 1; r >= 0; r-- {
			q := l.queues[t][r]
			if n := len(q); n > 0 {
				w := q[n-1]
				l.queues[t][r] = q[:n-1]
				l.waiting--
				return w
			}
		}
	}
	return nil
}

// cancel removes w from its queue; false when it was already granted.
func (l *lane) cancel(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := &l.queues[w.req.Tier.Index()][boolIndex(w.req.Retry)]
	for i, x := range *q {
		if x == w {
			*q = append((*q)[:i], (*q)[i+1:]...)
			l.waiting--
			return true
		}
	}
	return false
}

// pickLocked chooses the next waiter: tiers by smooth weighted round robin
// over those with an eligible waiter (work-conserving), first attempts
// before retries when the retry budget is spent, else the oldest. A tier
// is eligible when a token is there for it (tokenLocked's rule).
func (l *lane) pickLocked(now time.Time) *waiter {
	firsts := false
	for t := range 3 {
		firsts = firsts || len(l.queues[t][0]) > 0
	}
	retryOK := l.retryAllowed(true, firsts)
	l.refillLocked(now)
	eligible := func(t int) bool {
		if l.inFlight >= l.limitFor(t, now) || !l.allowedLocked(t, now) {
			return false
		}
		return len(l.queues[t][0]) > 0 || (retryOK && len(l.queues[t][1]) > 0)
	}
	best := l.turns.Next(eligible)
	if best < 0 {
		if l.waiting > 0 && l.tokens < 1 {
			l.starved = true
		}
		return nil
	}
	f, r := l.queues[best][0], l.queues[best][1]
	useRetry := retryOK && len(r) > 0 && (len(f) == 0 || r[0].seq < f[0].seq)
	q := &l.queues[best][boolIndex(useRetry)]
	w := (*q)[0]
	(*q)[0] = nil
	*q = (*q)[1:]
	l.waiting--
	return w
}

// done records a result, adapts the rate and breaker, and hands freed
// slots to waiters. It reports whether a 429 was the device's: one that
// came while the origin's own were not in question, so that its
// subscription is paused. The 429s of a probe (slow start, above the
// ceiling) or of a cut or pause's hold are the origin's, which the lane
// answers; pausing each device they hit would hold its next notifications
// (tier 1 among them) back for nothing.
func (l *lane) done(s *Slot, r push.Result, throttled bool, now time.Time) (device bool) {
	p := s.p
	failed := !throttled && r.Class == push.Retryable && !s.req.Failing
	repeat := !throttled && r.Class == push.Retryable && s.req.Failing
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastUsed = now
	l.inFlight--
	device = throttled && !s.probing && !now.Before(l.paused) && now.Sub(l.lastCut) >= l.holdAfterCut()
	if throttled && !device {
		l.spareLocked(now)
		l.spare = 0
	}
	if s.probe {
		l.probes-- // also when deferred: else the lane stays half-open for good
	} else if s.req.Retry {
		l.retries--
	}
	if r.Class == push.Deferred || repeat {
		// No send was made, or one that says nothing of the origin (a
		// probe that fails again this way leaves the next probe to decide).
		l.wakeLocked(p, now)
		return
	}
	if throttled {
		l.retryAfters[l.retryAfterN%retryAfterKept] = r.RetryAfter
		l.retryAfterN++
	}
	l.recordLocked(s.granted, now, throttled, failed, s.safe)
	if !s.probe && !s.granted.Before(l.judgeFrom) {
		a := &l.paced
		if s.ahead {
			a = &l.ahead
		}
		a.n++
		if throttled {
			a.throttled++
		}
	}
	if s.probe {
		switch {
		case throttled || failed:
			l.openLocked(p, now, 1)
		case l.breaker == HalfOpen:
			l.breaker = Closed
			// What the origin takes now is unknown again: slow start,
			// from the rate it had.
			l.slowStart = true
			l.rate = max(l.rate, l.cfg.StartRate)
			l.restartLocked(now)
			l.event(p, Event{At: now, Kind: Closed})
			l.signalLocked(p, now, SignalClosed, time.Time{})
		}
		l.wakeLocked(p, now)
		return
	}
	if l.breaker == Closed {
		l.adaptLocked(p, now)
	}
	if !l.slowStart && now.Sub(l.reported) >= peerEvery {
		l.signalLocked(p, now, SignalRate, time.Time{})
	}
	l.growLocked(p, now)
	l.wakeLocked(p, now)
	return device
}

// recordLocked counts an answer.
func (l *lane) recordLocked(granted, now time.Time, throttled, failed, safe bool) {
	sec := now.Unix()
	b := &l.seconds[int(sec%int64(len(l.seconds)))]
	if b.sec != sec {
		*b = second{sec: sec}
	}
	b.attempts++
	// Answers to sends made before the last change are the evidence it
	// was made on, the limit's 429s among them: none is background.
	if safe && !granted.Before(l.judgeFrom) {
		b.safe++
		if throttled {
			b.safeThrottled++
		}
	}
	t := l.tickLocked(now)
	if throttled {
		b.throttled++
		t.throttled++
		l.refusedInRow++
		if l.refillingLocked(granted) {
			l.refusedAfter, l.refillCut = now, 0
			if l.refilledAt == now.UnixNano()/int64(tickSpan) {
				l.refillCut = l.refilled
			}
		}
	} else {
		b.accepted++
		t.accepted++
		l.refusedInRow = 0
		if l.refillingLocked(granted) {
			if at := now.UnixNano() / int64(tickSpan); at != l.refilledAt {
				l.refilledAt, l.refilled = at, 0
			}
			l.refilled++
			l.refillTook++
		}
		lat := now.Sub(granted).Seconds()
		if l.latency == 0 {
			l.latency = lat
		} else {
			l.latency += (lat - l.latency) / 16
		}
	}
	if granted.Before(l.judgeFrom) {
		return
	}
	if l.freshFrom.IsZero() {
		l.freshFrom = now
	}
	t.freshN++
	switch {
	case throttled:
		t.freshThrottled++
	case failed:
		t.freshFailed++
	}
}

// refillingLocked tells whether an answer to a send granted then is to a
// send made after the last pause ended and before its first refusal: what
// the pause refilled of a limit's allowance.
func (l *lane) refillingLocked(granted time.Time) bool {
	return !l.paused.IsZero() && !granted.Before(l.paused) && l.refusedAfter.Before(l.paused)
}

func (l *lane) tickLocked(now time.Time) *tick {
	at := now.UnixNano() / int64(tickSpan)
	t := &l.ticks[int(at%keptTicks)]
	if t.at != at {
		*t = tick{at: at}
	}
	return t
}

// tickAt is the tick at (in tenths of a second), or nil when none was
// kept for it.
func (l *lane) tickAt(at int64) *tick {
	if t := &l.ticks[int((at%keptTicks+keptTicks)%keptTicks)]; t.at == at {
		return t
	}
	return nil
}

// fresh is the evidence a decision is made on: the answers to sends
// granted since the lane last changed, over the last second or as many
// more of the ticks kept as it takes to see MinSamples, and the time they
// came over.
type fresh struct {
	n, throttled, failed int
	span                 time.Duration
}

func (l *lane) freshLocked(now time.Time, want int) fresh {
	at := now.UnixNano() / int64(tickSpan)
	var f fresh
	i := int64(0)
	for ; i < keptTicks; i++ {
		if t := l.tickAt(at - i); t != nil {
			f.n, f.throttled, f.failed = f.n+t.freshN, f.throttled+t.freshThrottled, f.failed+t.freshFailed
		}
		if i+1 >= judgeSpan && f.n >= want {
			i++
			break
		}
	}
	f.span = time.Duration(i) * tickSpan
	if !l.freshFrom.IsZero() {
		f.span = min(f.span, now.Sub(l.freshFrom)+tickSpan/2)
	}
	return f
}

// acceptedLocked estimates what the origin accepts per second; for this
// processor, its part of it: what measuredLocked reads of the last
// seconds, and no less than refilledRateLocked proves. Where nothing was
// read, a cut halves the rate; a proof of less than that half is left
// out, as a cut to it would go further on less.
func (l *lane) acceptedLocked(now time.Time) float64 {
	acc, _ := l.readingLocked(now)
	return acc
}

// readingLocked is acceptedLocked, and whether the origin read as one
// that refuses everything until a window opens again.
func (l *lane) readingLocked(now time.Time) (acc float64, closed bool) {
	m, closed := l.measuredLocked(now)
	least := l.refilledRateLocked(now)
	if m <= 0 && least*l.cfg.CutFactor < l.rate/2 {
		return m, closed
	}
	if least > m {
		return least, l.closedLocked(now)
	}
	return m, closed
}

// refilledRateLocked is the least rate a lane alone on its origin has seen
// it take over its last pause: the pause began on refusals, so the origin
// had nothing left to give then, and what it accepted of the sends after
// the pause, up to their first refusal, it refilled in between. A token
// bucket's rate is at least that. An origin counting whole seconds takes
// a second's worth at the start of the next and refuses everything after
// it until the one after: read from that refusal on, as measuredLocked
// reads a lane's first answers after a pause, it took nothing (a limit of
// 3,000/s read as 51/s, and the climb back took 37 s). Where it has
// refused all since (closedLocked), it took what it took at once, a
// second's worth: read over the pause as well, a second it was paused
// for halved the reading. Zero where none of this applies, or the refusal
// is older than the ticks read.
func (l *lane) refilledRateLocked(now time.Time) float64 {
	if l.paused.IsZero() || l.paused.After(now) || !l.refusedAfter.After(l.paused) ||
		now.Sub(l.refusedAfter) > ticks*tickSpan || l.sharingLocked(now) != 1 {
		return 0
	}
	span := l.refusedAfter.Sub(l.pausedAt)
	if l.closedLocked(now) {
		span = max(time.Second, l.refusedAfter.Sub(l.paused))
	}
	return float64(l.refillTook) / span.Seconds()
}

// closedLocked tells whether the origin refused all but a twentieth of
// the answers since the first 429 after the last pause, MinSamples at
// least: it gives no more until a window opens again. A token bucket
// accepts its rate's share of whatever is sent, so only a rate twenty
// times its limit reads so.
func (l *lane) closedLocked(now time.Time) bool {
	from, at := l.refusedAfter.UnixNano()/int64(tickSpan), now.UnixNano()/int64(tickSpan)
	accepted, refused := -l.refillCut, 0
	for i := from; i <= at; i++ {
		if t := l.tickAt(i); t != nil {
			accepted, refused = accepted+t.accepted, refused+t.throttled
		}
	}
	return refusedAll(accepted, refused, l.cfg.MinSamples)
}

// refusedAll tells whether refused, minSamples at least, came with no more
// accepted than a twentieth of them: what a window that closed answers,
// and a token bucket only at twenty times its rate.
func refusedAll(accepted, refused, minSamples int) bool {
	return refused >= minSamples && 20*accepted <= refused
}

// measuredLocked is what the origin took over the last seconds, and
// whether its newest run of refused tenths took nothing (closedRun). Where
// the oldest and the newest refusal of the last three seconds are
// refusalSpan apart or more, with
// refusalAnswers accepted between them, it is what the origin took between
// the two: its allowance was spent at both, so it took what it refilled
// (less, if it was left idle long enough to fill up). On the real clock
// answers come in clumps (a fetched batch sent at once, a busy core): a
// tenth with a refusal held 127 accepted answers of an origin taking
// 500/s, and the median below read 920/s; over half a second and more they
// average out. Otherwise it is what the origin accepted in the windows in
// which it also refused sends, the median of them. Then its allowance was
// spent, so what it took is its rate, whatever burst it allowed before (a
// pause refills one). The median leaves out the windows in which a burst
// allowance ran out. A window is as many tenths of a second as hold about
// ten answers, so that a low rate is not rounded to whole answers a tenth.
// With fewer than two such windows, what it accepted over the last second,
// counted from the first tenth with answers.
func (l *lane) measuredLocked(now time.Time) (acc float64, closed bool) {
	at := now.UnixNano() / int64(tickSpan)
	var accepted, throttled [ticks]int
	all := 0
	n, span := 0, 0
	newest, oldest := -1, -1 // the ticks of the newest and oldest refusal
	// A lane alone on its origin sent nothing over a pause, and a limit
	// refilled its allowance over it: what the origin took is judged from
	// the first refusal after the pause, once that allowance is spent.
	// Over the pause, an origin refusing 30% at random at any rate read
	// 3.6/s on the first answers after a 1 s pause, and the cut took a
	// lone processor from 18/s to 3.3/s, where the breaker lacked the
	// answers to open (TestBreaker, 2 runs of 13); from the pause's end,
	// a limit's refilled allowance read as its rate (20 req/s at 250 ms:
	// 10 draws in 61 past 5% 429s, 4 in 90 before). With peers the pause
	// counts as before: they race for the allowance it refills, and what
	// one wins of it right after the pause is no rate (three processors
	// on 20/s read 25-53/s each, and opened the breaker on the limit).
	last, refill := int64(ticks), 0
	if !l.paused.IsZero() && !l.paused.After(now) && l.sharingLocked(now) == 1 {
		from := l.paused
		if l.refusedAfter.After(from) {
			// In the tenth of that refusal, what came before it was
			// the refill.
			from, refill = l.refusedAfter, l.refillCut
		}
		if a := at - from.UnixNano()/int64(tickSpan) + 1; a <= last {
			last = a
		} else {
			refill = 0 // its tenth is out of the window
		}
	}
	if !l.allowanceAt.IsZero() {
		// Nor is a burst the origin refused (burstsRefusedLocked): its
		// 429s are no rate, and what it took of the burst is no rate
		// either. Counted, they read 16/s against 20 at the end of slow
		// start, the rate sat under the limit while the origin's bucket
		// filled, and the probe that followed proved the bucket as a
		// higher limit (1.8× the limit in a second).
		if a := at - l.allowanceAt.UnixNano()/int64(tickSpan); a < last {
			last = max(a, 1)
			refill = 0
		}
	}
	for i := range last {
		t := l.tickAt(at - i)
		if t == nil {
			continue
		}
		accepted[i], throttled[i] = t.accepted, t.throttled
		if i == last-1 {
			accepted[i] = max(accepted[i]-refill, 0)
		}
		all += accepted[i] + throttled[i]
		if i < judgeSpan && accepted[i]+throttled[i] > 0 {
			n += accepted[i]
			span = int(i) + 1
		}
		if t.throttled > 0 {
			if newest < 0 {
				newest = int(i)
			}
			oldest = int(i)
		}
	}
	closed = newest >= 0 && closedRun(accepted[newest:last], throttled[newest:last], l.cfg.MinSamples)
	// Between two refusals, half a second apart or more, the origin took
	// what it refilled: its allowance was spent at both. The widest pair,
	// so that a low rate is not rounded to a few answers.
	if oldest-newest >= refusalSpan {
		a := float64(accepted[newest]+accepted[oldest]) / 2
		for j := newest + 1; j < oldest; j++ {
			a += float64(accepted[j])
		}
		if a >= refusalAnswers {
			return a / (float64(oldest-newest) * tickSpan.Seconds()), closed
		}
	}
	k := 1
	if all > 0 {
		k = min(max(int(math.Ceil(10*ticks/float64(all))), 1), judgeSpan)
	}
	// The tick under way counts by what of it has passed; a window that
	// has had less than half a tick is left out: a few answers into it,
	// it read a tenth of the limit, and pulled the median with it.
	part := float64(now.UnixNano()%int64(tickSpan)) / float64(tickSpan)
	var taken []float64
	for w := 0; w+k <= int(last); w += k {
		a, r := 0, 0
		for i := w; i < w+k; i++ {
			a, r = a+accepted[i], r+throttled[i]
		}
		span := float64(k)
		if w == 0 {
			span += part - 1
		}
		if r > 0 && span >= 0.5 {
			taken = append(taken, float64(a)/(span*tickSpan.Seconds()))
		}
	}
	over := 0.0 // what it accepted over the last second
	if span > 0 {
		elapsed := (float64(span-1) + part) * tickSpan.Seconds()
		over = float64(n) / max(elapsed, tickSpan.Seconds()/2)
	}
	if len(taken) < 2 {
		return over, closed
	}
	slices.Sort(taken)
	m := taken[len(taken)/2]
	if len(taken)%2 == 0 {
		m = (taken[len(taken)/2-1] + m) / 2
	}
	if closed && over >= float64(strongSamples*l.cfg.MinSamples) {
		// An origin counting whole seconds gave a second's worth at once
		// and now refuses everything: the windows of its refusals hold
		// nothing it took, and their median read 230/s of a limit of
		// 500. It took a second's worth over the last second. Only a
		// token bucket's rate under a twentieth of what is sent reads
		// so, and the rate is well enough sampled (strongSamples) for a
		// tenth with none accepted to be no rounding.
		return max(m, over), closed
	}
	return m, closed
}

// closedRun tells whether the run of tenths with refusals that starts at
// the first of these (the newest) accepted all but a twentieth of what it
// refused, MinSamples refusals at least, leaving out its oldest tenth: the
// one in which the window closed.
func closedRun(accepted, throttled []int, minSamples int) bool {
	end := 0
	for end < len(throttled) && throttled[end] > 0 {
		end++
	}
	a, r := 0, 0
	for i := range end - 1 {
		a, r = a+accepted[i], r+throttled[i]
	}
	return refusedAll(a, r, minSamples)
}

// adaptLocked applies the pacing rules after an answer.
func (l *lane) adaptLocked(p *Pacer, now time.Time) {
	f := l.freshLocked(now, l.cfg.MinSamples)
	if f.n < l.cfg.MinSamples {
		return
	}
	share := float64(f.throttled) / float64(f.n)
	outage := aboveZ(f.failed, f.n, l.cfg.ErrorHaltRate, l.z)
	// Shares are judged with Confidence (the lower bound of the Wilson
	// score interval): a few answers, or devices throttled one by one near
	// a threshold, must not cut or halt on noise.
	storm := aboveZ(f.throttled, f.n, l.cfg.HaltRate, l.z)
	if f.span < judgeMin && !storm && !outage {
		// A quarter of a second of answers at least, unless they leave
		// no doubt: a storm or an outage is answered at once.
		return
	}
	if outage {
		l.openLocked(p, now, float64(f.failed)/float64(f.n))
		return
	}
	threshold := l.cutThresholdLocked(now)
	if l.slowStart {
		// Nothing is known of the origin yet: per-device 429s near the
		// threshold must not end slow start far below its limit, so it
		// ends on the threshold plus twice CutRate (15% by default). A
		// limit's share grows with every round trip of slow start and
		// passes that a round trip or two later. At 10%, devices
		// throttled one by one (5%) read past it on the first
		// twenty-odd answers often enough that three processors
		// starting together on an origin with no limit ended slow start
		// at 60/s in 6 draws of 60, and sent a tenth of what it took
		// for half a minute.
		threshold += 2 * l.cfg.CutRate
	}
	// The breaker also opens on storms: cuts and pauses in a row, past
	// HaltRate, that did not follow the rate. A limit's 429s end after a
	// cut or two; 429s thrown at random never do. A clean judgement ends a
	// run of storms; it is made on cleanSamples answers (on ten, a service
	// throttling 30% at random looks clean one time in seven, on thirty one
	// in thirty).
	if l.storms > 0 || l.cutsInRow > 0 {
		c := l.freshLocked(now, cleanSamples*l.cfg.MinSamples)
		if c.n >= cleanSamples*l.cfg.MinSamples && c.span >= judgeMin && float64(c.throttled) <= threshold*float64(c.n) {
			l.storms, l.cutsInRow = 0, 0
		}
	}
	cut := aboveZ(f.throttled, f.n, threshold, l.z) && now.Sub(l.lastCut) >= l.cfg.CutCooldown
	if l.slowStart && f.n < 2*l.cfg.MinSamples {
		// Slow start is judged on twice the answers, short of a storm:
		// on ten, devices throttled one by one (5% of them) read as a
		// limit about one window in a hundred, and three processors
		// judging many windows each ended slow start at 40/s in one
		// run in four, for all of them.
		cut = false
	}
	var stormy, held, closed bool
	var acc float64 // what the origin accepted: worked out only for a change
	if storm || cut {
		acc, closed = l.readingLocked(now)
		stormy = l.stormyLocked(now)
		// The last cut, itself a storm's, changed nothing: the rate has
		// not grown past what the origin was seen to take (the ceiling),
		// the share has not fallen, and the origin accepted less than was
		// sent, as from a service refusing a share at random (after a
		// pause refilled a limit's burst allowance it can read far above
		// both, and there the cuts must go on). Cutting on would only
		// starve the judgement of answers (a rate cut to a send a second
		// takes ten seconds to judge): hold the rate while the storms add
		// up.
		held = stormy && l.storms > 0 && acc > 0 && acc < l.rate && l.rate <= l.ceiling && share >= insensitive*l.cutShare
		// Nor does a cut help where the cuts since the lane settled have
		// run on with no clean judgement between them: a limit's 429s
		// end a cut or two after the rate lands under it, while 429s
		// thrown at random follow the rate down (the origin takes 70% of
		// whatever is sent), a cut every half second. Judged on ten
		// answers each, the share of such cuts is too noisy to show
		// them insensitive, and they took a lone processor from 9 to
		// 0.9 sends a second in 20 s, too few answers for the storms or
		// the rolling share to open the breaker before the service
		// recovered (TestBreaker through Kafka, 3 runs of 12). Held,
		// the rate keeps sending what the judgement needs. Below
		// StartRate the rate may have grown past the ceiling (it grows
		// as if from half of StartRate), and is held all the same.
		// A rate that answers strongSamples of MinSamples within a
		// second is judged well enough by the share: the rule is for the
		// few sends a second random 429s cut a lane to. Past it, a limit
		// of a twentieth of a second's burst that halved under a lone
		// processor held it at half again the new limit, a pause a
		// second and 30% 429s, with no cut to show the share would fall.
		held = held || l.cutsInRow >= maxCutsInRow && acc > 0 && acc < l.rate && l.rate <= max(l.ceiling, l.cfg.StartRate) &&
			l.rate < float64(strongSamples*l.cfg.MinSamples)
	}
	if (storm || cut) && l.burstsRefusedLocked(threshold) {
		// The 429s are tier 1's bursts', not the rate's: no cut, no
		// pause, and slow start goes on. Tier 1 goes ahead of the rate
		// by what the origin took of them at most, and the judgement
		// starts again on the sends that come of it.
		l.allowance = max(1, min(l.allowanceLocked(now), float64(l.ahead.n-l.ahead.throttled))/2)
		l.allowanceAt = now
		l.tokens = min(l.tokens, 1)
		l.restartLocked(now)
		l.event(p, Event{At: now, Kind: "bursts", Rate: share, Accepted: l.allowance})
		return
	}
	if storm && l.tailLocked(now) {
		// The sends made right after a cut on a window that closed met
		// the rest of it: no evidence against the new rate. Paused and
		// cut again on them, a lone processor left the next second
		// unused and sent 79% of the limit for seconds after, one cycle
		// in eight seconds (81% of 3,000/s at 5 ms). Held once; a storm
		// after that is judged as any.
		l.closedCut = time.Time{}
		l.restartLocked(now)
		l.event(p, Event{At: now, Kind: "hold", Rate: share})
		return
	}
	switch {
	case float64(f.throttled) > l.cfg.HaltRate*float64(f.n) && l.haltingLocked(now):
		// Cut after cut, the rolling 429 share stays past HaltRate: the
		// 429s do not follow the rate.
		l.storms = 0
		l.openLocked(p, now, share)
	case stormy && l.storms >= maxStorms-1 && l.rollingPastLocked(now):
		// The storms go on however far the rate is cut: these 429s do not
		// follow the rate (a service throttling at random, or failing
		// with 429s). Halt the origin; half-open probes decide, and it
		// starts slow again once they pass.
		l.storms = 0
		l.openLocked(p, now, share)
	case storm:
		if stormy {
			l.storms++
		}
		until := now.Add(max(l.retryAfterLocked(), l.cfg.DefaultPause))
		if held {
			l.restartLocked(now)
		} else {
			l.countCutLocked(now)
			l.cutLocked(now, acc, true)
			l.cutShare = share
		}
		l.pauseLocked(now, until)
		l.event(p, Event{At: now, Kind: "pause", Rate: share, Until: l.paused, Accepted: acc})
		l.signalLocked(p, now, SignalPause, l.paused)
	case cut && held:
		if stormy {
			l.storms++
		}
		l.restartLocked(now)
		l.event(p, Event{At: now, Kind: "hold", Rate: share})
	case cut:
		if stormy {
			l.storms++
		}
		l.countCutLocked(now)
		took := l.cutLocked(now, acc, false)
		l.cutShare = share
		if closed || l.refusedInRow >= l.cfg.MinSamples {
			// Read so, or refused MinSamples in a row, which a token
			// bucket does only at ten times its rate: the window
			// closed within the last tenth.
			l.closedCut = now
		}
		l.event(p, Event{At: now, Kind: "cut", Rate: share, Accepted: acc})
		if !took {
			// A cut on an origin that took all but a background's share
			// of what was sent is no evidence of a limit the peers
			// share: told to them, each processor's false cut on
			// devices' 429s cut all three.
			l.signalCutLocked(p, now, f)
		}
	}
}

// tailLocked tells whether a cut that read a window closing
// (readingLocked) was made within a round trip and a tenth.
func (l *lane) tailLocked(now time.Time) bool {
	return !l.closedCut.IsZero() && now.Sub(l.closedCut) <= time.Duration(l.roundTrip()*float64(time.Second))+tickSpan
}

// burstMin is the least number of 429s to sends ahead of the rate that
// shows an origin refusing bursts.
const burstMin = 5

// burstsRefusedLocked tells whether the 429s since the judgement began
// fell on the sends that went ahead of the rate, in slow start: burstMin
// of them at least, their share past threshold with Confidence, while the
// sends that waited for the rate were refused no more than threshold of
// them, on MinSamples answers, or none at all on fewer (slow start's first
// round trips answer a few, and a burst's 429s must not end it far below
// the limit: on an allowance learnt too large, half of ten sends within it
// refused a tenth of a second later paused a lone lane at 18/s against
// 3,000). If the rate's 429s were among them after all, they soon fall on
// the sends held to the rate too, and the judgement cuts.
//
// In slow start only, where tier 1 is not held at all and the first burst
// comes. Once the origin is at its limit, whatever its burst, a send ahead
// of the rate goes out beside one that took a token and meets the empty
// bucket first: on a limit of a second of burst, judged again and again
// after slow start, the rule took a probe's 429s past 3,000/s for the
// bursts' for eight seconds, uncut, at 16% 429s.
func (l *lane) burstsRefusedLocked(threshold float64) bool {
	a, r := l.ahead, l.paced
	if !l.slowStart || a.throttled < burstMin || !aboveZ(a.throttled, a.n, threshold, l.z) {
		return false
	}
	if r.n >= l.cfg.MinSamples {
		return float64(r.throttled) <= threshold*float64(r.n)
	}
	// With none answered nor waiting (tier 1 alone), nothing tells the
	// bursts' 429s from the rate's.
	return r.throttled == 0 && (r.n > 0 || l.lowerWaitingLocked())
}

// lowerWaitingLocked tells whether sends of the lower tiers wait for the
// rate.
func (l *lane) lowerWaitingLocked() bool {
	for _, q := range l.queues[1:] {
		if len(q[0])+len(q[1]) > 0 {
			return true
		}
	}
	return false
}

// answers counts answers and the 429s among them.
type answers struct{ n, throttled int }

// retryAfterKept is how many 429s' Retry-After the lane keeps.
const retryAfterKept = 15

// retryAfterLocked is the Retry-After a storm's pause waits: the median of
// the last retryAfterKept 429s'. A storm's 429s are the origin's, most of
// them, and carry its Retry-After; the answer that happens to tip the
// share past HaltRate may be a device's, throttled one by one with a
// longer Retry-After of its own (FCM's, or 5 s in the grid's model). Taken
// from that one answer, a pause held an origin of 2,000/s for 5 s where
// its own 429s asked for 1 s. A device's Retry-After is honoured where it
// belongs: its subscription is paused (done).
func (l *lane) retryAfterLocked() time.Duration {
	n := min(l.retryAfterN, retryAfterKept)
	if n == 0 {
		return 0
	}
	kept := l.retryAfters // a copy, on the stack
	slices.Sort(kept[:n])
	return kept[n/2]
}

// countCutLocked counts a cut of this lane's own toward cutsInRow, once
// settleFor has passed since slow start: before, the cuts converge on a
// limit from above, a pause's refilled allowance read as more than it takes.
func (l *lane) countCutLocked(now time.Time) {
	if !l.slowStart && now.Sub(l.settled) >= settleFor {
		l.cutsInRow++
	}
}

// maxCutsInRow cuts in a row with no clean judgement between them: the
// next is held (adaptLocked).
const maxCutsInRow = 2

// maxStorms cuts and pauses in a row with no clean judgement between them
// open the breaker; those of the first settleFor after slow start, which
// converge on the limit from above, do not count.
const (
	maxStorms = 4
	settleFor = 5 * time.Second
)

// stormyLocked tells whether the 429s a change is made on are a storm: a
// share past HaltRate, once slow start has settled, on twice MinSamples
// fresh answers, or on every answer of the last stormSpan or further back
// until there are as many. On the ten fresh answers a cut is made on, 30%
// thrown at random reads 20% or less four times in ten (through Kafka the
// breaker then never opened in one run in ten), 10% reads more than 20%
// one time in fifteen, and three processors at 500 ms per push, each a few
// sends a second, read a limit's 429s as four storms in a row one draw in
// six. A lane cut to a send or two a second by random 429s finds its
// twenty answers further back.
func (l *lane) stormyLocked(now time.Time) bool {
	if now.Sub(l.settled) < settleFor {
		return false
	}
	wide := l.freshLocked(now, 2*l.cfg.MinSamples)
	return wide.n >= 2*l.cfg.MinSamples && float64(wide.throttled) > l.cfg.HaltRate*float64(wide.n) || l.stormyAllLocked(now)
}

// stormyAllLocked tells whether the 429 share of every answer of the last
// stormSpan, or of as many seconds before it as it takes to hold twice
// MinSamples answers (up to Window), is past HaltRate; answers from the
// first settleFor after slow start, which converge on the limit from
// above, are left out.
func (l *lane) stormyAllLocked(now time.Time) bool {
	from := max(now.Add(-min(l.cfg.Window, time.Duration(len(l.seconds))*time.Second)).Unix()+1, l.settled.Add(settleFor).Unix())
	span := now.Add(-stormSpan).Unix()
	n, k := 0, 0
	for sec := now.Unix(); sec >= from && (sec > span || n < 2*l.cfg.MinSamples); sec-- {
		if b := l.seconds[int(sec%int64(len(l.seconds)))]; b.sec == sec {
			n, k = n+b.attempts, k+b.throttled
		}
	}
	return n >= 2*l.cfg.MinSamples && float64(k) > l.cfg.HaltRate*float64(n)
}

// haltingLocked tells whether the 429 share of every answer since the
// origin's lanes settled (leaving out settleFor after slow start, which
// converges on the limit from above), over the rolling Window, is past
// HaltRate with Confidence on haltSamples answers at least, though this
// lane has cut in that time. The answers are this processor's and those
// its peers last reported. It is the rule as users read it, "halt past
// 20%", and it catches what a run of storms can miss: lanes cut to a send
// or two a second by 429s thrown at random judge each storm on a handful
// of answers, and one draw in three hundred of three processors at 30%
// never counted four storms in a row before the minute was out.
func (l *lane) haltingLocked(now time.Time) bool {
	n, k, cut := l.rollingAllLocked(now)
	return cut && n >= haltSamples*l.cfg.MinSamples && aboveZ(k, n, l.cfg.HaltRate, l.z)
}

// rollingPastLocked tells whether the rolling share haltingLocked judges
// is past HaltRate at all, on twice MinSamples answers: a run of storms
// opens the breaker only then. Storms are judged on twenty answers each,
// and 10% thrown at random read as four in a row in about one draw of a
// minute in five hundred; over the rolling minute it reads 10%.
func (l *lane) rollingPastLocked(now time.Time) bool {
	n, k, _ := l.rollingAllLocked(now)
	return n >= 2*l.cfg.MinSamples && float64(k) > l.cfg.HaltRate*float64(n)
}

// rollingAllLocked adds the rolling counts (rollingLocked) of this lane and
// of the peers that reported within peerFresh, and tells whether this lane
// has cut since its counts begin.
func (l *lane) rollingAllLocked(now time.Time) (n, k int, cut bool) {
	n, k, from := l.rollingLocked(now)
	if n == 0 {
		return 0, 0, false
	}
	for pr := range l.freshPeersLocked(now) {
		n, k = n+pr.answers, k+pr.throttled
	}
	return n, k, l.lastCut.After(from)
}

// rollingLocked counts the answers haltingLocked judges this lane on, and
// their 429s: those of the rolling Window since settleFor after slow start
// ended, once they span haltSpan; none while in slow start or while the
// breaker is not closed.
func (l *lane) rollingLocked(now time.Time) (n, k int, from time.Time) {
	if l.slowStart || l.breaker != Closed {
		return 0, 0, now
	}
	from = l.settled.Add(settleFor)
	if w := now.Add(-min(l.cfg.Window, time.Duration(len(l.seconds))*time.Second)); w.After(from) {
		from = w
	}
	if now.Sub(from) < haltSpan {
		return 0, 0, from
	}
	for sec := now.Unix(); sec > from.Unix(); sec-- {
		if b := l.seconds[int(sec%int64(len(l.seconds)))]; b.sec == sec {
			n, k = n+b.attempts, k+b.throttled
		}
	}
	return n, k, from
}

// haltSamples, in MinSamples, is how many answers haltingLocked needs.
const haltSamples = 5

// haltSpan is the least span of the rolling share (rollingLocked). A
// tenth of a second of it is one round trip, not a rolling share: a lone
// processor on an origin of 500/s at 50 ms, a cut 6.1 s into its life
// (settleFor after slow start ended at 1 s), read the first round trip's
// answers after that cut, nothing but 429s, as its rolling share, and
// opened the breaker on devices' 429s in 2 draws of 43.
const haltSpan = 2 * time.Second

// stormSpan is the least span stormyAllLocked looks back over.
const stormSpan = 10 * time.Second

// cleanSamples, in MinSamples, is how many answers a clean judgement,
// which ends a run of storms, is made on.
const cleanSamples = 3

// judgeMin is the least span of answers a cut is judged on.
const judgeMin = 250 * time.Millisecond

// backgroundLocked is the 429 share of the answers, over the last
// backgroundSpan, to sends made at or below the ceiling: a limit's own
// 429s end there, while devices throttled one by one (APNs,
// FCM) go on being throttled at any rate. Believed over backgroundMin
// answers at least, and up to maxBackground: a ceiling estimated above
// the limit (on what was left of a burst allowance) makes the limit's own
// 429s look safe, and a background learnt from them lifts the threshold
// past what the limit then throttles (the grid saw 20-30% a second, for 6
// s, with no cut, when it could reach 15%). The ledger mix is 5%.
func (l *lane) backgroundLocked(now time.Time) float64 {
	n, k := 0, 0
	for sec := now.Unix() - backgroundSpan; sec <= now.Unix(); sec++ {
		if b := l.seconds[int(sec%int64(len(l.seconds)))]; b.sec == sec {
			n, k = n+b.safe, k+b.safeThrottled
		}
	}
	if n < backgroundMin {
		return 0
	}
	return min(float64(k)/float64(n), maxBackground)
}

// cutThresholdLocked is the 429 share past which a settled lane cuts: the
// background plus CutRate.
func (l *lane) cutThresholdLocked(now time.Time) float64 {
	return l.backgroundLocked(now) + l.cfg.CutRate
}

const (
	backgroundSpan = 30 // seconds
	backgroundMin  = 100
	maxBackground  = 0.08
)

// cutLocked cuts the rate to CutFactor of acc, what the origin accepted
// per second, when that is lower than the rate (it is when the origin is
// the bound), and ends slow start.
func (l *lane) cutLocked(now time.Time, acc float64, storm bool) (took bool) {
	// What this processor sent: its rate, or more where tier 1 went
	// ahead of it.
	before := max(l.rate, l.grantedLocked(now))
	acc = l.readLocked(now, acc)
	next := l.rate
	if acc > 0 {
		next = min(next, acc)
	} else {
		next /= 2
	}
	if fair := l.fairLocked(now); fair > 0 {
		// Sharing the origin: nobody keeps more than an equal part.
		next = min(next, fair)
	}
	l.rate = max(next*l.cfg.CutFactor, minRate)
	// A cut on an origin that took clearly less than was sent proves the
	// sends of the last seconds over its limit, "safe" or not: their 429s
	// are the limit's, not background. One that took all but what devices
	// throttled one by one proves nothing of the kind: keeping that
	// evidence is what ends cuts on per-device 429s.
	// Nor does a storm's: its 429s, past HaltRate, are no devices'. Read
	// over the last seconds, what the origin took still holds what it took
	// before a limit fell; kept, that ceiling let the rate straight back up
	// to it after each pause (a limit of a twentieth of a second's burst
	// halved under a lone processor: a pause a second, 30% 429s).
	took = !storm && acc > 0 && acc >= (1-maxBackground)*before
	if !took {
		l.forgetBackgroundLocked(now)
	}
	// The ceiling is what the origin took, but never above what this
	// processor sent: an estimate fed by a burst
	// allowance would otherwise pull the rate back up past the limit.
	if acc <= 0 {
		acc = before
	}
	ceiling := max(min(acc, before), minRate)
	if took {
		// Nor does it show the ceiling too high, as far as CutFactor of it,
		// where the rate comes back to, stays under what the origin took:
		// lowered to it on every such cut, the ceiling spiralled down with
		// the rate (three processors sending to a limit of 500/s that also
		// throttled 5% of devices sent a fifth of it).
		ceiling = max(ceiling, min(l.ceiling, acc/l.cfg.CutFactor))
	}
	l.ceiling, l.probeFrom = ceiling, time.Time{}
	if l.slowStart {
		l.settled, l.cutsInRow = now, 0
	}
	l.slowStart = false
	// No more saved up; and what tier 1 overdrew is owed at the new rate
	// for a second at most (spareFor): a debt run up on a ceiling that
	// the cut shows too high would otherwise hold every tier back for
	// many seconds (a random 429 storm froze a lane for 8 s on 62 sends
	// at 6.3/s).
	l.tokens = max(min(l.tokens, 0), -l.rate*spareFor)
	l.restartLocked(now)
	return took
}

// reading is what the origin accepted per second at a cut.
type reading struct {
	at  time.Time
	acc float64
}

const (
	// readingsKept is how many cuts' readings the median is over.
	readingsKept = 5
	// readingsSpan is how long a reading counts.
	readingsSpan = time.Minute
	// overstated: a reading past this multiple of the median is held to
	// the median.
	overstated = 1.1
)

// readLocked keeps acc, what the origin accepted at a cut, among the last
// readings, and yields it; or, for a lane alone on its origin, the median
// of the last readingsKept within readingsSpan where acc is more than
// overstated times that. On the real clock answers come in clumps, and a
// reading can overstate the limit by half: a lone processor on 150 req/s
// at 150 ms read 106–307/s over 19 cuts. Cut to 90% of an overstated
// reading the rate stays over the limit, the ceiling taken from it too,
// and a second cut follows a second later, on 429s the first should have
// spared (`cmd/bench --scenario dx`: a median of 4.0% 429s over eight
// runs, 3.0% held to the median). A reading that is low is kept
// as it is: the limit may have fallen, and cutting too far only costs the
// climb back. One that rose with the limit follows a proof past probeCap
// times the median, which drops the readings before it. Beside peers a
// reading is this processor's part of the limit, which moves with what
// they send: no median of it is a reference (held to one, three
// processors beside devices' 429s lost a tenth of their goodput).
func (l *lane) readLocked(now time.Time, acc float64) float64 {
	if acc <= 0 {
		return acc
	}
	l.readings[l.readingN%readingsKept] = reading{now, acc}
	l.readingN++
	if m, n := l.medianReadingLocked(now); n == readingsKept && acc > overstated*m && l.sharingLocked(now) == 1 {
		return m
	}
	return acc
}

// medianReadingLocked is the median of the readings kept within
// readingsSpan, the lower middle one of an even count; 0 if none, and n
// how many there are.
func (l *lane) medianReadingLocked(now time.Time) (m float64, n int) {
	var xs [readingsKept]float64
	for _, r := range l.readings[:min(l.readingN, readingsKept)] {
		if now.Sub(r.at) <= readingsSpan {
			xs[n] = r.acc
			n++
		}
	}
	if n == 0 {
		return 0, 0
	}
	slices.Sort(xs[:n])
	return xs[(n-1)/2], n
}

// forgetBackgroundLocked drops the background evidence of the last three
// seconds: their 429s are a limit's.
func (l *lane) forgetBackgroundLocked(now time.Time) {
	for sec := now.Unix() - 2; sec <= now.Unix(); sec++ {
		if b := &l.seconds[int(sec%int64(len(l.seconds)))]; b.sec == sec {
			b.safe, b.safeThrottled = 0, 0
		}
	}
}

// refusalSpan, in ticks, is the least time between the two refusals
// acceptedLocked measures what the origin took between.
const refusalSpan = 5

// refusalAnswers is the least number of answers the origin must have
// accepted between those refusals for acceptedLocked to measure by them.
const refusalAnswers = 30

// minRate is the lowest rate: one send in two seconds.
const minRate = 0.5

// restartLocked starts a new period of judgement.
func (l *lane) restartLocked(now time.Time) {
	l.lastCut, l.judgeFrom, l.freshFrom = now, now, time.Time{}
	l.ahead, l.paced = answers{}, answers{}
	l.raisedAt, l.raisedFrom = now, l.rate
	for i := range l.ticks {
		t := &l.ticks[i]
		t.freshN, t.freshThrottled, t.freshFailed = 0, 0, 0
	}
}

// openLocked opens the breaker for OpenFor.
func (l *lane) openLocked(p *Pacer, now time.Time, share float64) {
	l.breaker = Open
	l.openUntil = now.Add(l.cfg.OpenFor)
	l.restartLocked(now)
	l.event(p, Event{At: now, Kind: Open, Rate: share, Until: l.openUntil})
	l.signalLocked(p, now, SignalOpen, l.openUntil)
}

// apply takes a peer's signal (Pacer.Apply).
func (l *lane) apply(p *Pacer, s Signal, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastUsed = now
	if l.peers == nil {
		l.peers = make(map[string]peer)
	}
	if s.Rate > 0 && now.Sub(s.At) <= peerFresh {
		l.peers[s.From] = peer{rate: s.Rate, at: s.At, answers: s.Answers, throttled: s.Throttled}
	}
	switch s.Kind {
	case SignalRate:
		if l.slowStart && s.Rate > 0 {
			// The others have found the origin's limit: take an equal
			// part of it rather than probe into it from nothing.
			// Slow start ends here as on a cut of its own: the rolling
			// share and the storms leave out its answers and settleFor
			// after them. Left unset, the rolling share counted slow
			// start's refused first burst of tier 1, and three
			// processors sharing 20/s opened the breaker on it.
			l.slowStart = false
			l.settled, l.cutsInRow = now, 0
			l.rate = s.Rate
			l.tokens = min(l.tokens, 1)
			l.restartLocked(now)
			l.event(p, Event{At: now, Kind: "peer"})
		}
	case SignalCut, SignalPause:
		l.storms = max(l.storms, s.Storms)
		// A peer cuts on a limit (it signals no cut on an origin that took
		// all but a background's share) or pauses on a storm: the 429s
		// this lane saw meanwhile, at or below its own ceiling, may be
		// that limit's, overrun by the peer's probe. Learnt as background
		// they lifted the threshold: three processors sharing 100/s at
		// 5 ms learnt up to 7% and held 5.2% 429s.
		l.forgetBackgroundLocked(now)
		switch {
		case now.Sub(l.lastCut) < l.holdAfterCut():
		case l.peerShowsLocked(s, now):
			l.cutLocked(now, l.acceptedLocked(now), s.Kind == SignalPause)
			l.event(p, Event{At: now, Kind: "cut", Peer: true})
		case l.easeLocked(now):
			l.event(p, Event{At: now, Kind: "cut", Peer: true})
		}
		if s.Kind == SignalPause && s.Until.After(l.paused) {
			l.pauseLocked(now, s.Until)
			// The answers so far are the storm's the pause answers, as
			// on a pause of this lane's own: judged after it, a peer
			// paused for 5 s 11 ms after its own cut read their 23%
			// 429s against what it accepted over the pause (12/s) and
			// cut to a hundredth of the limit.
			l.restartLocked(now)
			l.event(p, Event{At: now, Kind: "pause", Until: l.paused, Peer: true})
		}
	case SignalOpen:
		if l.breaker == Closed && s.Until.After(now) {
			l.breaker = Open
			l.openUntil = s.Until
			l.restartLocked(now)
			l.event(p, Event{At: now, Kind: Open, Until: s.Until, Peer: true})
		}
	}
	l.wakeLocked(p, now)
}

// peerShowsLocked tells whether a peer's cut shows a limit here too: a
// pause always does, and so does a cut whose evidence is not known, that
// was judged on strongSamples answers or more, or that comes in slow
// start; otherwise the answers it was judged on, pooled with this lane's
// own since its last change, must show a 429 share past the threshold. A
// limit's 429s reach every processor sending over it; one processor's
// false cut on devices' 429s, judged on a few sends a second, is answered
// by the others' clean answers. Taken in full by all, such cuts came
// faster than the rates recovered from them, and lowered every
// processor's ceiling: three sharing 100/s spiralled down to a quarter of
// it. A cut on many answers is not pooled: three processors sharing
// 500/s, the first to see the limit pooled with two that had not yet,
// read 5.3% 429s (median of five draws) and once opened the breaker.
func (l *lane) peerShowsLocked(s Signal, now time.Time) bool {
	if s.Kind != SignalCut || s.Judged == 0 || s.Judged >= strongSamples*l.cfg.MinSamples || l.slowStart {
		return true
	}
	own := l.freshLocked(now, l.cfg.MinSamples)
	n, k := s.Judged+own.n, s.JudgedThrottled+own.throttled
	return aboveZ(k, n, l.cutThresholdLocked(now), l.z)
}

// strongSamples, in MinSamples: a peer's cut judged on this many answers
// stands on its own (peerShowsLocked).
const strongSamples = 5

// easeLocked answers a peer's cut that shows no limit here: a rate that
// probed past CutFactor of the ceiling steps back to it, where it was
// safe, in case the peer saw the limit first; the ceiling and the
// background evidence stay. It reports whether the rate changed.
func (l *lane) easeLocked(now time.Time) bool {
	safe := max(l.cfg.CutFactor*l.ceiling, minRate)
	if l.ceiling <= 0 || l.rate <= safe {
		return false
	}
	l.rate = safe
	l.tokens = min(l.tokens, 1)
	l.restartLocked(now)
	return true
}

// signalLocked tells the pacer's peers of a change (WithSignals).
func (l *lane) signalLocked(p *Pacer, now time.Time, kind string, until time.Time) {
	p.signal(l.signalOf(now, kind, until))
}

// signalCutLocked tells the peers of a cut, with the answers it was
// judged on.
func (l *lane) signalCutLocked(p *Pacer, now time.Time, f fresh) {
	s := l.signalOf(now, SignalCut, time.Time{})
	s.Judged, s.JudgedThrottled = f.n, f.throttled
	p.signal(s)
}

func (l *lane) signalOf(now time.Time, kind string, until time.Time) Signal {
	l.reported = now
	n, k, _ := l.rollingLocked(now)
	return Signal{Origin: l.origin, At: now, Kind: kind, Rate: l.rate, Accepted: l.acceptedLocked(now), Until: until, Storms: l.storms, Answers: n, Throttled: k}
}

// event reports e for this lane, with the lane's figures after it.
func (l *lane) event(p *Pacer, e Event) {
	e.Origin, e.Limit, e.Estimate = l.origin, l.limitInt(), l.rate
	p.observe(e)
}

// wakeLocked hands free slots to waiters. When the origin is halted every
// waiter goes back to the ladder; when it is paused, all but those that
// wait it out (heldToLocked).
func (l *lane) wakeLocked(p *Pacer, now time.Time) {
	if l.breaker != Closed {
		for l.waiting > 0 {
			w := l.evictLocked(-1)
			w.ch <- grant{until: l.openUntil}
		}
		return
	}
	if now.Before(l.paused) {
		// Those that wait out the pause stay (as in admit); the others
		// go back to the ladder rather than block their callers for it.
		keep := l.heldToLocked(now)
		for {
			w := l.evictLocked(keep)
			if w == nil {
				break
			}
			w.ch <- grant{until: l.paused}
		}
		l.armLocked(now)
		return
	}
	for l.waiting > 0 {
		w := l.pickLocked(now)
		if w == nil {
			break
		}
		if !l.unheldLocked(w.req.Tier.Index(), now) {
			l.tokens--
		}
		w.ch <- grant{slot: l.grantLocked(p, w.req, now)}
	}
	l.armLocked(now)
}

// aboveZ tells whether the share k/n is above p with the confidence of the
// one-sided quantile z (Wilson score); z 0 compares the plain share.
func aboveZ(k, n int, p, z float64) bool {
	if n == 0 {
		return false
	}
	ph := float64(k) / float64(n)
	if z == 0 {
		return ph > p
	}
	nf := float64(n)
	lower := (ph + z*z/(2*nf) - z*math.Sqrt(ph*(1-ph)/nf+z*z/(4*nf*nf))) / (1 + z*z/nf)
	return lower > p
}

// idle reports when the lane was last used and whether nothing of it is in
// force any more: it may be forgotten.
func (l *lane) idle(now time.Time) (lastUsed time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok = l.inFlight == 0 && l.waiting == 0 && l.armed.IsZero() && !now.Before(l.paused) && l.breaker == Closed
	return l.lastUsed, ok
}

func (l *lane) state(now time.Time) LaneState {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := now.Add(-l.cfg.Window).Unix() + 1
	n, t := 0, 0
	for _, b := range l.seconds {
		if b.sec >= from && b.sec <= now.Unix() {
			n, t = n+b.attempts, t+b.throttled
		}
	}
	rate := 0.0
	if n > 0 {
		rate = float64(t) / float64(n)
	}
	br := l.breaker
	if br == Open && !now.Before(l.openUntil) {
		br = HalfOpen
	}
	st := LaneState{Origin: l.origin, Limit: l.limitInt(), InFlight: l.inFlight, Waiting: l.waiting, Rate: l.rate, SlowStart: l.slowStart,
		Rate429: rate, Background: l.backgroundLocked(now), Ceiling: l.ceiling, Breaker: br, PausedUntil: l.paused}
	for pr := range l.freshPeersLocked(now) {
		st.PeerRate += pr.rate
		st.Peers++
	}
	return st
}

// laterOf is the later of a and b.
func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
