package pacing

import (
	"context"
	"math"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Request asks for a slot to send one notification.
type Request struct {
	Origin string     // push service origin: scheme://host[:port]
	Sub    string     // subscription key (endpoint hash), never the URL
	Tier   tiers.Tier // priority
	Retry  bool       // a send after an earlier attempt
}

// Breaker states.
const (
	Closed   = "closed"
	Open     = "open"
	HalfOpen = "half-open"
)

// LaneState is a snapshot of one origin's pacing.
type LaneState struct {
	Origin      string
	Limit       int
	InFlight    int
	Waiting     int
	Rate429     float64 // over the rolling window
	Breaker     string
	PausedUntil time.Time
}

// Event is a change of an origin's pacing, for logs, metrics and tests.
type Event struct {
	At     time.Time
	Origin string
	Kind   string // "cut", "raise", "open", "half-open", "close", "pause"
	Limit  int
	Rate   float64 // the 429 (or error) share that caused it
	Until  time.Time
}

// Pacer hands out send slots per push service origin.
type Pacer struct {
	cfg      Config
	now      func() time.Time
	observe  func(Event)
	mu       sync.Mutex
	lanes    map[string]*lane
	subs     *lru.Cache[string, time.Time]
	closed   bool
	stopping chan struct{}
}

// Option sets an optional dependency of a Pacer.
type Option func(*Pacer)

// WithClock sets the clock (tests); default time.Now.
func WithClock(now func() time.Time) Option { return func(p *Pacer) { p.now = now } }

// WithObserver receives every pacing Event. It must not block.
func WithObserver(fn func(Event)) Option { return func(p *Pacer) { p.observe = fn } }

// New returns a Pacer.
func New(cfg Config, opts ...Option) (*Pacer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subs, err := lru.New[string, time.Time](cfg.SubPauses)
	if err != nil {
		return nil, err
	}
	p := &Pacer{cfg: cfg, now: time.Now, observe: func(Event) {}, lanes: make(map[string]*lane), subs: subs, stopping: make(chan struct{})}
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// Slot is a granted send. Done must be called exactly once with the result.
type Slot struct {
	p       *Pacer
	l       *lane
	req     Request
	probe   bool
	granted time.Time
}

// Acquire waits for a slot for req. It returns nil and a not-before time
// (zero when there is no particular floor) when the request must instead
// be deferred along the retry ladder without spending an attempt: the
// breaker is open, the origin or subscription is paused, the origin's
// queue is full, or the pacer is closing.
func (p *Pacer) Acquire(ctx context.Context, req Request) (*Slot, time.Time) {
	if !p.cfg.Enabled {
		return &Slot{p: p, req: req}, time.Time{}
	}
	now := p.now()
	if until, ok := p.subs.Get(req.Sub); ok {
		if now.Before(until) {
			return nil, until
		}
		p.subs.Remove(req.Sub)
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, time.Time{}
	}
	l := p.lanes[req.Origin]
	if l == nil {
		l = newLane(req.Origin, &p.cfg, now)
		p.lanes[req.Origin] = l
	}
	p.mu.Unlock()

	w, slot, until := l.admit(p, req, now)
	if w == nil {
		return slot, until
	}
	select {
	case g := <-w.ch:
		return g.slot, g.until
	case <-ctx.Done():
	case <-p.stopping:
	}
	// Leave the queue; a grant that raced in is handed back.
	if l.cancel(w) {
		return nil, time.Time{}
	}
	g := <-w.ch
	if g.slot != nil {
		g.slot.Done(topology.Result{Class: topology.ClassDeferred})
	}
	return nil, time.Time{}
}

// Done reports the result of the send and frees the slot.
func (s *Slot) Done(r topology.Result) {
	if s.l == nil {
		return
	}
	now := s.p.now()
	throttled := r.Status == 429 || (r.Status == 406 && r.Class == topology.ClassRetryable)
	if throttled {
		pause := max(r.RetryAfter, s.p.cfg.DefaultPause)
		s.p.subs.Add(s.req.Sub, now.Add(pause))
	}
	s.l.done(s, r, throttled, now)
}

// Close defers every waiting request and every later one: shutdown hands
// work back to the ladder instead of sending it.
func (p *Pacer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.stopping)
	}
}

