package pacing_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/tiers"
)

const s = time.Second

// outage is 20 answers, 11 of them 503: above the error share that opens
// the breaker.
func outage() []push.Result { return cat(rep(11, unavailable), rep(9, ok)) }

// TestBreaker opens the breaker at 0 s (until 10 s) and checks that no
// slot is granted while open, that half-open grants at most Probes, and
// what a probe's answer does.
func TestBreaker(t *testing.T) {
	open := func(t *testing.T) *harness {
		t.Helper()
		h := newHarness(t, nil)
		h.send(outage()...)
		return h
	}
	deferredUntil := func(t *testing.T, h *harness, want time.Time) {
		t.Helper()
		for _, req := range []pacing.Request{h.req(tiers.Tier1, false), h.req(tiers.Tier3, true)} {
			slot, until := h.p.Acquire(context.Background(), req)
			if slot != nil || !until.Equal(want) {
				t.Fatalf("at %s Acquire(%s) = %v, %s; want nil, %s", h.clk.Now().Sub(base), req.Tier, slot != nil, until.Sub(base), want.Sub(base))
			}
		}
	}

	inBubble(t, "open defers every request until open-until", func(t *testing.T) {
		h := open(t)
		for _, at := range []time.Duration{0, 5 * s, 10*s - time.Nanosecond} {
			h.clk.Advance(at - h.clk.Now().Sub(base))
			deferredUntil(t, h, base.Add(10*s))
			if got := h.lane().Breaker; got != pacing.Open {
				t.Errorf("at %s breaker = %q, want %q", at, got, pacing.Open)
			}
		}
	})

	inBubble(t, "half-open grants at most Probes", func(t *testing.T) {
		h := open(t)
		h.clk.Advance(10 * s)
		if got := h.lane().Breaker; got != pacing.HalfOpen {
			t.Errorf("breaker = %q, want %q", got, pacing.HalfOpen)
		}
		for range 3 {
			h.acquire(h.req(tiers.Tier2, false))
		}
		deferredUntil(t, h, base.Add(15*s)) // now + OpenFor/2
		if got, want := h.lane().InFlight, 3; got != want {
			t.Errorf("in flight = %d, want %d", got, want)
		}
		want := []ev{{0, "open", 512}, {10 * s, "half-open", 512}}
		if got := h.rec.brief(); !slices.Equal(got, want) {
			t.Errorf("events = %v, want %v", got, want)
		}
	})

	tests := []struct {
		name        string
		answer      push.Result
		wantEvents  []ev
		wantBreaker string
		wantLimit   int
	}{
		{"success closes", ok, []ev{{11 * s, "closed", 512}}, pacing.Closed, 512},
		{"429 reopens", throttled, []ev{{11 * s, "open", 512}}, pacing.Open, 512},
		{"503 reopens", unavailable, []ev{{11 * s, "open", 512}}, pacing.Open, 512},
		{"transport error reopens", transport, []ev{{11 * s, "open", 512}}, pacing.Open, 512},
		{"deferred probe frees its place", deferred, nil, pacing.HalfOpen, 512},
	}
	for _, tt := range tests {
		inBubble(t, "probe: "+tt.name, func(t *testing.T) {
			h := open(t)
			h.clk.Advance(10 * s)
			probes := []*pacing.Slot{h.acquire(h.req(tiers.Tier1, false)), h.acquire(h.req(tiers.Tier1, false)), h.acquire(h.req(tiers.Tier1, false))}
			h.clk.Advance(1 * s)
			before := len(h.rec.all())
			probes[0].Done(tt.answer)
			if got := h.rec.brief()[before:]; !slices.Equal(got, tt.wantEvents) {
				t.Errorf("events = %v, want %v", got, tt.wantEvents)
			}
			if got := h.lane(); got.Breaker != tt.wantBreaker || got.Limit != tt.wantLimit {
				t.Errorf("breaker, limit = %q, %d; want %q, %d", got.Breaker, got.Limit, tt.wantBreaker, tt.wantLimit)
			}
			switch tt.wantBreaker {
			case pacing.Closed:
				for range 5 { // no longer limited to probes
					h.acquire(h.req(tiers.Tier1, false)).Done(ok)
				}
			case pacing.Open:
				deferredUntil(t, h, base.Add(21*s))
			case pacing.HalfOpen:
				probes[0] = h.acquire(h.req(tiers.Tier1, false))
				deferredUntil(t, h, base.Add(16*s))
			}
			for _, p := range probes[1:] {
				p.Done(deferred)
			}
		})
	}
}

