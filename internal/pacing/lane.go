package pacing

import (
	"sync"
	"time"

	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
)

// A lane paces one origin. It holds no law of its own: a send may go when
// the breaker allows it, the concurrency law has room for it and the rate
// law's bucket has a token for this processor's part of E; otherwise it
// waits in the tiers' queue, holding its record's window slot, so a busy
// origin slows the reading of its records instead of sending them round
// the ladder. It goes back to the ladder only when the origin is halted
// for longer than its Hold, or holds its share of the waiting of the
// request's class (tier 1, or the lower tiers) already. Every method
// decides under the lane's lock and returns what is to be done (grants,
// events, a signal) for the Pacer to do once the lock is released.
type lane struct {
	origin string
	cfg    *Config
	p      *Pacer

	mu    sync.Mutex
	rate  rateLaw
	flow  flow
	br    breaker
	q     queue
	meter meter
	peers peers
	// backlog: a request waited since the last report (this processor
	// has more to send than it sends); wake: when the last send held back
	// can go, if nothing else frees it.
	backlog    bool
	wake       time.Time
	retryAfter time.Duration // of the last 429
	queueSaid  bool          // the others were told the origin queues
	used       time.Time     // the last request or answer
	reported   time.Time
	timer      *time.Timer
}

// effects is what a lane decided, to be done after its lock is released.
type effects struct {
	grants []granted
	events []Event
	signal *Signal
}

type granted struct {
	w *waiter
	g grant
}

func newLane(origin string, p *Pacer, now time.Time) *lane {
	l := &lane{origin: origin, cfg: &p.cfg, p: p, rate: newRateLaw(&p.cfg, now), flow: newFlow(&p.cfg, now), br: breaker{state: Closed}, peers: peers{}, used: now}
	l.q.turns = tiers.NewRoundRobin(p.cfg.Weights)
	return l
}

// estimate is E and this processor's part of it.
func (l *lane) estimate(now time.Time) (e, part float64) {
	_, acc, _ := l.meter.rates(now)
	_, peerAcc := l.peers.rates(now)
	e = l.rate.estimate(now, acc+peerAcc)
	part, _ = l.peers.part(now, e)
	return e, part
}

// admit grants req a slot, queues it (returning its waiter) or defers it
// (returning neither, with the time it may come back, if one is known).
// share is how many may wait for the origin (Pacer.laneShare).
func (l *lane) admit(req Request, now time.Time, share int) (*Slot, *waiter, time.Time, effects) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var fx effects
	l.used = now
	ti := req.Tier.Index()
	if l.q.ahead(ti) == 0 {
		if s := l.tryGrant(now, &fx); s != nil {
			s.req = req
			return s, nil, time.Time{}, fx
		}
	}
	w := &waiter{ch: make(chan grant, 1), req: req}
	if l.paused(now) > w.hold() {
		return nil, nil, l.br.until, fx // the halt's end is the floor
	}
	if l.q.class(ti) >= share {
		return nil, nil, now.Add(l.wait(ti, now)), fx
	}
	l.q.push(w)
	l.backlog = true
	l.arm(now)
	return nil, w, time.Time{}, fx
}

// wait is how long a request of tier index ti can expect to wait for a
// slot.
func (l *lane) wait(ti int, now time.Time) time.Duration {
	return l.paused(now) + queued(l.q.ahead(ti)+1, l.throughput(now))
}

// paused is how long the breaker stays open.
func (l *lane) paused(now time.Time) time.Duration {
	if l.br.state == Open {
		return max(0, l.br.until.Sub(now))
	}
	return 0
}

// throughput is the sends per second the lane can grant: its part of E,
// and what its concurrency carries at the base round trip.
func (l *lane) throughput(now time.Time) float64 {
	_, part := l.estimate(now)
	if base := l.flow.baseRTT(); base > 0 {
		part = min(part, float64(l.flow.limit)/base.Seconds())
	}
	return part
}

// shed sends the waiters that would rather not wait out the halt back to
// the ladder, until its end.
func (l *lane) shed(now time.Time, fx *effects) {
	fx.grants = append(fx.grants, l.q.shed(l.paused(now), now)...)
}

