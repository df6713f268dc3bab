package pacing

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
)

// The simulator runs processors, each a Pacer with a window of senders and
// a backlog far larger than the origin takes, against a model of a push
// service, on a virtual clock driven by one heap of events. It calls the
// lanes as the Pacer does and does what they decide, so one seed gives
// one run: the grid is judged on outcomes that cannot flake, in seconds.
// A send deferred by the pacer or answered 429 comes back two seconds
// later, as from the retry ladder.

var simStart = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	simOrigin   = "https://push.sim.example"
	simRetry    = 2 * time.Second
	sendTimeout = 10 * time.Second
	signalDelay = 5 * time.Millisecond // through the pacing topic
	deferCost   = 2 * time.Millisecond // a sender's produce to the ladder
)

// service is the push service's model: a token bucket (limit, burst
// seconds) or a count per whole second, a pool of workers that queues
// what it cannot serve at once, devices throttled at random, or a service
// that throttles at random whatever the rate.
type service struct {
	limit     float64
	burst     float64 // seconds of the limit the bucket holds; default 1
	perSecond bool
	workers   int
	latency   time.Duration
	random429 float64
	device429 float64

	// tape, if set, records every answer, or replays the answers it
	// holds in order instead of the model's (replay_test.go).
	tape *tape

	tokens float64
	last   time.Time
	sec    int64
	inSec  float64
	free   timeHeap // the workers' free times
}

func (o *service) allow(now time.Time) bool {
	if o.limit == 0 {
		return true
	}
	if o.perSecond {
		if s := now.Unix(); s != o.sec {
			o.sec, o.inSec = s, 0
		}
		if o.inSec+1 > o.limit {
			return false
		}
		o.inSec++
		return true
	}
	size := max(1, o.limit*cmp0(o.burst, 1))
	if o.last.IsZero() {
		o.tokens = size
	}
	o.tokens = min(size, o.tokens+o.limit*now.Sub(o.last).Seconds())
	o.last = now
	if o.tokens < 1 {
		return false
	}
	o.tokens--
	return true
}