// TestSubscriptionPause: a 429 pauses its subscription for max(Retry-After,
// DefaultPause) and no other, once the origin's rate is known (here, from
// a peer); a 429 while the origin's limit is being looked for (slow start)
// is the origin's, answered by the lane, and pauses no subscription.
func TestSubscriptionPause(t *testing.T) {
	tests := []struct {
		name   string
		answer push.Result
		want   time.Duration // the pause; 0: none
	}{
		{"429 with Retry-After", throttledFor(30 * s), 30 * s},
		{"429 without Retry-After", throttled, 1 * s},
		{"WNS 406 throttling", wnsThrottle, 1 * s},
		{"503 does not pause", unavailable, 0},
		{"success does not pause", ok, 0},
	}
	for _, tt := range tests {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			a := pacing.Request{Origin: origin, Sub: "a", Tier: tiers.Tier1}
			b := pacing.Request{Origin: origin, Sub: "b", Tier: tiers.Tier1}
			h.acquire(a).Done(ok)
			if tt.answer.Status != 0 && tt.answer.Status != 201 {
				if s := h.acquire(a); s != nil {
					s.Done(tt.answer)
				}
				if h.p.SubscriptionPaused("a") {
					t.Errorf("a 429 in slow start paused its subscription")
				}
			}
			h.p.Apply(pacing.Signal{Origin: origin, From: "peer", At: h.clk.Now(), Kind: pacing.SignalRate, Rate: 100})
			h.clk.Advance(time.Second) // past the hold of the rate's change
			base := h.clk.Now()
			h.acquire(a).Done(tt.answer)
			h.acquire(b).Done(ok) // others are unaffected
			if got := h.p.SubscriptionPaused("b"); got {
				t.Errorf("SubscriptionPaused(b) = true, want false")
			}
			if tt.want == 0 {
				if h.p.SubscriptionPaused("a") {
					t.Errorf("SubscriptionPaused(a) = true, want false")
				}
				h.acquire(a).Done(ok)
				return
			}
			h.clk.Advance(tt.want - time.Nanosecond)
			if !h.p.SubscriptionPaused("a") {
				t.Errorf("SubscriptionPaused(a) just before the end = false, want true")
			}
			retry := a
			retry.Retry = true
			if slot, until := h.p.Acquire(context.Background(), retry); slot != nil || !until.Equal(base.Add(tt.want)) {
				t.Errorf("Acquire(a) = %v, %s; want nil, %s", slot != nil, until.Sub(base), tt.want)
			}
			h.clk.Advance(time.Nanosecond)
			if h.p.SubscriptionPaused("a") {
				t.Errorf("SubscriptionPaused(a) at the end = true, want false")
			}
			h.acquire(retry).Done(ok)
			if got := h.lane().PausedUntil; !got.IsZero() {
				t.Errorf("origin PausedUntil = %s, want zero", got)
			}
		})
	}
}

