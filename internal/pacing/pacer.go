package pacing

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/tierpush/tierpush/tiers"
)

// Request asks for a slot to send one notification.
type Request struct {
	Origin string     // push service origin: scheme://host[:port]
	Sub    string     // subscription key (endpoint hash), never the URL
	Tier   tiers.Tier // priority
	Retry  bool       // a send after an earlier attempt
	// Failing: the notification's last attempt failed with a server or
	// transport error. Its failures say more about it than about the
	// origin, so they neither open the breaker nor keep it open: a few
	// notifications that always fail must spend their attempts and reach
	// the DLQ, not hold the origin halted and themselves on the ladder.
	Failing bool
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
	Kind   string // "cut", "hold", "raise", "open", "half-open", "closed", "pause", "evict"
	// ("hold": a cut or pause that changed nothing is not repeated)
	Limit int
	Rate  float64 // the 429 (or error) share that caused it
	Until time.Time
}

// Pacer hands out send slots per push service origin.
type Pacer struct {
	cfg      Config
	now      func() time.Time
	observe  func(Event)
	mu       sync.Mutex
	lanes    map[string]*lane
	swept    time.Time // when idle lanes were last evicted
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
		p.evictLocked(now)
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
		g.slot.Done(push.Result{Class: push.Deferred})
	}
	return nil, time.Time{}
}

// Any public host is a new origin, so lanes are evicted once idle: nothing
// in flight or waiting, no pause, no open breaker, no learnt rate cap in
// force, and unused for LaneIdle; at most once a minute, and at once while
// MaxLanes lanes exist (then the least recently used idle ones first, down
// to three quarters of it). An origin that comes back starts afresh.
const (
	MaxLanes = 4096
	LaneIdle = 10 * time.Minute
)

// evictLocked drops idle lanes (see MaxLanes). p.mu must be held; it takes
// each lane's mutex after it (the only order the two are taken in).
func (p *Pacer) evictLocked(now time.Time) {
	full := len(p.lanes) >= MaxLanes
	if !full && now.Sub(p.swept) < time.Minute {
		return
	}
	p.swept = now
	type idle struct {
		origin string
		used   time.Time
	}
	var cands []idle
	for origin, l := range p.lanes {
		if used, ok := l.idle(now); ok && (full || now.Sub(used) >= LaneIdle) {
			cands = append(cands, idle{origin, used})
		}
	}
	if full {
		slices.SortFunc(cands, func(a, b idle) int { return a.used.Compare(b.used) })
		cands = cands[:min(len(cands), len(p.lanes)-MaxLanes*3/4)]
	}
	for _, c := range cands {
		delete(p.lanes, c.origin)
		p.observe(Event{At: now, Origin: c.origin, Kind: "evict"})
	}
}

// Done reports the result of the send and frees the slot.
func (s *Slot) Done(r push.Result) {
	if s.l == nil {
		return
	}
	now := s.p.now()
	throttled := r.Status == 429 || (r.Status == 406 && r.Class == push.Retryable)
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
	ch  chan grant
	req Request
	seq uint64
	enq time.Time
}

type bucket struct {
	sec                             int64
	attempts, throttled, failed, ok int
	fresh                           tally // see judgeFrom
}

type tally struct{ attempts, throttled, failed int }

type lane struct {
	origin string
	cfg    *Config
	z      float64 // of cfg.Confidence
	zWide  float64 // the sender-wide rule's (Config.zWide)

	mu        sync.Mutex
	limit     float64
	inFlight  int
	retries   int             // retries in flight
	probes    int             // half-open probes in flight
	queues    [3][2][]*waiter // tier × {first, retry}
	waiting   int
	seq       uint64
	turns     tiers.RoundRobin // the tiers' turns (cfg.Weights)
	buckets   []bucket
	breaker   string
	openUntil time.Time
	paused    time.Time // until
	pausedAt  time.Time // when the last pause began
	recent    []throttle
	// rate caps the sends of tiers below tier 1 once the origin has
	// throttled the sender: what it was seen to sustain, less 5%, so tier 1
	// finds room without a 429. 0 = no cap.
	rate      float64
	rateUntil time.Time // when the cap lapses unless a pause renews it
	tokens    float64
	tokAt     time.Time
	timer     *time.Timer // wakes waiters at the end of a pause or for a token
	armed     time.Time   // when timer fires; zero when not armed
	pacer     *Pacer
	lastCut   time.Time
	// cutShare is the 429 share that caused the last cut; a share that
	// stays within insensitive of it afterwards holds the limit.
	cutShare float64
	// Decisions count only fresh results, of sends granted since the last
	// cut, open or close, and after judgeFrom (also moved by a pause):
	// what was already in flight when the pacer reacted is no evidence
	// that the reaction was not enough. They are kept per second, so that
	// they too leave the window.
	judgeFrom time.Time
	okSince   int           // answers other than 429 since lastCut
	latSince  time.Duration // their summed latency
	busy      time.Duration // time with sends in flight since lastCut
	busyFrom  time.Time     // when inFlight last rose from 0
	lastRaise time.Time
	calmSince time.Time
	lastUsed  time.Time // the last request or result
}