func cmp0(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// serve answers a request sent at now: the answer, when it comes back,
// and how long it waited for a worker.
func (o *service) serve(now time.Time, rng *rand.Rand) (r push.Result, latency, wait time.Duration) {
	if o.tape != nil && o.tape.replay {
		return o.tape.next()
	}
	defer func() {
		if o.tape != nil {
			o.tape.add(r, latency, wait)
		}
	}()
	d := o.latency + time.Duration(rng.Int64N(int64(o.latency)/5+1))
	start := now
	if o.workers > 0 {
		if len(o.free) < o.workers {
			heap.Push(&o.free, now)
		}
		if f := o.free[0]; f.After(now) {
			start = f
		}
		o.free[0] = start.Add(d)
		heap.Fix(&o.free, 0)
	}
	r = push.Result{Class: push.Delivered, Status: 201}
	switch {
	case o.device429 > 0 && rng.Float64() < o.device429:
		r = push.Result{Class: push.Retryable, Status: 429, RetryAfter: 5 * time.Second}
	case o.random429 > 0 && rng.Float64() < o.random429, !o.allow(start):
		r = push.Result{Class: push.Retryable, Status: 429, RetryAfter: time.Second}
	}
	return r, start.Sub(now) + d, start.Sub(now)
}

type simSecond struct {
	sent, ok, throttled, timeouts int
	rate, estimate                float64 // the processors' parts together, and E
	debug                         string
}

type sim struct {
	now    time.Time
	events eventHeap
	seq    uint64
	rng    *rand.Rand
	svc    *service
	cfg    Config
	procs  []*simProc
	secs   []simSecond
	waits  []time.Duration // inside the service, per request sent after warmup
	warmup time.Duration
	log    []string
	// noise is what a busy CPU adds to the handling of each answer.
	noise func(*rand.Rand) time.Duration
}

func newSim(seed uint64, svc *service, seconds int) *sim {
	cfg := DefaultConfig()
	return &sim{now: simStart, rng: rand.New(rand.NewPCG(seed, 7)), svc: svc, cfg: cfg, secs: make([]simSecond, seconds+1), warmup: 10 * time.Second}
}

func (s *sim) at(t time.Time, f func()) {
	s.seq++
	heap.Push(&s.events, simEvent{t, s.seq, f})
}

func (s *sim) second() *simSecond {
	i := int(s.now.Sub(simStart) / time.Second)
	if i >= len(s.secs) {
		return &simSecond{}
	}
	return &s.secs[i]
}

// run runs the events until the last second, summing the processors'
// rates at each whole second.
func (s *sim) run() {
	end := simStart.Add(time.Duration(len(s.secs)-1) * time.Second)
	for i := 1; i < len(s.secs); i++ {
		s.at(simStart.Add(time.Duration(i)*time.Second), func() {
			sec := &s.secs[i-1]
			for _, pr := range s.procs {
				if pr.alive {
					for _, l := range pr.p.Lanes() {
						sec.rate, sec.estimate = sec.rate+l.Rate, max(sec.estimate, l.Estimate)
						sec.debug += fmt.Sprintf(" [%s lim=%d fl=%d wait=%d idle=%d retries=%d backlog=%d br=%s]", pr.id, l.Limit, l.InFlight, l.Waiting, len(pr.idle), len(pr.retries), pr.backlog, l.Breaker)
					}
				}
			}
		})
	}
	for len(s.events) > 0 && !s.events[0].at.After(end) {
		e := heap.Pop(&s.events).(simEvent)
		s.now = e.at
		e.do()
	}
}

// join starts a processor with window senders at offset, with a share of
// backlog; it reads what the others last signalled, as from the topic.
func (s *sim) join(at time.Duration, window, backlog int) {
	s.at(simStart.Add(at), func() {
		pr := &simProc{s: s, id: fmt.Sprint("p", len(s.procs)), backlog: backlog, alive: true, waiting: map[*waiter]int{}}
		cfg := s.cfg
		cfg.MaxWaiting = window // as the pipeline's --max-in-flight
		p, err := New(cfg, WithClock(func() time.Time { return s.now }), WithObserver(func(e Event) {
			s.log = append(s.log, fmt.Sprintf("%7.3fs %s %s limit=%d E=%.1f W=%.1f share=%.3f peer=%v", e.At.Sub(simStart).Seconds(), pr.id, e.Kind, e.Limit, e.Estimate, e.Accepted, e.Rate, e.Peer))
		}))
		if err != nil {
			panic(err)
		}
		p.timer = func(l *lane, d time.Duration) { pr.arm(l, d) }
		pr.p = p
		// It has read the pacing topic before it sends (as the pipeline
		// does), and says it is there.
		s.procs = append(s.procs, pr)
		for _, q := range s.procs {
			if q != pr && q.alive && q.last != nil {
				pr.apply(*q.last)
			}
		}
		pr.effects(pr.p.lane(simOrigin, s.now).report0(s.now))
		for i := range window {
			s.at(s.now, func() { pr.next(i) })
		}
	})
}

// leave stops processor i at offset: graceful, it tells the others.
func (s *sim) leave(at time.Duration, i int, graceful bool) {
	s.at(simStart.Add(at), func() {
		pr := s.procs[i]
		pr.alive = false
		if graceful {
			pr.signal(Signal{Origin: simOrigin, At: s.now, Kind: SignalLeave})
		}
	})
}

type simProc struct {
	s       *sim
	id      string
	p       *Pacer
	backlog int
	retries dueHeap
	n       int
	alive   bool
	idle    []int
	waiting map[*waiter]int // the sender each waiter is
	wakeAt  time.Time
	last    *Signal
}

// take is the next record: a due retry first, else the backlog's next, two
// in ten of tier 1, three of tier 2, five of tier 3.
func (pr *simProc) take() (tiers.Tier, bool) {
	if len(pr.retries) > 0 && !pr.retries[0].at.After(pr.s.now) {
		return heap.Pop(&pr.retries).(due).tier, true
	}
	if pr.backlog == 0 {
		return 0, false
	}
	pr.backlog--
	pr.n++
	switch pr.n % 10 {
	case 0, 1:
		return tiers.Tier1, true
	case 2, 3, 4:
		return tiers.Tier2, true
	}
	return tiers.Tier3, true
}

// next is sender i's next record.
func (pr *simProc) next(i int) {
	s := pr.s
	if !pr.alive {
		return
	}
	tier, ok := pr.take()
	if !ok {
		pr.idle = append(pr.idle, i)
		return
	}
	l := pr.p.lane(simOrigin, s.now)
	slot, w, until, fx := l.admit(Request{Origin: simOrigin, Tier: tier, Hold: simRetry}, s.now, pr.p.cfg.MaxWaiting)
	switch {
	case slot != nil:
		slot.req.Tier = tier
		pr.send(i, slot)
	case w != nil:
		pr.waiting[w] = i
	default:
		pr.later(tier, later(s.now.Add(simRetry), until))
		s.at(s.now.Add(deferCost), func() { pr.next(i) })
	}
	pr.effects(fx)
}

func (pr *simProc) later(t tiers.Tier, at time.Time) {
	heap.Push(&pr.retries, due{at, t})
	pr.s.at(at, func() {
		for len(pr.idle) > 0 && len(pr.retries) > 0 && !pr.retries[0].at.After(pr.s.now) {
			i := pr.idle[len(pr.idle)-1]
			pr.idle = pr.idle[:len(pr.idle)-1]
			pr.next(i)
		}
	})
}

func (pr *simProc) send(i int, slot *Slot) {
	s := pr.s
	r, latency, wait := s.svc.serve(s.now, s.rng)
	if s.now.Sub(simStart) >= s.warmup && s.svc.workers > 0 {
		s.waits = append(s.waits, wait)
	}
	if s.noise != nil {
		latency += s.noise(s.rng)
	}
	sec := s.second()
	sec.sent++
	if latency > sendTimeout {
		latency, r = sendTimeout, push.Result{Class: push.Retryable, Err: "timeout"}
		sec.timeouts++
	}
	s.at(s.now.Add(latency), func() {
		fx := slot.l.done(slot, r, s.now)
		sec := s.second()
		if r.Status == 429 {
			sec.throttled++
			pr.later(slot.req.Tier, s.now.Add(simRetry))
		} else if r.Class == push.Delivered {
			sec.ok++
		}
		pr.effects(fx)
		if pr.alive {
			pr.next(i)
		}
	})
}

// effects does what a lane decided, as Pacer.emit does.
func (pr *simProc) effects(fx effects) {
	s := pr.s
	if !pr.alive {
		return // stopped: it sends nothing more
	}
	for _, g := range fx.grants {
		i := pr.waiting[g.w]
		delete(pr.waiting, g.w)
		if g.g.slot != nil {
			g.g.slot.req = g.w.req
			pr.send(i, g.g.slot)
			continue
		}
		pr.later(g.w.req.Tier, later(s.now.Add(simRetry), g.g.until))
		s.at(s.now.Add(deferCost), func() { pr.next(i) })
	}
	for _, e := range fx.events {
		pr.p.observe(e)
	}
	if fx.signal != nil {
		pr.signal(*fx.signal)
	}
}

func (pr *simProc) signal(sig Signal) {
	sig.From = pr.id
	if sig.Kind != SignalLeave {
		pr.last = &sig
	}
	for _, q := range pr.s.procs {
		if q != pr && q.alive {
			pr.s.at(pr.s.now.Add(signalDelay), func() { q.apply(sig) })
		}
	}
}

func (pr *simProc) apply(sig Signal) {
	if pr.alive {
		pr.effects(pr.p.lane(sig.Origin, pr.s.now).apply(sig, pr.s.now))
	}
}

// arm is the lane's timer on the virtual clock: one wake at a time, the
// earliest asked for.
func (pr *simProc) arm(l *lane, d time.Duration) {
	at := pr.s.now.Add(d)
	if !pr.wakeAt.IsZero() && !at.Before(pr.wakeAt) {
		return
	}
	pr.wakeAt = at
	pr.s.at(at, func() {
		if pr.wakeAt.Equal(at) {
			pr.wakeAt = time.Time{}
		}
		if pr.alive {
			pr.effects(l.woken(pr.s.now))
		}
	})
}

// measure sums seconds [from, to): the 429 share, goodput per second, the
// busiest second, and timeouts.
func (s *sim) measure(from, to int) (share, goodput float64, peak, timeouts int) {
	var sent, ok, thr int
	for i := from; i < to && i < len(s.secs); i++ {
		sec := s.secs[i]
		sent, ok, thr, timeouts = sent+sec.sent, ok+sec.ok, thr+sec.throttled, timeouts+sec.timeouts
		peak = max(peak, sec.sent)
	}
	if sent > 0 {
		share = float64(thr) / float64(sent)
	}
	return share, float64(ok) / float64(to-from), peak, timeouts
}

// waitQuantile is the q quantile of the waits inside the service.
func (s *sim) waitQuantile(q float64) time.Duration {
	if len(s.waits) == 0 {
		return 0
	}
	w := slices.Clone(s.waits)
	slices.Sort(w)
	return w[min(len(w)-1, int(q*float64(len(w))))]
}

type simEvent struct {
	at  time.Time
	seq uint64
	do  func()
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	return h[i].at.Before(h[j].at) || (h[i].at.Equal(h[j].at) && h[i].seq < h[j].seq)
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type due struct {
	at   time.Time
	tier tiers.Tier
}

type dueHeap []due

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(due)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type timeHeap []time.Time

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].Before(h[j]) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(time.Time)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
