package pacing

import (
	"context"
	"slices"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/tierpush/tierpush/internal/push"
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
	// origin, so they do not count toward an outage: a few notifications
	// that always fail must spend their attempts and reach the DLQ, not
	// hold the origin halted and themselves on the ladder.
	Failing bool
	// Hold is the longest the request would rather wait in memory than go
	// back to the retry ladder: the delay of the step it would go to.
	// Zero: defaultHold.
	Hold time.Duration
}

// LaneState is a snapshot of one origin's pacing.
type LaneState struct {
	Origin   string
	Limit    int // sends in flight allowed (the concurrency law)
	InFlight int
	Waiting  int
	// Estimate is what the group believes the origin accepts (sends/s),
	// Rate this processor's part of it; both 0 while no limit is known.
	// PeerRate is what the other processors sharing the origin send.
	Estimate  float64
	Rate      float64
	PeerRate  float64
	Peers     int
	SlowStart bool
	// Rate429 is the share of answers that were 429s over the last
	// second; Background the share learnt as devices' throttling.
	Rate429    float64
	Background float64
	// Ceiling is what the origin was seen to accept at the last cut (W).
	Ceiling float64
	// Base is the origin's base round trip (the least latency of late).
	Base        time.Duration
	Breaker     string
	PausedUntil time.Time
}

// Event is a change of an origin's pacing, for logs, metrics and tests.
type Event struct {
	At     time.Time
	Origin string
	// Kind: "cut" (the rate law), "peer" (another processor's cut
	// taken), "queue" (the concurrency law found the origin queueing),
	// "open", "half-open", "closed" (the breaker), "evict".
	Kind  string
	Limit int
	// Rate is the 429 share a cut was made on; Estimate E after it;
	// Accepted what the origin was seen to accept (W).
	Rate     float64
	Estimate float64
	Accepted float64
	Until    time.Time
	// Peer: caused by another processor's signal.
	Peer bool
}