// tryGrant makes a slot if the breaker, the concurrency law and the rate
// law all allow a send now; the caller names its request.
func (l *lane) tryGrant(now time.Time, fx *effects) *Slot {
	ok, probe, until, moved := l.br.allow(l.cfg, now)
	if moved {
		fx.events = append(fx.events, Event{At: now, Origin: l.origin, Kind: HalfOpen, Limit: l.flow.limit})
	}
	l.wake = until // zero while probes are out: their answers free it
	if !ok || l.flow.full() {
		return nil
	}
	e, part := l.estimate(now)
	if took, wait := l.rate.take(now, part); !took {
		l.wake = now.Add(wait)
		return nil
	}
	if probe {
		l.br.probes++
	}
	l.meter.tick(now).sent++
	return &Slot{p: l.p, l: l, granted: now, seq: l.flow.grant(), below: l.rate.below(e), probe: probe}
}

// pump grants waiters while sends may go, and arms the timer for when
// the next may.
func (l *lane) pump(now time.Time, fx *effects) {
	for l.q.n > 0 {
		s := l.tryGrant(now, fx)
		if s == nil {
			break
		}
		w := l.q.pop()
		s.req = w.req
		fx.grants = append(fx.grants, granted{w, grant{slot: s}})
	}
	l.arm(now)
}

// arm sets the timer for when waiters can next move on their own: the
// breaker is due or a token is there. An answer moves them otherwise.
func (l *lane) arm(now time.Time) {
	if l.q.n > 0 && !l.wake.IsZero() {
		l.p.timer(l, max(0, l.wake.Sub(now)))
	}
}

// timer is the Pacer's default timer: one per lane, re-armed under the
// lane's lock.
func timer(l *lane, d time.Duration) {
	if l.timer == nil {
		l.timer = time.AfterFunc(d, func() { l.p.wake(l) })
		return
	}
	l.timer.Reset(d)
}

// wake is the timer's: waiters that can go now do.
func (l *lane) woken(now time.Time) effects {
	l.mu.Lock()
	defer l.mu.Unlock()
	var fx effects
	l.pump(now, &fx)
	return fx
}

// done takes the answer to s.
func (l *lane) done(s *Slot, r push.Result, now time.Time) effects {
	l.mu.Lock()
	defer l.mu.Unlock()
	var fx effects
	l.used = now
	if r.Class == push.Deferred {
		// Handed back unsent: it says nothing of the origin.
		l.flow.release()
		if s.probe {
			l.br.probes--
		}
		l.pump(now, &fx)
		return fx
	}
	throttled := r.Status == 429 || (r.Status == 406 && r.Class == push.Retryable)
	failed := r.Class == push.Retryable && !throttled
	t := l.meter.tick(now)
	switch {
	case throttled:
		t.throttled++
		if r.RetryAfter > 0 {
			l.retryAfter = r.RetryAfter
		}
	case !failed:
		t.accepted++
	}
	if c := l.flow.answer(l.cfg, now, s.seq, now.Sub(s.granted), !throttled && !failed); c > 0 {
		fx.events = append(fx.events, Event{At: now, Origin: l.origin, Kind: "queue", Limit: c})
		if l.flow.rounds == 1 || !l.queueSaid {
			l.queueSaid = true
			l.signal(SignalQueue, now, &fx)
		}
	}
	if st := l.br.answer(l.cfg, now, s.probe, failed, throttled, s.req.Failing); st != "" {
		l.changed(st, now, false, &fx)
	}
	// Half-open, the breaker judges the probes; the rate law waits.
	sent := func() float64 { r, _, _ := l.meter.rates(now); return r }
	if !s.probe && l.rate.observe(s.granted, s.below, throttled, sent) {
		l.cut(now, &fx)
	}
	l.report(now, &fx)
	l.pump(now, &fx)
	return fx
}

// accepted is what the group got accepted over the last second: this
// processor's and what the others last reported. What an origin gives in
// the second after a halt is what it saved during it, not its rate: read
// then, it is no more than the last cut read.
func (l *lane) accepted(now time.Time) float64 {
	_, acc, _ := l.meter.rates(now)
	_, peerAcc := l.peers.rates(now)
	if l.rate.known && now.Before(l.meter.resumed().Add(time.Second)) {
		return min(acc+peerAcc, l.rate.w)
	}
	return acc + peerAcc
}

// cut starts a new epoch of the rate law on what the group got accepted,
// and halts the origin when the 429s the cut was judged on are past
// HaltRate.
func (l *lane) cut(now time.Time, fx *effects) {
	k, n := l.rate.k, l.rate.n
	l.rate.cut(now, l.accepted(now))
	e, _ := l.estimate(now)
	fx.events = append(fx.events, Event{At: now, Origin: l.origin, Kind: "cut", Limit: l.flow.limit, Rate: float64(k) / float64(n), Estimate: e, Accepted: l.rate.w})
	if n >= l.cfg.MinSamples && lowerBound(k, n) > l.cfg.HaltRate {
		l.br.open(now, max(l.cfg.DefaultPause, l.retryAfter))
		l.changed(Open, now, false, fx)
	}
	l.signal(SignalCut, now, fx)
}