// TestLanes builds four origins in different states and compares the
// snapshots as time passes.
func TestLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = 2 })
		at := func(o string) pacing.Request { r := h.req(tiers.Tier1, false); r.Origin = o; return r }
		sendTo := func(o string, rs ...push.Result) {
			for _, r := range rs {
				h.acquire(at(o)).Done(r)
			}
		}
		// busy: both slots held and one waiting.
		held := []*pacing.Slot{h.acquire(at("https://busy")), h.acquire(at("https://busy"))}
		out := make(chan got, 1)
		h.spawn(context.Background(), "", at("https://busy"), out)
		synctest.Wait()
		// calm: 1 of 20 throttled, under the threshold.
		sendTo("https://calm", storm(1, 19)...)
		h.clk.Advance(30 * s)
		// halted: an outage at 30 s opens the breaker until 40 s.
		sendTo("https://halted", outage()...)
		// paused: half of 20 throttled, Retry-After 20 s: until 50 s.
		sendTo("https://paused", cat(rep(10, ok), rep(10, throttledFor(20*s)))...)

		type brief struct {
			Origin            string
			InFlight, Waiting int
			Rate429           float64
			Breaker           string
			Paused            time.Duration
			SlowStart         bool
		}
		tests := []struct {
			at   time.Duration
			want []brief
		}{
			{30 * s, []brief{
				{"https://busy", 2, 1, 0, pacing.Closed, 0, true},
				{"https://calm", 0, 0, 0.05, pacing.Closed, 0, true},
				{"https://halted", 0, 0, 0, pacing.Open, 0, true},
				{"https://paused", 0, 0, 0.5, pacing.Closed, 50 * s, false},
			}},
			{45 * s, []brief{
				{"https://busy", 2, 1, 0, pacing.Closed, 0, true},
				{"https://calm", 0, 0, 0.05, pacing.Closed, 0, true},
				{"https://halted", 0, 0, 0, pacing.HalfOpen, 0, true},
				{"https://paused", 0, 0, 0.5, pacing.Closed, 50 * s, false},
			}},
			{95 * s, []brief{ // everything older than 60 s is out of the window
				{"https://busy", 2, 1, 0, pacing.Closed, 0, true},
				{"https://calm", 0, 0, 0, pacing.Closed, 0, true},
				{"https://halted", 0, 0, 0, pacing.HalfOpen, 0, true},
				{"https://paused", 0, 0, 0, pacing.Closed, 50 * s, false},
			}},
		}
		for _, tt := range tests {
			h.clk.Advance(tt.at - h.clk.Now().Sub(base))
			var got []brief
			for _, l := range h.p.Lanes() {
				b := brief{l.Origin, l.InFlight, l.Waiting, l.Rate429, l.Breaker, 0, l.SlowStart}
				if !l.PausedUntil.IsZero() {
					b.Paused = l.PausedUntil.Sub(base)
				}
				got = append(got, b)
			}
			slices.SortFunc(got, func(a, b brief) int { return strings.Compare(a.Origin, b.Origin) })
			if !slices.Equal(got, tt.want) {
				t.Errorf("at %s Lanes() =\n%+v\nwant\n%+v", tt.at, got, tt.want)
			}
		}
		held[0].Done(ok)
		next(t, out).slot.Done(ok)
		held[1].Done(ok)
	})
}

func TestDisabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *pacing.Config) { c.Enabled = false; c.MaxLimit = 1 })
		var held []*pacing.Slot
		for range 100 {
			held = append(held, h.acquire(h.req(tiers.Tier3, true)))
		}
		for _, sl := range held {
			sl.Done(throttled)
		}
		h.send(rep(50, throttled)...)
		if evs := h.rec.all(); len(evs) != 0 {
			t.Errorf("events = %+v, want none", evs)
		}
		if got := h.p.Lanes(); len(got) != 0 {
			t.Errorf("Lanes() = %+v, want none", got)
		}
	})
}

// TestFailingNotifications: a notification whose last attempt failed with
// a server or transport error says nothing more about the origin by
// failing again. Only failures of the rest open the breaker, and a failing
// probe of that kind neither reopens nor closes it, so notifications that
// always fail reach their last attempt instead of holding the origin
// halted for ever.
func TestFailingNotifications(t *testing.T) {
	failing := func(h *harness) pacing.Request {
		r := h.req(tiers.Tier1, true)
		r.Failing = true
		return r
	}
	inBubble(t, "their failures do not open the breaker", func(t *testing.T) {
		h := newHarness(t, nil)
		for range 100 {
			h.acquire(failing(h)).Done(unavailable)
		}
		for range 100 {
			h.acquire(failing(h)).Done(transport)
		}
		if got := h.lane(); got.Breaker != pacing.Closed || got.Limit != 512 {
			t.Errorf("breaker, limit = %q, %d; want closed, 512", got.Breaker, got.Limit)
		}
		if got := h.rec.brief(); len(got) != 0 {
			t.Errorf("events = %v, want none", got)
		}
	})
	inBubble(t, "nor do they dilute the error share of the others", func(t *testing.T) {
		h := newHarness(t, nil)
		for range 40 {
			h.acquire(failing(h)).Done(unavailable)
		}
		h.send(cat(rep(11, unavailable), rep(9, ok))...) // 55% of the others
		if got := h.lane().Breaker; got != pacing.Open {
			t.Errorf("breaker = %q, want open", got)
		}
	})
	inBubble(t, "their 429s count", func(t *testing.T) {
		h := newHarness(t, nil)
		h.send(rep(15, ok)...)
		for range 5 {
			h.acquire(failing(h)).Done(throttled)
		}
		if got := h.lane().PausedUntil; !got.Equal(base.Add(s)) {
			t.Errorf("paused until %s, want 1s: 25%% 429s pause the origin", got.Sub(base))
		}
	})
	inBubble(t, "a failing probe leaves the next probe to decide", func(t *testing.T) {
		h := newHarness(t, nil)
		h.send(outage()...) // open until 10 s
		h.clk.Advance(10 * s)
		for i := range 10 { // each failing probe frees its place for the next
			h.acquire(failing(h)).Done(unavailable)
			if got := h.lane().Breaker; got != pacing.HalfOpen {
				t.Fatalf("after failing probe %d breaker = %q, want half-open", i, got)
			}
		}
		h.acquire(h.req(tiers.Tier1, false)).Done(unavailable)
		if got := h.lane().Breaker; got != pacing.Open {
			t.Errorf("after a failed first attempt breaker = %q, want open", got)
		}
		h.clk.Advance(10 * s)
		h.acquire(failing(h)).Done(ok)
		if got := h.lane().Breaker; got != pacing.Closed {
			t.Errorf("after a failing notification got through breaker = %q, want closed", got)
		}
	})
}