type throttle struct {
	at  time.Time
	sub string
}

func newLane(origin string, cfg *Config, now time.Time) *lane {
	n := max(int(cfg.Window/time.Second), 1)
	// No cut yet: the first may come at once, not CutCooldown after the
	// lane's first request.
	return &lane{origin: origin, cfg: cfg, z: cfg.z(), zWide: cfg.zWide(), limit: float64(cfg.MaxLimit), buckets: make([]bucket, n), breaker: Closed, lastCut: now.Add(-cfg.CutCooldown), lastRaise: now,
		turns: tiers.NewRoundRobin(cfg.Weights)}
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
	l.pacer = p
	l.lastUsed = now
	ti := req.Tier.Index()
	if now.Before(l.paused) && (ti > 0 || l.paused.Sub(now) > maxHold) {
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
		l.startLocked(now)
		return nil, &Slot{p: p, l: l, req: req, probe: true, granted: now}, time.Time{}
	}
	if l.waiting == 0 && !now.Before(l.paused) && l.inFlight < l.limitInt() && l.retryAllowed(req.Retry, false) && l.tokenLocked(ti, now) {
		return nil, l.grantLocked(p, req, now), time.Time{}
	}
	if l.waiting >= l.cfg.QueueLimit && (l.rate > 0 || now.Sub(l.oldestLocked()) >= l.cfg.ShedAfter) {
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
	w := &waiter{ch: make(chan grant, 1), req: req, seq: l.seq, enq: now}
	q := &l.queues[ti][boolIndex(req.Retry)]
	*q = append(*q, w)
	l.waiting++
	l.armLocked(now)
	return w, nil, time.Time{}
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

// insensitive bounds the change of the 429 share, either way, that counts
// as none: after a cut the share stayed between 0.8× and 1.25× of itself.
const insensitive = 0.8

// rateFor is how long a learnt rate cap lasts from the pause that first
// taught it.
const rateFor = 30 * time.Second

// maxHold is the longest pause tier-1 requests wait out in memory rather
// than going back to the ladder.
const maxHold = 2 * time.Second

// refillLocked adds the tokens earned since the last refill.
func (l *lane) refillLocked(now time.Time) {
	if l.rate > 0 && !now.Before(l.rateUntil) {
		// No pause renewed it: lift it, and let the next pause, if the
		// origin still limits us, teach it again. A cap learnt from a
		// poor sample (per-device 429s, the first second of a lane)
		// would otherwise hold the lower tiers back for good.
		l.rate = 0
	}
	if l.rate == 0 {
		return
	}
	if !l.tokAt.IsZero() {
		l.tokens = min(l.tokens+l.rate*now.Sub(l.tokAt).Seconds(), max(1, l.rate/10))
	}
	l.tokAt = now
}

// tokenLocked takes a token for a send of tier index ti. Tier 1 always
// gets one: it may overdraw by up to half a second of the rate, which the
// lower tiers then wait out. The tier-1 requests that waited out a pause
// all go when it ends; with less owed (a tenth of a second) the lower
// tiers went on at the full rate beside them, over the limit the origin
// had just signalled. Lower tiers take a token only when one is there.
func (l *lane) tokenLocked(ti int, now time.Time) bool {
	if l.rate == 0 {
		return true
	}
	l.refillLocked(now)
	if l.rate == 0 {
		return true // the rate lapsed just now: its tokens mean nothing
	}
	if ti > 0 && l.tokens < 1 {
		return false
	}
	l.tokens = max(l.tokens-1, -max(1, l.rate/2))
	return true
}

// armLocked sets the lane's timer for the moment waiters can next move:
// the end of a pause, or the next token.
func (l *lane) armLocked(now time.Time) {
	if l.waiting == 0 || l.pacer == nil {
		return
	}
	var at time.Time
	switch {
	case now.Before(l.paused):
		at = l.paused
	case l.rate > 0 && l.tokens < 1:
		// Rounded up to whole milliseconds: a wait that rounds to zero
		// would wake at the same instant, forever.
		wait := time.Duration(math.Ceil((1 - l.tokens) / l.rate * 1000))
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
			l.wakeLocked(p, p.now())
		})
		return
	}
	l.timer.Reset(d)
}