// changed reports a move of the breaker; opening, it sends the waiters
// that would rather not wait it out back to the ladder.
func (l *lane) changed(state string, now time.Time, peer bool, fx *effects) {
	ev := Event{At: now, Origin: l.origin, Kind: state, Limit: l.flow.limit, Peer: peer}
	if state == Open {
		ev.Until = l.br.until
		l.meter.paused(now, l.br.until)
		l.shed(now, fx)
	}
	fx.events = append(fx.events, ev)
}

// report0 is a new processor's first report: that it is there.
func (l *lane) report0(now time.Time) effects {
	l.mu.Lock()
	defer l.mu.Unlock()
	var fx effects
	l.backlog = true
	l.signal(SignalRate, now, &fx)
	return fx
}

// report queues a signal of this processor's rates every peerEvery.
func (l *lane) report(now time.Time, fx *effects) {
	if now.Sub(l.reported) >= peerEvery && fx.signal == nil {
		l.signal(SignalRate, now, fx)
	}
}

func (l *lane) signal(kind string, now time.Time, fx *effects) {
	sent, acc, _ := l.meter.rates(now)
	s := &Signal{Origin: l.origin, At: now, Kind: kind, Rate: sent, Accepted: acc, Limited: l.backlog || l.q.n > 0}
	if l.rate.known {
		s.Ceiling, s.Epoch = l.rate.w, l.rate.t0
	}
	if l.br.state == Open {
		s.Until = l.br.until
	}
	l.reported, l.backlog, fx.signal = now, false, s
}

// apply takes another processor's signal.
func (l *lane) apply(s Signal, now time.Time) effects {
	l.mu.Lock()
	defer l.mu.Unlock()
	var fx effects
	switch s.Kind {
	case SignalLeave:
		delete(l.peers, s.From)
		l.pump(now, &fx)
		return fx
	case SignalQueue:
		// A word of a queue is the service's state then: a processor that
		// starts and reads an old one from the topic judges for itself.
		if now.Sub(s.At) <= peerFresh && l.flow.queued(l.cfg) {
			fx.events = append(fx.events, Event{At: now, Origin: l.origin, Kind: "queue", Limit: l.flow.limit, Peer: true})
		}
	}
	if now.Sub(s.At) <= peerFresh {
		l.peers[s.From] = peer{at: now, sent: s.Rate, accepted: s.Accepted, limited: s.Limited}
	}
	if l.rate.adopt(epoch{known: s.Ceiling > 0, w: s.Ceiling, t0: s.Epoch}) {
		e, _ := l.estimate(now)
		fx.events = append(fx.events, Event{At: now, Origin: l.origin, Kind: "peer", Limit: l.flow.limit, Estimate: e, Accepted: s.Ceiling, Peer: true})
	}
	if s.Until.After(now) && l.br.hold(now, s.Until) {
		l.changed(Open, now, true, &fx)
	}
	l.pump(now, &fx)
	return fx
}

// cancel takes w out of the queue; false when a grant got to it first.
func (l *lane) cancel(w *waiter) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.q.remove(w)
}

// idle tells whether the lane holds nothing worth keeping, and since when
// it was last used.
func (l *lane) idle(now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent, _ := l.peers.rates(now)
	quiet := l.flow.inFlight == 0 && l.q.n == 0 && sent == 0 && (l.br.state == Closed || now.After(l.br.until))
	return l.used, quiet
}

func (l *lane) state(now time.Time) LaneState {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, part := l.estimate(now)
	_, acc, thr := l.meter.rates(now)
	peerSent, _ := l.peers.rates(now)
	_, n := l.peers.part(now, e)
	s := LaneState{Origin: l.origin, Limit: l.flow.limit, InFlight: l.flow.inFlight, Waiting: l.q.n,
		PeerRate: peerSent, Peers: n - 1, SlowStart: l.flow.slowStart && !l.rate.known,
		Background: l.rate.b, Ceiling: l.rate.w, Base: l.flow.baseRTT(), Breaker: l.br.state}
	if l.rate.known {
		s.Rate, s.Estimate = part, e
	}
	if acc+thr > 0 {
		s.Rate429 = thr / (acc + thr)
	}
	if l.br.state == Open {
		s.PausedUntil = l.br.until
	}
	return s
}