// TestPauseHoldsTheBacklog: once slow start has settled, a short pause
// holds every tier in the queue, so that a backlog waits it out instead of
// running through the ladder's first step as fast as it is consumed; the
// pause that ends slow start still sends the lower tiers back (tier 1
// waits it out).
func TestPauseHoldsTheBacklog(t *testing.T) {
	const s, ms = time.Second, time.Millisecond
	// pause answers 429 until the origin is paused (a storm: past 20%).
	pause := func(t *testing.T, h *harness) time.Time {
		t.Helper()
		h.send(rep(15, ok)...)
		for range 40 {
			h.send(throttled)
			if until := h.lane().PausedUntil; until.After(h.clk.Now()) {
				return until
			}
		}
		t.Fatalf("no pause after 40 429s")
		return time.Time{}
	}
	inBubble(t, "the pause that ends slow start sends the lower tiers back", func(t *testing.T) {
		h := newHarness(t, nil)
		until := pause(t, h)
		for _, tier := range []tiers.Tier{tiers.Tier2, tiers.Tier3} {
			if slot, got := h.p.Acquire(context.Background(), h.req(tier, false)); slot != nil || !got.Equal(until) {
				t.Errorf("%s in the pause: slot %v, until %s; want none, until %s", tier, slot != nil, got.Sub(base), until.Sub(base))
			}
		}
		out := make(chan got, 1)
		h.spawn(context.Background(), "tier 1", h.req(tiers.Tier1, false), out)
		synctest.Wait()
		if len(out) > 0 {
			t.Fatalf("tier 1 returned in the pause, want it to wait")
		}
		h.clk.Advance(until.Sub(h.clk.Now()))
		if g := next(t, out); g.slot == nil {
			t.Errorf("tier 1 after the pause: until %s, want a slot", g.until.Sub(base))
		} else {
			g.slot.Done(ok)
		}
	})
	inBubble(t, "a later pause holds every tier", func(t *testing.T) {
		h := newHarness(t, nil)
		until := pause(t, h)
		h.clk.Advance(until.Sub(h.clk.Now()) + 5*s)
		h.run(every(100*ms, 30, rep(1, ok)))
		until = pause(t, h)
		out := make(chan got, 3)
		for _, tier := range []tiers.Tier{tiers.Tier1, tiers.Tier2, tiers.Tier3} {
			h.spawn(context.Background(), tier.String(), h.req(tier, false), out)
		}
		synctest.Wait()
		if len(out) > 0 {
			g := <-out
			t.Fatalf("%s returned in the pause (slot %v, until %s), want every tier to wait", g.name, g.slot != nil, g.until.Sub(base))
		}
		h.clk.Advance(until.Sub(h.clk.Now()) + s) // and a second of the rate
		for range 3 {
			g := next(t, out)
			if g.slot == nil {
				t.Errorf("%s after the pause: until %s, want a slot", g.name, g.until.Sub(base))
				continue
			}
			g.slot.Done(ok)
		}
	})
}