// Lanes returns a snapshot of every origin's pacing.
func (p *Pacer) Lanes() []LaneState {
	p.mu.Lock()
	ls := make([]*lane, 0, len(p.lanes))
	for _, l := range p.lanes {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	now := p.now()
	out := make([]LaneState, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.state(now))
	}
	return out
}

// SubscriptionPaused reports whether a 429 on sub still pauses it.
func (p *Pacer) SubscriptionPaused(sub string) bool {
	until, ok := p.subs.Peek(sub)
	return ok && p.now().Before(until)
}

// ---- lane: one origin ----

type grant struct {
	slot  *Slot
	until time.Time
}

type waiter struct {
	ch    chan grant
	req   Request
	seq   uint64
	index int // position bookkeeping is by scan; queues are short
}

type bucket struct {
	sec                         int64
	attempts, throttled, failed int
}

type lane struct {
	origin string
	cfg    *Config

	mu        sync.Mutex
	limit     float64
	inFlight  int
	retries   int             // retries in flight
	probes    int             // half-open probes in flight
	queues    [3][2][]*waiter // tier × {first, retry}
	waiting   int
	seq       uint64
	wrr       [3]int
	buckets   []bucket
	breaker   string
	openUntil time.Time
	paused    time.Time
	recent    []throttle
	lastCut   time.Time     // decisions look at attempts since then
	okSince   int           // deliveries since lastCut
	latSince  time.Duration // their summed latency
	lastRaise time.Time
	calmSince time.Time
}

type throttle struct {
	at  time.Time
	sub string
}

func newLane(origin string, cfg *Config, now time.Time) *lane {
	n := max(int(cfg.Window/time.Second), 1)
	return &lane{origin: origin, cfg: cfg, limit: float64(cfg.MaxLimit), buckets: make([]bucket, n), breaker: Closed, lastCut: now, lastRaise: now}
}

func tierIndex(t tiers.Tier) int {
	if t >= tiers.Tier1 && t <= tiers.Tier3 {
		return int(t) - 1
	}
	return 2
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
	if now.Before(l.paused) {
		return nil, nil, l.paused
	}
	switch l.breaker {
	case Open:
		if now.Before(l.openUntil) {
			return nil, nil, l.openUntil
		}
		l.breaker = HalfOpen
		p.observe(Event{At: now, Origin: l.origin, Kind: HalfOpen, Limit: l.limitInt()})
		fallthrough
	case HalfOpen:
		if l.probes >= l.cfg.Probes {
			return nil, nil, now.Add(l.cfg.OpenFor / 2)
		}
		l.probes++
		l.inFlight++
		return nil, &Slot{p: p, l: l, req: req, probe: true, granted: now}, time.Time{}
	}
	if l.waiting == 0 && l.inFlight < l.limitInt() && l.retryAllowed(req.Retry, false) {
		return nil, l.grantLocked(p, req, now), time.Time{}
	}
	ti := tierIndex(req.Tier)
	if l.waiting >= l.cfg.QueueLimit {
		// Full: the lowest tier waiting yields, if it is lower than ours.
		victim := l.evictLocked(ti)
		if victim == nil {
			return nil, nil, time.Time{}
		}
		victim.ch <- grant{}
	}
	l.seq++
	w := &waiter{ch: make(chan grant, 1), req: req, seq: l.seq}
	q := &l.queues[ti][boolIndex(req.Retry)]
	*q = append(*q, w)
	l.waiting++
	return w, nil, time.Time{}
}

func (l *lane) limitInt() int { return max(int(l.limit), l.cfg.MinLimit) }

// retryAllowed applies the retry budget: retries may hold at most
// RetryShare of the slots while first attempts wait.
func (l *lane) retryAllowed(retry, firstsWaiting bool) bool {
	if !retry || !firstsWaiting {
		return true
	}
	return float64(l.retries) < math.Max(1, l.cfg.RetryShare*l.limit)
}