func (l *lane) limitInt() int { return max(int(l.limit), l.cfg.MinLimit) }

// retryAllowed applies the retry budget: retries may hold at most
// RetryShare of the slots while first attempts wait.
func (l *lane) retryAllowed(retry, firstsWaiting bool) bool {
	if !retry || !firstsWaiting {
		return true
	}
	return float64(l.retries+1) <= math.Max(1, l.cfg.RetryShare*l.limit)
}

func (l *lane) grantLocked(p *Pacer, req Request, now time.Time) *Slot {
	l.startLocked(now)
	if req.Retry {
		l.retries++
	}
	return &Slot{p: p, l: l, req: req, granted: now}
}

// startLocked counts a send in flight.
func (l *lane) startLocked(now time.Time) {
	if l.inFlight == 0 {
		l.busyFrom = now
	}
	l.inFlight++
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
// before retries when the retry budget is spent, else the oldest.
func (l *lane) pickLocked() *waiter {
	firsts := false
	for t := range 3 {
		firsts = firsts || len(l.queues[t][0]) > 0
	}
	retryOK := l.retryAllowed(true, firsts)
	eligible := func(t int) bool {
		if t > 0 && l.rate > 0 && l.tokens < 1 {
			return false // tiers below 1 wait for a token
		}
		return len(l.queues[t][0]) > 0 || (retryOK && len(l.queues[t][1]) > 0)
	}
	best := l.turns.Next(eligible)
	if best < 0 {
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

// done records a result, adapts the limit and breaker, and hands freed
// slots to waiters.
func (l *lane) done(s *Slot, r push.Result, throttled bool, now time.Time) {
	p := s.p
	failed := !throttled && r.Class == push.Retryable && !s.req.Failing
	repeat := !throttled && r.Class == push.Retryable && s.req.Failing
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastUsed = now
	l.inFlight--
	if l.inFlight == 0 {
		l.busy += now.Sub(l.busyFrom)
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
	b := l.bucketLocked(now)
	b.attempts++
	if throttled {
		b.throttled++
	}
	if failed {
		b.failed++
	}
	if !s.granted.Before(l.judgeFrom) {
		b.fresh.attempts++
		if throttled {
			b.fresh.throttled++
		}
		if failed {
			b.fresh.failed++
		}
	}
	if throttled {
		l.senderWideLocked(p, s.req.Sub, r.RetryAfter, now)
	}
	if r.Class == push.Delivered {
		b.ok++
	}
	if !throttled {
		// Every answer but a 429 is work the origin took on: a 503 or a
		// 410 held a slot as long as a delivery did.
		l.okSince++
		l.latSince += now.Sub(s.granted)
	}
	if s.probe {
		switch {
		case throttled || failed:
			l.openLocked(p, now, 1)
		case l.breaker == HalfOpen:
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

// wakeLocked hands free slots to waiters. When the origin is halted every
// waiter goes back to the ladder; when it is paused, all but tier 1 do
// (tier 1 waits out a short pause).
func (l *lane) wakeLocked(p *Pacer, now time.Time) {
	if l.breaker != Closed {
		for l.waiting > 0 {
			w := l.evictLocked(-1)
			w.ch <- grant{until: l.openUntil}
		}
		return
	}
	if now.Before(l.paused) {
		// Tier 1 waits out a short pause (as in admit); a longer one sends
		// it back too, rather than blocking its caller for all of it.
		keep := 0
		if l.paused.Sub(now) > maxHold {
			keep = -1
		}
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
	l.refillLocked(now)
	for l.waiting > 0 && l.inFlight < l.limitInt() {
		w := l.pickLocked()
		if w == nil {
			break
		}
		l.tokenLocked(w.req.Tier.Index(), now)
		w.ch <- grant{slot: l.grantLocked(p, w.req, now)}
	}
	l.armLocked(now)
}

func (l *lane) bucketLocked(now time.Time) *bucket {
	sec := now.Unix()
	b := &l.buckets[int(sec%int64(len(l.buckets)))]
	if b.sec != sec {
		*b = bucket{sec: sec}
	}
	return b
}

// sumLocked adds the buckets of the window, or only their fresh results.
func (l *lane) sumLocked(now time.Time, fresh bool) (attempts, throttled, failed int) {
	from := now.Add(-l.cfg.Window).Unix() + 1
	for _, b := range l.buckets {
		if b.sec >= from && b.sec <= now.Unix() {
			if fresh {
				attempts, throttled, failed = attempts+b.fresh.attempts, throttled+b.fresh.throttled, failed+b.fresh.failed
				continue
			}
			attempts += b.attempts
			throttled += b.throttled
			failed += b.failed
		}
	}
	return
}

// above reports whether k of n attempts is a share above p with the
// configured confidence: the lower bound of the Wilson score interval must
// be above p. Cuts ask it; the sender-wide rule asks aboveZ with a stricter
// quantile (Config.zWide). At 30 attempts one 429 more or less moves the
// share by 3.3 points, so a plain comparison would cut a healthy origin
// whose devices are throttled one by one at about p, again and again, on
// noise alone.
func (l *lane) above(k, n int, p float64) bool { return aboveZ(k, n, p, l.z) }

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

// adaptLocked applies the pacing rules after a send.
func (l *lane) adaptLocked(p *Pacer, now time.Time) {
	// Decisions to cut or halt look only at attempts since the last one,
	// so the window's memory of a storm already answered does not cut
	// again and again.
	n, t, f := l.sumLocked(now, true)
	if n >= l.cfg.MinSamples {
		r429, rErr := float64(t)/float64(n), float64(f)/float64(n)
		switch {
		case r429 > l.cfg.HaltRate || rErr > l.cfg.ErrorHaltRate:
			// Plain shares: a halt is the answer to a storm, which
			// leaves no doubt; noise near 20% does no harm either.
			l.openLocked(p, now, max(r429, rErr))
			return
		case l.above(t, n, l.cfg.CutRate) && now.Sub(l.lastCut) >= l.cfg.CutCooldown:
			if l.cutShare > 0 && r429 >= l.cutShare*insensitive && r429 <= l.cutShare/insensitive {
				// The last cut changed nothing: these 429s do not follow
				// our concurrency (devices throttled one by one), and
				// cutting again would only starve the origin. Hold, keep
				// the evidence (it may yet halt); a share that moves
				// decides again after the cooldown.
				l.lastCut = now
				p.observe(Event{At: now, Origin: l.origin, Kind: "hold", Limit: l.limitInt(), Rate: r429})
				return
			}
			l.cutLocked(now)
			l.cutShare = r429
			p.observe(Event{At: now, Origin: l.origin, Kind: "cut", Limit: l.limitInt(), Rate: r429})
			return
		}
	}
	n, t, _ = l.sumLocked(now, false)
	if n == 0 || float64(t)/float64(n) >= l.cfg.CalmRate {
		l.calmSince = time.Time{}
		return
	}
	if l.calmSince.IsZero() {
		l.calmSince = now
	}
	if now.Sub(l.calmSince) >= l.cfg.CalmFor && now.Sub(l.lastRaise) >= l.cfg.RaiseEvery && (l.limit < float64(l.cfg.MaxLimit) || l.rate > 0) {
		l.limit = min(max(l.limit*l.cfg.RaiseFactor, l.limit+1), float64(l.cfg.MaxLimit))
		if l.rate > 0 {
			l.rate *= l.cfg.RaiseFactor
		}
		l.lastRaise, l.cutShare = now, 0
		p.observe(Event{At: now, Origin: l.origin, Kind: "raise", Limit: l.limitInt()})
	}
}

// cutLocked cuts the limit by CutFactor — further, to what the origin
// sustained (Little's law: answers other than 429 per second × their mean
// latency, with 50% headroom), when that is lower: a limit far above what the
// service takes would otherwise need many cuts, each a burst of 429s.
func (l *lane) cutLocked(now time.Time) {
	next := l.limit * l.cfg.CutFactor
	// Over the time sends were in flight: idle time since the last cut
	// says nothing of what the origin sustains.
	el := l.busy
	if l.inFlight > 0 {
		el += now.Sub(l.busyFrom)
	}
	// Three mean latencies of it at least: the first sends of a lane wait
	// for connections and have no completions yet, which would make the
	// origin look far slower than it is.
	if l.okSince >= 10 {
		mean := l.latSince / time.Duration(l.okSince)
		if el >= 3*mean && el > 0 {
			sustained := float64(l.okSince) / el.Seconds() * mean.Seconds() * 1.5
			next = min(next, math.Ceil(sustained))
		}
	}
	l.limit = max(next, float64(l.cfg.MinLimit))
	l.restartLocked(now)
}

// restartLocked starts a new period of judgement.
func (l *lane) restartLocked(now time.Time) {
	l.lastCut, l.calmSince = now, time.Time{}
	l.judgeFrom = now
	for i := range l.buckets {
		l.buckets[i].fresh = tally{}
	}
	l.okSince, l.latSince = 0, 0
	l.busy, l.busyFrom = 0, now
}

// openLocked halts the origin for OpenFor and cuts its limit.
func (l *lane) openLocked(p *Pacer, now time.Time, rate float64) {
	l.breaker = Open
	l.openUntil = now.Add(l.cfg.OpenFor)
	l.cutLocked(now)
	l.cutShare = 0
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
	// And they must be more than SenderWideRate of what was sent: at
	// volume many subscriptions are throttled on their own (APNs and FCM
	// limit each device), which the cuts answer; a pause stops every tier.
	// Only seconds after the last pause count: the 429s that caused it
	// were answered by it.
	from := max(cut.Unix(), l.pausedAt.Unix())
	var attempts, throttled int
	for _, b := range l.buckets {
		if b.sec > from && b.sec <= now.Unix() {
			attempts, throttled = attempts+b.attempts, throttled+b.throttled
		}
	}
	if !aboveZ(throttled, attempts, l.cfg.SenderWideRate, l.zWide) {
		return
	}
	until := now.Add(max(retryAfter, l.cfg.DefaultPause))
	if until.After(l.paused) {
		if !now.Before(l.paused) {
			l.pausedAt = now // a new pause, not one made longer
		}
		l.paused = until
		// What is in flight now will be throttled too; it is not new
		// evidence. What was judged so far stays.
		l.judgeFrom = now
		l.learnRateLocked(now)
		p.observe(Event{At: now, Origin: l.origin, Kind: "pause", Limit: l.limitInt(), Until: until})
	}
}

// learnRateLocked caps the lower tiers at 95% of the deliveries per
// second the origin sustained over the last 10 s: the sender limit it just
// signalled, with room left for tier 1. The cap lasts rateFor.
func (l *lane) learnRateLocked(now time.Time) {
	ok, secs := 0, 0
	for _, b := range l.buckets {
		if b.sec > now.Unix()-10 && b.sec <= now.Unix() {
			ok += b.ok
			secs++
		}
	}
	if ok == 0 || secs == 0 {
		return
	}
	r := 0.95 * float64(ok) / float64(secs)
	// A cap lasts rateFor from the pause that first taught it. Later
	// pauses may lower it but do not prolong it: under a cap the
	// deliveries are what the cap let through, so a pause caused by
	// devices throttled one by one would otherwise lower and renew it at
	// every turn, for good. When it lapses, the next pause learns afresh
	// from what the origin takes uncapped.
	if l.rate == 0 {
		l.rateUntil = now.Add(rateFor)
	}
	if l.rate == 0 || r < l.rate {
		l.rate = max(r, 1)
		l.tokens, l.tokAt = 0, now
	}
}

// idle reports when the lane was last used and whether nothing of it is in
// force any more: it may be forgotten.
func (l *lane) idle(now time.Time) (lastUsed time.Time, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ok = l.inFlight == 0 && l.waiting == 0 && l.armed.IsZero() && !now.Before(l.paused) &&
		(l.breaker == Closed) && (l.rate == 0 || !now.Before(l.rateUntil))
	return l.lastUsed, ok
}

func (l *lane) state(now time.Time) LaneState {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, t, _ := l.sumLocked(now, false)
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
