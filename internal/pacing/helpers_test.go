package pacing_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/tiers"
)

// The tests run in synctest bubbles on the bubble's clock: the pacer
// arms timers (time.AfterFunc) to wake waiters, so its clock and its
// timers must be the same one. Advancing time is sleeping in the bubble,
// which is instant and exact.

// base is when every bubble starts: a whole second, so the pacer's
// one-second buckets line up with the offsets the tests advance by.
var base = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const origin = "https://push.example.net"

// clock is the bubble's clock, in UTC and without a monotonic reading so
// that times compare with ==.
type clock struct{}

func (clock) Now() time.Time { return time.Now().UTC() }

// Advance moves time on by d and lets every goroutine of the bubble run
// until it blocks: timers due by then have fired and their effects are
// visible.
func (clock) Advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// recorder keeps every Event the pacer reports.
type recorder struct {
	mu     sync.Mutex
	events []pacing.Event
}

func (r *recorder) observe(e pacing.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []pacing.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pacing.Event(nil), r.events...)
}

// ev is the part of an Event most tests compare: when (as an offset from
// base), what, and the limit after it.
type ev struct {
	At    time.Duration
	Kind  string
	Limit int
}

func (r *recorder) brief() []ev {
	var out []ev
	for _, e := range r.all() {
		out = append(out, ev{At: e.At.Sub(base), Kind: e.Kind, Limit: e.Limit})
	}
	return out
}

// Send results.
var (
	ok          = push.Result{Class: push.Delivered, Status: 201}
	throttled   = push.Result{Class: push.Retryable, Status: 429}
	unavailable = push.Result{Class: push.Retryable, Status: 503}
	transport   = push.Result{Class: push.Retryable, Err: "timeout"}
	wnsThrottle = push.Result{Class: push.Retryable, Status: 406}
	deferred    = push.Result{Class: push.Deferred}
)

func throttledFor(ra time.Duration) push.Result {
	r := throttled
	r.RetryAfter = ra
	return r
}

func rep(n int, r push.Result) []push.Result {
	out := make([]push.Result, n)
	for i := range out {
		out[i] = r
	}
	return out
}

func cat(rs ...[]push.Result) []push.Result {
	var out []push.Result
	for _, r := range rs {
		out = append(out, r...)
	}
	return out
}

// storm is n429 answers 429 followed by nOK successes.
func storm(n429, nOK int) []push.Result {
	return cat(rep(n429, throttled), rep(nOK, ok))
}

type harness struct {
	t   testing.TB
	p   *pacing.Pacer
	clk clock
	rec *recorder
	n   int // subscriptions handed out
}

// specConfig is DefaultConfig with the settings the expectations of these
// tests are worked out from spelled out, so that tuning a default does not
// silently change what a test means.
func specConfig() pacing.Config {
	c := pacing.DefaultConfig()
	c.Window = 60 * time.Second
	// A start rate no test reaches: tests about slots and shares see no
	// rate until a cut sets one.
	c.StartRate = 1e6
	c.CutRate, c.CutFactor, c.CutCooldown = 0.05, 0.90, 500*time.Millisecond
	c.HaltRate, c.ErrorHaltRate, c.OpenFor, c.Probes = 0.20, 0.50, 10*time.Second, 3
	c.MinSamples = 20
	c.Confidence = 0.5 // the plain share: these tests work on thresholds
	c.ProbeRate, c.ProbeDouble, c.ProbeMax = 0.05, 2*time.Second, 0.5
	c.MaxLimit, c.MinLimit = 512, 1
	c.DefaultPause = time.Second
	c.Weights, c.RetryShare, c.QueueLimit = [3]int{6, 3, 1}, 0.20, 256
	return c
}