// Pacer hands out send slots per push service origin.
type Pacer struct {
	cfg      Config
	now      func() time.Time
	observe  func(Event)
	signal   func(Signal)
	timer    func(*lane, time.Duration) // wakes a lane's waiters (timer)
	mu       sync.Mutex
	lanes    map[string]*lane
	active   activity
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
func WithObserver(fn func(Event)) Option {
	return func(p *Pacer) {
		prev := p.observe
		p.observe = func(e Event) { prev(e); fn(e) }
	}
}

// WithSignals receives every Signal other processors sharing an origin
// should hear of (see Apply). It must not block.
func WithSignals(fn func(Signal)) Option { return func(p *Pacer) { p.signal = fn } }

// New returns a Pacer.
func New(cfg Config, opts ...Option) (*Pacer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	subs, err := lru.New[string, time.Time](cfg.SubPauses)
	if err != nil {
		return nil, err
	}
	p := &Pacer{cfg: cfg, now: time.Now, observe: func(Event) {}, signal: func(Signal) {}, timer: timer, lanes: make(map[string]*lane), subs: subs, stopping: make(chan struct{})}
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
	granted time.Time
	seq     uint64
	below   bool // granted while E was below W
	probe   bool // a half-open probe
}

// Acquire waits for a slot for req. It returns nil and a not-before time
// (zero when there is no particular floor) when the request must instead
// be deferred along the retry ladder without spending an attempt: the
// subscription is paused, the origin is halted or its queue is longer
// than req.Hold, or the pacer is closing.
func (p *Pacer) Acquire(ctx context.Context, req Request) (*Slot, time.Time) {
	if !p.cfg.Enabled {
		return &Slot{p: p, req: req}, time.Time{}
	}
	now := p.now()
	if until, ok := p.subs.Get(req.Sub); ok {
		// A subscription a 429 paused waits it out in memory when that
		// is within its Hold, on the ladder when longer.
		if wait := until.Sub(now); wait > (&waiter{req: req}).hold() {
			return nil, until
		} else if wait > 0 {
			t := time.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil, time.Time{}
			case <-p.stopping:
				return nil, time.Time{}
			}
			now = p.now()
		}
		p.subs.Remove(req.Sub)
	}
	l, share := p.laneShare(req.Origin, now)
	if l == nil {
		return nil, time.Time{}
	}
	s, w, until, fx := l.admit(req, now, share)
	p.emit(l, fx)
	if w == nil {
		return s, until
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
	if g := <-w.ch; g.slot != nil {
		g.slot.Done(push.Result{Class: push.Deferred})
	}
	return nil, time.Time{}
}

// Done reports the result of the send and frees the slot.
func (s *Slot) Done(r push.Result) {
	if s.l == nil {
		return
	}
	now := s.p.now()
	s.p.emit(s.l, s.l.done(s, r, now))
	if r.Status == 429 {
		// The device's own throttling, or the origin's: either way this
		// subscription's next sends wait it out.
		s.p.subs.Add(s.req.Sub, now.Add(max(r.RetryAfter, s.p.cfg.DefaultPause)))
	}
}

// emit does what a lane decided, outside its lock.
func (p *Pacer) emit(l *lane, fx effects) {
	for _, g := range fx.grants {
		g.w.ch <- g.g
	}
	for _, e := range fx.events {
		p.observe(e)
	}
	if fx.signal != nil {
		p.signal(*fx.signal)
	}
}

// wake runs a lane's timer.
func (p *Pacer) wake(l *lane) { p.emit(l, l.woken(p.now())) }

// lane returns origin's lane, made when missing; nil once the pacer is
// closed.
func (p *Pacer) lane(origin string, now time.Time) *lane {
	l, _ := p.laneShare(origin, now)
	return l
}

// laneShare is lane for a request, and how many requests of a class the
// origin may hold waiting: all of MaxWaiting when it is the only origin
// asked for within the last second, else its even share of the half a
// class is sure of. The share protects the others: with none, the
// window itself bounds what waits, and the rest stays in Kafka.
func (p *Pacer) laneShare(origin string, now time.Time) (*lane, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, 0
	}
	l := p.lanes[origin]
	if l == nil {
		p.evictLocked(now)
		l = newLane(origin, p, now)
		p.lanes[origin] = l
	}
	if k := p.active.note(l, p.lanes, now); k > 1 {
		return l, max(1, p.cfg.MaxWaiting/(2*k))
	}
	return l, p.cfg.MaxWaiting
}

// activity counts the origins asked for within the last second, recounted
// at most every activeEvery. Pacer.mu guards it.
type activity struct {
	asked   map[*lane]time.Time
	n       int
	counted time.Time
}

const activeEvery = 100 * time.Millisecond

// note records that l was asked for at now and returns the count, one at
// least.
func (a *activity) note(l *lane, lanes map[string]*lane, now time.Time) int {
	if a.asked == nil {
		a.asked = make(map[*lane]time.Time)
	}
	_, known := a.asked[l]
	a.asked[l] = now
	if !known || now.Sub(a.counted) >= activeEvery {
		a.counted, a.n = now, 0
		for k, at := range a.asked {
			switch {
			case lanes[k.origin] != k:
				delete(a.asked, k) // evicted
			case now.Sub(at) <= time.Second:
				a.n++
			}
		}
	}
	return max(1, a.n)
}

// Any public host is a new origin, so lanes are evicted once idle: nothing
// in flight or waiting, no breaker open, no peer heard of lately, and
// unused for LaneIdle; at most once a minute, and at once while MaxLanes
// lanes exist (then the least recently used idle ones first, down to three
// quarters of it). An origin that comes back starts afresh.
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

// Close defers every waiting request and every later one (shutdown hands
// work back to the ladder instead of sending it), and tells the other
// processors this one leaves.
func (p *Pacer) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.stopping)
	origins := make([]string, 0, len(p.lanes))
	for o := range p.lanes {
		origins = append(origins, o)
	}
	p.mu.Unlock()
	now := p.now()
	for _, o := range origins {
		p.signal(Signal{Origin: o, At: now, Kind: SignalLeave})
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