// TestBackgroundIsNotTheLimits: the 429 share learnt as background
// (devices throttled one by one, which no cut helps) is taken from sends
// made under a ceiling that has stood settleFor (5 s) since slow start,
// and never from answers to sends made before a cut, or in the seconds
// before a peer's cut: slow start's ceiling is taken over the burst
// allowance it spent, a peer's probe overruns the limit they share, and
// all are the limit's 429s. Learnt from them, a background lifts the
// threshold past what the limit throttles (at 20 req/s the grid saw 4 to
// 6 429s a second, uncut for 4 s; three processors sharing 100/s held
// 5.2%).
func TestBackgroundIsNotTheLimits(t *testing.T) {
	const ms = time.Millisecond
	// oneIn25 is a second of sends, one in 25 answered 429 (4%: no cut).
	oneIn25 := every(40*ms, 25, nil)
	for i := range oneIn25 {
		oneIn25[i].send = []push.Result{ok}
	}
	oneIn25[12].send = []push.Result{throttled}
	inBubble(t, "429s in the first seconds after slow start", func(t *testing.T) {
		h := newHarness(t, nil)
		h.endSlowStart()
		h.run(steps(oneIn25, oneIn25, oneIn25, oneIn25)) // 4 s, 100 answers
		if bg := h.lane().Background; bg != 0 {
			t.Errorf("background %.3f learnt in the first 4 s after slow start, want 0", bg)
		}
		// Once the ceiling has stood, a share that stays is background.
		h.run(steps(oneIn25, oneIn25, oneIn25, oneIn25, oneIn25, oneIn25, oneIn25))
		if bg := h.lane().Background; bg < 0.03 || bg > 0.05 {
			t.Errorf("background %.3f after 5 s of 4%% 429s on a settled ceiling, want 4%%", bg)
		}
	})
	inBubble(t, "429s in the seconds before a peer's cut", func(t *testing.T) {
		h := newHarness(t, nil)
		h.endSlowStart()
		clean := every(40*ms, 25, []push.Result{ok})
		for range 11 { // 5 s to settle, 6 s learnt clean
			h.run(clean)
		}
		// Then a peer probes past the limit the processors share: its
		// 429s reach this lane too, at its own settled rate, too few to
		// cut here.
		h.run(steps(oneIn25, oneIn25))
		before := h.lane().Background
		if before <= 0 {
			t.Fatalf("no 429 learnt as background before the peer's cut")
		}
		// Pooled with this lane's answers the peer's shows no limit here
		// (2 of 45): the rate is not cut, but the background forgets.
		h.p.Apply(pacing.Signal{Origin: origin, From: "peer", At: h.clk.Now(), Kind: pacing.SignalCut, Rate: 10,
			Judged: 20, JudgedThrottled: 1})
		if bg := h.lane().Background; bg != 0 {
			t.Errorf("background %.3f after a peer cut on the limit, was %.3f: the limit's 429s of the seconds before it learnt as background", bg, before)
		}
	})
	inBubble(t, "429s to sends made before a cut", func(t *testing.T) {
		h := newHarness(t, nil)
		h.endSlowStart()
		for range 10 {
			h.run(oneIn25)
		}
		before := h.lane().Background
		// A wave made at the settled rate comes back throttled: the first
		// answers cut, and the rest answer sends made before the cut.
		h.wave(100*ms, rep(30, throttled))
		if !slices.ContainsFunc(h.rec.all(), func(e pacing.Event) bool { return e.Kind == "cut" || e.Kind == "pause" }) {
			t.Fatalf("the wave of 429s cut nothing; events %v", h.rec.brief())
		}
		if bg := h.lane().Background; bg > before+0.005 {
			t.Errorf("background %.3f after a wave of 429s that cut the rate, was %.3f: the limit's 429s learnt as background", bg, before)
		}
	})
}

// TestSlowStartOnDevices: nothing is known of an origin in slow start, so
// its first answers are judged against the threshold plus twice CutRate
// (15% here). At 10%, devices throttled one by one at 5% read past it on
// the first twenty-odd answers often enough that one draw in ten, of three
// processors starting together on an origin with no limit, ended slow
// start at 60/s; its peers took the cut, and the three sent a tenth of
// what the origin took for half a minute.
// A limit's 429s grow with every round trip of slow start, and past 15%
// they still end it.
func TestSlowStartOnDevices(t *testing.T) {
	// oneIn is n answers over a second, the span a judgement looks at,
	// every every-th of them 429.
	oneIn := func(every, n int) []step {
		out := make([]step, n)
		for i := range out {
			out[i] = step{after: time.Second / time.Duration(n), send: []push.Result{ok}}
			if (i+1)%every == 0 {
				out[i].send = []push.Result{throttled}
			}
		}
		return out
	}
	for _, tt := range []struct {
		name  string
		steps []step
		ended bool
	}{
		{"devices: 6 of 48 (12.5%)", oneIn(8, 48), false},
		{"a limit: 8 of 48 (16.7%)", oneIn(6, 48), true},
	} {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.run(tt.steps)
			if got := !h.lane().SlowStart; got != tt.ended {
				t.Errorf("slow start ended: %v, want %v; events %v", got, tt.ended, h.rec.brief())
			}
		})
	}
}