// newHarness builds a Pacer with specConfig changed by edit. It must be
// called first thing in a synctest bubble.
func newHarness(t testing.TB, edit func(*pacing.Config)) *harness {
	t.Helper()
	if now := time.Now().UTC(); !now.Equal(base) {
		t.Fatalf("newHarness at %s, want the start of a synctest bubble (%s)", now, base)
	}
	cfg := specConfig()
	if edit != nil {
		edit(&cfg)
	}
	h := &harness{t: t, rec: &recorder{}}
	p, err := pacing.New(cfg, pacing.WithClock(h.clk.Now), pacing.WithObserver(h.rec.observe))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.p = p
	t.Cleanup(p.Close) // waiters left by a failed test return, and the bubble ends
	return h
}

// inBubble runs f as the subtest name, in a synctest bubble of its own.
func inBubble(t *testing.T, name string, f func(t *testing.T)) bool {
	t.Helper()
	return t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
}

// endSlowStart ends slow start with a pause, and waits it out.
func (h *harness) endSlowStart() {
	h.t.Helper()
	h.send(rep(15, ok)...)
	for range 40 {
		h.send(throttled)
		if until := h.lane().PausedUntil; until.After(h.clk.Now()) {
			h.clk.Advance(until.Sub(h.clk.Now()))
			return
		}
	}
	h.t.Fatalf("no pause after 40 429s")
}

// req is a request from a subscription not seen before.
func (h *harness) req(tier tiers.Tier, retry bool) pacing.Request {
	h.n++
	return pacing.Request{Origin: origin, Sub: fmt.Sprintf("sub-%d", h.n), Tier: tier, Retry: retry}
}

// acquire asks for a slot that must be granted at once.
func (h *harness) acquire(req pacing.Request) *pacing.Slot {
	h.t.Helper()
	s, until := h.p.Acquire(context.Background(), req)
	if s == nil {
		h.t.Fatalf("Acquire(%+v) at %s deferred until %v, want a slot", req, h.clk.Now().Sub(base), until)
	}
	return s
}

// send makes one send per result, each from a new subscription.
func (h *harness) send(results ...push.Result) {
	h.t.Helper()
	for _, r := range results {
		h.acquire(h.req(tiers.Tier1, false)).Done(r)
	}
}

// lane is the snapshot of the test origin.
func (h *harness) lane() pacing.LaneState {
	h.t.Helper()
	for _, l := range h.p.Lanes() {
		if l.Origin == origin {
			return l
		}
	}
	h.t.Fatalf("no lane for %s", origin)
	return pacing.LaneState{}
}

// got is what an Acquire run in its own goroutine returned, and when.
type got struct {
	name  string
	req   pacing.Request
	slot  *pacing.Slot
	until time.Time
	at    time.Duration
}

// spawn runs Acquire in a goroutine that reports on out.
func (h *harness) spawn(ctx context.Context, name string, req pacing.Request, out chan<- got) {
	go func() {
		s, until := h.p.Acquire(ctx, req)
		out <- got{name: name, req: req, slot: s, until: until, at: h.clk.Now().Sub(base)}
	}()
}

// wave sends len(results) at once: all granted now, answered lat later.
func (h *harness) wave(lat time.Duration, results []push.Result) {
	h.t.Helper()
	slots := make([]*pacing.Slot, len(results))
	for i := range slots {
		slots[i] = h.acquire(h.req(tiers.Tier1, false))
	}
	h.clk.Advance(lat)
	for i, r := range results {
		slots[i].Done(r)
	}
}

// next is the next result on out once every goroutine of the bubble is
// blocked; that there is none fails the test (rather than deadlocking it).
func next(t testing.TB, out <-chan got) got {
	t.Helper()
	synctest.Wait()
	select {
	case g := <-out:
		return g
	default:
		t.Fatalf("no Acquire has returned")
		return got{}
	}
}

// step advances the clock by after, then sends.
type step struct {
	after time.Duration
	send  []push.Result
}

func (h *harness) run(steps []step) {
	h.t.Helper()
	for _, st := range steps {
		h.clk.Advance(st.after)
		h.send(st.send...)
	}
}

// every repeats send n times, period apart (the first after one period).
func every(period time.Duration, n int, send []push.Result) []step {
	out := make([]step, n)
	for i := range out {
		out[i] = step{after: period, send: send}
	}
	return out
}

func steps(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