func (l *lane) grantLocked(p *Pacer, req Request, now time.Time) *Slot {
	l.inFlight++
	if req.Retry {
		l.retries++
	}
	return &Slot{p: p, l: l, req: req, granted: now}
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
	q := &l.queues[tierIndex(w.req.Tier)][boolIndex(w.req.Retry)]
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
// before retries when the retry budget is spent, else the oldest.
func (l *lane) pickLocked() *waiter {
	firsts := false
	for t := range 3 {
		firsts = firsts || len(l.queues[t][0]) > 0
	}
	retryOK := l.retryAllowed(true, firsts)
	eligible := func(t int) bool { return len(l.queues[t][0]) > 0 || (retryOK && len(l.queues[t][1]) > 0) }
	best, total := -1, 0
	for t := range 3 {
		if !eligible(t) {
			continue
		}
		l.wrr[t] += l.cfg.Weights[t]
		total += l.cfg.Weights[t]
		if best < 0 || l.wrr[t] > l.wrr[best] {
			best = t
		}
	}
	if best < 0 {
		return nil
	}
	l.wrr[best] -= total
	f, r := l.queues[best][0], l.queues[best][1]
	useRetry := retryOK && len(r) > 0 && (len(f) == 0 || r[0].seq < f[0].seq)
	q := &l.queues[best][boolIndex(useRetry)]
	w := (*q)[0]
	(*q)[0] = nil
	*q = (*q)[1:]
	l.waiting--
	return w
}

// done records a result, adapts the limit and breaker, and hands freed
// slots to waiters.
func (l *lane) done(s *Slot, r topology.Result, throttled bool, now time.Time) {
	p := s.p
	failed := !throttled && r.Class == topology.ClassRetryable
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight--
	if s.req.Retry && !s.probe {
		l.retries--
	}
	if r.Class == topology.ClassDeferred {
		l.wakeLocked(p, now)
		return // no send was made
	}
	b := l.bucketLocked(now)
	b.attempts++
	if throttled {
		b.throttled++
		l.senderWideLocked(p, s.req.Sub, r.RetryAfter, now)
	}
	if failed {
		b.failed++
	}
	if r.Class == topology.ClassDelivered {
		l.okSince++
		l.latSince += now.Sub(s.granted)
	}
	if s.probe {
		l.probes--
		if throttled || failed {
			l.openLocked(p, now, 1)
		} else if l.breaker == HalfOpen {
			l.breaker = Closed
			l.restartLocked(now)
			p.observe(Event{At: now, Origin: l.origin, Kind: Closed, Limit: l.limitInt()})
		}
		l.wakeLocked(p, now)
		return
	}
	if l.breaker == Closed {
		l.adaptLocked(p, now)
	}
	l.wakeLocked(p, now)
}

// wakeLocked hands free slots to waiters, or, when the origin is halted or
// paused, sends every waiter back to the ladder.
func (l *lane) wakeLocked(p *Pacer, now time.Time) {
	if l.breaker != Closed || now.Before(l.paused) {
		until := l.paused
		if l.breaker != Closed {
			until = l.openUntil
		}
		for l.waiting > 0 {
			w := l.evictLocked(-1)
			w.ch <- grant{until: until}
		}
		return
	}
	for l.waiting > 0 && l.inFlight < l.limitInt() {
		w := l.pickLocked()
		if w == nil {
			return
		}
		w.ch <- grant{slot: l.grantLocked(p, w.req, now)}
	}
}

func (l *lane) bucketLocked(now time.Time) *bucket {
	sec := now.Unix()
	b := &l.buckets[int(sec%int64(len(l.buckets)))]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	return b
}

// sumLocked adds the buckets of the window that started at or after since.
func (l *lane) sumLocked(now, since time.Time) (attempts, throttled, failed int) {
	from := max(since.Unix(), now.Add(-l.cfg.Window).Unix()+1)
	for _, b := range l.buckets {
		if b.sec >= from && b.sec <= now.Unix() {
			attempts += b.attempts
			throttled += b.throttled
			failed += b.failed
		}
	}
	return
}

// adaptLocked applies the pacing rules after a send.
func (l *lane) adaptLocked(p *Pacer, now time.Time) {
	// Decisions to cut or halt look only at attempts since the last one,
	// so the window's memory of a storm already answered does not cut
	// again and again.
	n, t, f := l.sumLocked(now, l.lastCut)
	if n >= l.cfg.MinSamples {
		r429, rErr := float64(t)/float64(n), float64(f)/float64(n)
		switch {
		case r429 > l.cfg.HaltRate || rErr > l.cfg.ErrorHaltRate:
			l.openLocked(p, now, max(r429, rErr))
			return
		case r429 > l.cfg.CutRate && now.Sub(l.lastCut) >= l.cfg.CutCooldown:
			l.cutLocked(now)
			p.observe(Event{At: now, Origin: l.origin, Kind: "cut", Limit: l.limitInt(), Rate: r429})
			return
		}
	}
	n, t, _ = l.sumLocked(now, time.Time{})
	if n == 0 || float64(t)/float64(n) >= l.cfg.CalmRate {
		l.calmSince = time.Time{}
		return
	}
	if l.calmSince.IsZero() {
		l.calmSince = now
	}
	if now.Sub(l.calmSince) >= l.cfg.CalmFor && now.Sub(l.lastRaise) >= l.cfg.RaiseEvery && l.limit < float64(l.cfg.MaxLimit) {
		l.limit = min(max(l.limit*l.cfg.RaiseFactor, l.limit+1), float64(l.cfg.MaxLimit))
		l.lastRaise = now
		p.observe(Event{At: now, Origin: l.origin, Kind: "raise", Limit: l.limitInt()})
	}
}

// cutLocked cuts the limit by CutFactor — further, to what the origin
// sustained (Little's law: deliveries per second × their mean latency,
// with 50% headroom), when that is lower: a limit far above what the
// service takes would otherwise need many cuts, each a burst of 429s.
func (l *lane) cutLocked(now time.Time) {
	next := l.limit * l.cfg.CutFactor
	if el := now.Sub(l.lastCut).Seconds(); l.okSince >= 10 && el > 0 {
		sustained := float64(l.okSince) / el * (l.latSince / time.Duration(l.okSince)).Seconds() * 1.5
		next = min(next, math.Ceil(sustained))
	}
	l.limit = max(next, float64(l.cfg.MinLimit))
	l.restartLocked(now)
}

// restartLocked starts a new period of judgement.
func (l *lane) restartLocked(now time.Time) {
	l.lastCut, l.calmSince = now, time.Time{}
	l.okSince, l.latSince = 0, 0
}

// openLocked halts the origin for OpenFor and cuts its limit.
func (l *lane) openLocked(p *Pacer, now time.Time, rate float64) {
	l.breaker = Open
	l.openUntil = now.Add(l.cfg.OpenFor)
	l.cutLocked(now)
	p.observe(Event{At: now, Origin: l.origin, Kind: Open, Limit: l.limitInt(), Rate: rate, Until: l.openUntil})
}

// senderWideLocked pauses the whole origin when many distinct
// subscriptions were throttled recently: the limit is the sender's, not
// one subscription's.
func (l *lane) senderWideLocked(p *Pacer, sub string, retryAfter time.Duration, now time.Time) {
	cut := now.Add(-l.cfg.SenderWideWindow)
	i := 0
	for i < len(l.recent) && l.recent[i].at.Before(cut) {
		i++
	}
	l.recent = append(l.recent[i:], throttle{at: now, sub: sub})
	if len(l.recent) > 4*l.cfg.SenderWideSubs {
		l.recent = l.recent[len(l.recent)-4*l.cfg.SenderWideSubs:]
	}
	distinct := make(map[string]struct{}, l.cfg.SenderWideSubs)
	for _, t := range l.recent {
		distinct[t.sub] = struct{}{}
	}
	if len(distinct) < l.cfg.SenderWideSubs {
		return
	}
	until := now.Add(max(retryAfter, l.cfg.DefaultPause))
	if until.After(l.paused) {
		l.paused = until
		p.observe(Event{At: now, Origin: l.origin, Kind: "pause", Limit: l.limitInt(), Until: until})
	}
}

func (l *lane) state(now time.Time) LaneState {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, t, _ := l.sumLocked(now, time.Time{})
	rate := 0.0
	if n > 0 {
		rate = float64(t) / float64(n)
	}
	br := l.breaker
	if br == Open && !now.Before(l.openUntil) {
		br = HalfOpen
	}
	return LaneState{Origin: l.origin, Limit: l.limitInt(), InFlight: l.inFlight, Waiting: l.waiting, Rate429: rate, Breaker: br, PausedUntil: l.paused}
}