// TestPeerCutPooled: a peer's cut is made here only when the answers it
// was judged on, pooled with this lane's own since its last change, show a
// 429 share past the threshold: a limit's 429s reach every processor
// sending over it, while one processor's false cut on devices' 429s is
// answered by the others' clean answers. Otherwise the rate only steps
// back to CutFactor of the ceiling if it probed past it, and the ceiling
// stays. A cut that gives no evidence counts in full, as before.
func TestPeerCutPooled(t *testing.T) {
	const ms = time.Millisecond
	for _, tt := range []struct {
		name              string
		judged, throttled int // the peer's evidence: 2 of 20 is 10%
		own               []push.Result
		shown             bool
	}{
		{"clean answers here: pooled 2 of 50", 20, 2, rep(30, ok), false},
		{"the limit's 429s here too: pooled 3 of 50", 20, 2, cat(rep(29, ok), rep(1, throttled)), true},
		{"no evidence given", 0, 0, rep(30, ok), true},
	} {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.endSlowStart()
			// Past the hold after the cut, a second and more of this
			// lane's own answers, at 25 a second; 1 in 30 throttled cuts
			// nothing here.
			h.clk.Advance(time.Second)
			for _, r := range tt.own {
				h.clk.Advance(40 * ms)
				h.send(r)
			}
			before := h.lane()
			if n := len(h.rec.all()); n != 1 {
				t.Fatalf("events %v before the peer's cut, want only slow start's pause", h.rec.brief())
			}
			h.p.Apply(pacing.Signal{Origin: origin, From: "peer", At: h.clk.Now(), Kind: pacing.SignalCut, Rate: 10,
				Judged: tt.judged, JudgedThrottled: tt.throttled})
			after := h.lane()
			if tt.shown {
				if after.Rate >= before.Rate || after.Ceiling >= before.Ceiling {
					t.Errorf("rate %.1f, ceiling %.1f after the peer's cut, were %.1f and %.1f: want both lowered", after.Rate, after.Ceiling, before.Rate, before.Ceiling)
				}
				return
			}
			if after.Ceiling != before.Ceiling || after.Rate > 0.9*before.Ceiling+1e-9 {
				t.Errorf("rate %.1f, ceiling %.1f after the peer's cut, were %.1f and %.1f: want the ceiling kept, the rate at 90%% of it at most", after.Rate, after.Ceiling, before.Rate, before.Ceiling)
			}
		})
	}
}

// TestStormPausesForTheOriginsRetryAfter: a storm's pause waits the
// Retry-After most of its 429s carry, not that of the answer that tipped
// the share: a device throttled one by one may ask for longer (5 s) than
// the origin (1 s), and a pause taken from it held an origin of 2,000/s
// idle for 5 s.
func TestStormPausesForTheOriginsRetryAfter(t *testing.T) {
	const s = time.Second
	for _, c := range []struct {
		name  string
		first time.Duration // the Retry-After of the first four 429s
		last  time.Duration // and of the fifth, which makes the storm
		want  time.Duration
	}{
		{"a device's longer Retry-After last", s, 5 * s, s},
		{"a 429 without one last", 10 * s, 0, 10 * s},
		{"none at all", 0, 0, s}, // DefaultPause
	} {
		inBubble(t, c.name, func(t *testing.T) {
			h := newHarness(t, nil)
			// MinSamples is 20: 15 accepted and four 429s are not judged;
			// the fifth 429 makes a quarter, past HaltRate.
			h.send(rep(15, ok)...)
			h.send(rep(4, throttledFor(c.first))...)
			if until := h.lane().PausedUntil; until.After(h.clk.Now()) {
				t.Fatalf("paused on 19 answers, want the twentieth to decide")
			}
			h.send(throttledFor(c.last))
			if got := h.lane().PausedUntil.Sub(h.clk.Now()); got != c.want {
				t.Errorf("paused for %v, want %v", got, c.want)
			}
		})
	}
}
