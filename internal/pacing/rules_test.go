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

// TestCutAndHalt drives one origin through timelines of answers and
// compares the cuts and breaker openings it reports.
func TestCutAndHalt(t *testing.T) {
	tests := []struct {
		name      string
		edit      func(*pacing.Config)
		steps     []step
		want      []ev
		wantLimit int
	}{
		{
			name:      "above 5% 429s cuts by a quarter, with no cooldown before the first cut",
			steps:     []step{{send: storm(2, 18)}},
			want:      []ev{{0, "cut", 384}},
			wantLimit: 384,
		},
		{
			name:      "exactly 5% does not cut",
			steps:     []step{{send: storm(1, 19)}},
			wantLimit: 512,
		},
		{
			name:      "fewer than MinSamples attempts decide nothing",
			steps:     []step{{send: storm(5, 14)}},
			wantLimit: 512,
		},
		{
			name:      "WNS 406 throttling counts as a 429",
			steps:     []step{{send: cat(rep(2, wnsThrottle), rep(18, ok))}},
			want:      []ev{{0, "cut", 384}},
			wantLimit: 384,
		},
		{
			name:      "5xx are not 429s",
			steps:     []step{{send: cat(rep(2, unavailable), rep(18, ok))}},
			wantLimit: 512,
		},
		{
			name: "no second cut before the cooldown, one after it",
			steps: []step{
				{send: storm(2, 18)},
				{after: 4 * s, send: storm(4, 16)}, // 20%, 4 s after the cut
				{after: 1 * s, send: rep(1, ok)},   // 5 s after: cut
			},
			want:      []ev{{0, "cut", 384}, {5 * s, "cut", 288}},
			wantLimit: 288,
		},
		{
			name: "a storm already answered does not cut again without fresh 429s",
			steps: []step{
				{send: storm(2, 18)},
				{after: 5 * s, send: rep(1, ok)},
				{after: 5 * s, send: rep(20, ok)},
			},
			want:      []ev{{0, "cut", 384}},
			wantLimit: 384,
		},
		{
			name: "a cut mid-second is judged on the attempts after it",
			steps: []step{
				{after: 300 * time.Millisecond, send: storm(2, 18)},
				{after: 100 * time.Millisecond, send: rep(1, throttled)}, // same second as the cut
				{after: 5 * s, send: rep(1, ok)},
			},
			want:      []ev{{300 * time.Millisecond, "cut", 384}},
			wantLimit: 384,
		},
		{
			name: "never below MinLimit",
			edit: func(c *pacing.Config) { c.MaxLimit, c.MinLimit = 4, 2 },
			steps: []step{
				{send: storm(2, 18)},               // 10%
				{after: 5 * s, send: storm(3, 17)}, // 15%
				{after: 5 * s, send: storm(4, 16)}, // 20%
			},
			want:      []ev{{0, "cut", 3}, {5 * s, "cut", 2}, {10 * s, "cut", 2}},
			wantLimit: 2,
		},
		{
			name: "a cut that changed nothing is not repeated: 429s that do not follow concurrency",
			steps: []step{
				{send: storm(2, 18)},                // 10%: cut
				{after: 5 * s, send: spread(2, 20)}, // 10% again: hold
				{after: 5 * s, send: spread(2, 22)}, // 9.5% since the cut: hold
			},
			want:      []ev{{0, "cut", 384}, {5 * s, "hold", 384}, {10 * s, "hold", 384}},
			wantLimit: 384,
		},
		{
			name: "a share that fell after a cut, or rose, cuts again",
			steps: []step{
				{send: storm(3, 17)},               // 15%: cut
				{after: 5 * s, send: storm(2, 18)}, // 10%: the cut helped, cut again
				{after: 5 * s, send: storm(3, 17)}, // 15%: rose, cut again
			},
			want:      []ev{{0, "cut", 384}, {5 * s, "cut", 288}, {10 * s, "cut", 216}},
			wantLimit: 216,
		},
		{
			name:      "above 20% 429s opens the breaker and cuts",
			steps:     []step{{send: storm(5, 15)}},
			want:      []ev{{0, "open", 384}},
			wantLimit: 384,
		},
		{
			name:      "exactly 20% 429s only cuts",
			steps:     []step{{send: storm(4, 16)}},
			want:      []ev{{0, "cut", 384}},
			wantLimit: 384,
		},
		{
			name:      "above 50% 5xx opens the breaker",
			steps:     []step{{send: cat(rep(11, unavailable), rep(9, ok))}},
			want:      []ev{{0, "open", 384}},
			wantLimit: 384,
		},
		{
			name:      "above 50% transport errors opens the breaker",
			steps:     []step{{send: cat(rep(11, transport), rep(9, ok))}},
			want:      []ev{{0, "open", 384}},
			wantLimit: 384,
		},
		{
			name:      "exactly 50% errors does not",
			steps:     []step{{send: cat(rep(10, unavailable), rep(10, ok))}},
			wantLimit: 512,
		},
		{
			name:      "terminal 4xx are neither 429s nor errors",
			steps:     []step{{send: rep(30, rejected)}},
			wantLimit: 512,
		},
		{
			// Counted, the 30 deferrals would make it 5 of 50 (a cut);
			// not counted, 5 of 20 (open).
			name:      "deferred results are not attempts",
			steps:     []step{{send: cat(rep(5, throttled), rep(14, ok), rep(30, deferred), rep(1, ok))}},
			want:      []ev{{0, "open", 384}},
			wantLimit: 384,
		},
		{
			name: "after a cut, halting needs MinSamples fresh attempts",
			steps: []step{
				{send: storm(2, 18)},
				{after: 1 * s, send: storm(5, 15)},
			},
			want:      []ev{{0, "cut", 384}, {1 * s, "open", 288}},
			wantLimit: 288,
		},
		{
			name: "429s older than the window do not halt",
			steps: []step{
				{after: 1 * s, send: rep(15, throttled)}, // too few to judge
				{after: 99 * s, send: rep(20, ok)},
			},
			wantLimit: 512,
		},
		{
			name: "attempts older than the window are forgotten",
			steps: []step{
				{send: rep(3, throttled)},
				{after: 60 * s, send: rep(19, ok)}, // the 429s have left the window
				{after: 1 * s, send: rep(1, ok)},
			},
			wantLimit: 512,
		},
	}
	for _, tt := range tests {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *pacing.Config) {
				quiet(c)
				if tt.edit != nil {
					tt.edit(c)
				}
			})
			h.run(tt.steps)
			if got := h.rec.brief(); !slices.Equal(got, tt.want) {
				t.Errorf("events = %v, want %v", got, tt.want)
			}
			if got := h.lane().Limit; got != tt.wantLimit {
				t.Errorf("limit = %d, want %d", got, tt.wantLimit)
			}
		})
	}
}

// TestCutToSustained: a cut goes further than CutFactor, to 1.5 times the
// concurrency the origin sustained (Little's law over the time sends were
// in flight) when that is lower. Waves of 48 sends answered after 125 ms
// sustain 48 in flight; the 429s of the last wave trigger the cut.
func TestCutToSustained(t *testing.T) {
	const lat = 125 * time.Millisecond
	okWave := rep(48, ok)
	tests := []struct {
		name string
		run  func(h *harness)
		want []ev
	}{
		{
			// 96 deliveries × 0.125 s over 0.375 s in flight: 32; × 1.5.
			name: "32 in flight sustained: cut to 48, not 384",
			run: func(h *harness) {
				h.wave(lat, okWave)
				h.wave(lat, okWave)
				h.wave(lat, storm(6, 42)) // cut at the 6th 429: 6 of 102
			},
			want: []ev{{375 * time.Millisecond, "cut", 48}},
		},
		{
			name: "idle time before the storm does not count",
			run: func(h *harness) {
				h.wave(lat, okWave)
				h.clk.Advance(10 * time.Minute)
				h.wave(lat, okWave)
				h.wave(lat, storm(3, 45)) // 3 of 51 in the window
			},
			want: []ev{{10*time.Minute + 375*time.Millisecond, "cut", 48}},
		},
		{
			// 800 × 0.125 s over 0.375 s: 267; × 1.5 = 400 > 384.
			name: "sustained above the cut: cut by a quarter",
			run: func(h *harness) {
				h.wave(lat, rep(400, ok))
				h.wave(lat, rep(400, ok))
				h.wave(lat, storm(43, 357)) // 43 of 843
			},
			want: []ev{{375 * time.Millisecond, "cut", 384}},
		},
	}
	for _, tt := range tests {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, quiet)
			tt.run(h)
			if got := h.rec.brief(); !slices.Equal(got, tt.want) {
				t.Errorf("events = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOpenEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, quiet)
		h.clk.Advance(2 * s)
		h.send(cat(rep(11, unavailable), rep(4, throttled), rep(5, ok))...)
		got := h.rec.all()
		want := []pacing.Event{{At: base.Add(2 * s), Origin: origin, Kind: pacing.Open, Limit: 384, Rate: 0.55, Until: base.Add(12 * s)}}
		if !slices.Equal(got, want) {
			t.Errorf("events = %+v, want %+v", got, want)
		}
	})
}

// TestRaise: after CalmFor below CalmRate over the whole window, +10% (at
// least +1) every RaiseEvery up to MaxLimit. Each timeline starts with a
// cut at 0 s; its 429s leave the window at 60 s.
func TestRaise(t *testing.T) {
	okEvery10s := func(n int) []step { return every(10*s, n, rep(1, ok)) }
	tests := []struct {
		name  string
		edit  func(*pacing.Config)
		steps []step
		want  []ev
	}{
		{
			name:  "+10% every 30 s after 120 s calm, capped at MaxLimit",
			steps: steps([]step{{send: storm(2, 18)}}, okEvery10s(40)),
			want: []ev{
				{0, "cut", 384},
				{180 * s, "raise", 422}, {210 * s, "raise", 464}, {240 * s, "raise", 511}, {270 * s, "raise", 512},
			},
		},
		{
			name:  "at least +1",
			edit:  func(c *pacing.Config) { c.MaxLimit = 10 },
			steps: steps([]step{{send: storm(2, 18)}}, okEvery10s(40)),
			want: []ev{
				{0, "cut", 7}, // 7.5
				{180 * s, "raise", 8}, {210 * s, "raise", 9}, {240 * s, "raise", 10},
			},
		},
		{
			name: "no raise while the 429 share is 1% or more",
			steps: steps([]step{{send: storm(2, 18)}},
				every(10*s, 60, cat(rep(49, ok), rep(1, throttled)))), // 2%
			want: []ev{{0, "cut", 384}},
		},
		{
			name: "a 429 restarts the calm period",
			steps: steps([]step{{send: storm(2, 18)}},
				okEvery10s(14), // calm since 60 s
				[]step{{after: 10 * s, send: rep(1, throttled)}}, // 150 s: in the window until 210 s
				okEvery10s(25)),
			want: []ev{{0, "cut", 384}, {330 * s, "raise", 422}, {360 * s, "raise", 464}, {390 * s, "raise", 511}},
		},
		{
			name:  "no raise at MaxLimit",
			steps: okEvery10s(40),
		},
	}
	for _, tt := range tests {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *pacing.Config) {
				quiet(c)
				if tt.edit != nil {
					tt.edit(c)
				}
			})
			h.run(tt.steps)
			if got := h.rec.brief(); !slices.Equal(got, tt.want) {
				t.Errorf("events = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestBreaker opens the breaker at 0 s (until 10 s) and checks that no
// slot is granted while open, that half-open grants at most Probes, and
// what a probe's answer does.
func TestBreaker(t *testing.T) {
	open := func(t *testing.T) *harness {
		t.Helper()
		h := newHarness(t, quiet)
		h.send(storm(5, 15)...)
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
		want := []ev{{0, "open", 384}, {10 * s, "half-open", 384}}
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
		{"success closes", ok, []ev{{11 * s, "closed", 384}}, pacing.Closed, 384},
		{"429 reopens", throttled, []ev{{11 * s, "open", 288}}, pacing.Open, 288},
		{"503 reopens", unavailable, []ev{{11 * s, "open", 288}}, pacing.Open, 288},
		{"transport error reopens", transport, []ev{{11 * s, "open", 288}}, pacing.Open, 288},
		{"deferred probe frees its place", deferred, nil, pacing.HalfOpen, 384},
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
// DefaultPause) and no other.
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
		h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = 2; c.SenderWideSubs = 3 })
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
		// calm: 1 of 20 throttled.
		sendTo("https://calm", storm(1, 19)...)
		// halted: 5 of 20 throttled, from distinct subscriptions spread
		// so that no three fall in 10 s.
		for i := range 5 {
			h.clk.Advance(6 * s)
			sendTo("https://halted", throttled)
			if i < 4 {
				sendTo("https://halted", rep(3, ok)...)
			}
		}
		sendTo("https://halted", rep(3, ok)...) // 30 s: opens until 40 s
		// paused: three distinct subscriptions throttled, Retry-After 20 s.
		sendTo("https://paused", rep(3, throttledFor(20*s))...) // until 50 s

		tests := []struct {
			at   time.Duration
			want []pacing.LaneState
		}{
			{30 * s, []pacing.LaneState{
				{Origin: "https://busy", Limit: 2, InFlight: 2, Waiting: 1, Breaker: pacing.Closed},
				{Origin: "https://calm", Limit: 2, Rate429: 0.05, Breaker: pacing.Closed},
				{Origin: "https://halted", Limit: 1, Rate429: 0.25, Breaker: pacing.Open},
				{Origin: "https://paused", Limit: 2, Rate429: 1, Breaker: pacing.Closed, PausedUntil: base.Add(50 * s)},
			}},
			{45 * s, []pacing.LaneState{
				{Origin: "https://busy", Limit: 2, InFlight: 2, Waiting: 1, Breaker: pacing.Closed},
				{Origin: "https://calm", Limit: 2, Rate429: 0.05, Breaker: pacing.Closed},
				{Origin: "https://halted", Limit: 1, Rate429: 0.25, Breaker: pacing.HalfOpen},
				{Origin: "https://paused", Limit: 2, Rate429: 1, Breaker: pacing.Closed, PausedUntil: base.Add(50 * s)},
			}},
			{95 * s, []pacing.LaneState{ // everything older than 60 s is out of the window
				{Origin: "https://busy", Limit: 2, InFlight: 2, Waiting: 1, Breaker: pacing.Closed},
				{Origin: "https://calm", Limit: 2, Breaker: pacing.Closed},
				{Origin: "https://halted", Limit: 1, Breaker: pacing.HalfOpen},
				{Origin: "https://paused", Limit: 2, Breaker: pacing.Closed, PausedUntil: base.Add(50 * s)},
			}},
		}
		for _, tt := range tests {
			h.clk.Advance(tt.at - h.clk.Now().Sub(base))
			got := h.p.Lanes()
			slices.SortFunc(got, func(a, b pacing.LaneState) int { return strings.Compare(a.Origin, b.Origin) })
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

// TestFreshEvidence: after a cut, open or close only the results of sends
// granted since then count; what was in flight when the pacer reacted is
// no evidence that the reaction was not enough.
func TestFreshEvidence(t *testing.T) {
	tests := []struct {
		name string
		run  func(h *harness)
		want []ev
	}{
		{
			name: "429s of sends in flight at a cut do not halt",
			run: func(h *harness) {
				// All granted at 0 s; the cut comes at the 20th answer.
				h.wave(100*time.Millisecond, cat(storm(2, 18), rep(40, throttled)))
			},
			// One latency of evidence is too little for Little's law: by
			// a quarter.
			want: []ev{{100 * time.Millisecond, "cut", 384}},
		},
		{
			name: "429s of sends granted after the cut do",
			run: func(h *harness) {
				h.wave(100*time.Millisecond, cat(storm(2, 18), rep(40, throttled)))
				h.clk.Advance(1 * s)
				h.send(storm(5, 15)...)
			},
			want: []ev{{100 * time.Millisecond, "cut", 384}, {1100 * time.Millisecond, "open", 288}},
		},
	}
	for _, tt := range tests {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, quiet)
			tt.run(h)
			if got := h.rec.brief(); !slices.Equal(got, tt.want) {
				t.Errorf("events = %v, want %v", got, tt.want)
			}
		})
	}
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
		h := newHarness(t, quiet)
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
		h := newHarness(t, quiet)
		for range 40 {
			h.acquire(failing(h)).Done(unavailable)
		}
		h.send(cat(rep(11, unavailable), rep(9, ok))...) // 55% of the others
		if got := h.lane().Breaker; got != pacing.Open {
			t.Errorf("breaker = %q, want open", got)
		}
	})
	inBubble(t, "their 429s count", func(t *testing.T) {
		h := newHarness(t, quiet)
		for range 5 {
			h.acquire(failing(h)).Done(throttled)
		}
		h.send(rep(15, ok)...)
		if got := h.lane().Breaker; got != pacing.Open {
			t.Errorf("breaker = %q, want open", got)
		}
	})
	inBubble(t, "a failing probe leaves the next probe to decide", func(t *testing.T) {
		h := newHarness(t, quiet)
		h.send(storm(5, 15)...) // open until 10 s
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

// spread is k 429s spread evenly over n answers, the last one a 429.
func spread(k, n int) []push.Result {
	out := rep(n, ok)
	for i := range k {
		out[n-1-i*n/k] = throttled
	}
	return out
}

// TestConfidence: with Confidence set, a share must be above its
// threshold beyond chance before the pacer acts. Devices throttled one by
// one at about 5% move a share of 30 attempts by 3.3 points a 429: judged
// plainly, they cut a healthy origin again and again.
func TestConfidence(t *testing.T) {
	conf := func(c *pacing.Config) { c.Confidence, c.MinSamples = 0.95, 30 }
	tests := []struct {
		name  string
		steps []step
		want  []ev
	}{
		{"3 of 30 (10%) is noise at 5%", []step{{send: spread(3, 30)}}, nil},
		{"6 of 30 (20%) is not", []step{{send: spread(6, 30)}}, []ev{{0, "cut", 384}}},
		{"60 of 1000 (6%) is noise", []step{{send: spread(60, 1000)}}, nil},
		{"90 of 1000 (9%) is not", []step{{send: spread(90, 1000)}}, []ev{{0, "cut", 384}}},
		{"7 of 30 (23%) halts: halts take the plain share", []step{{send: spread(7, 30)}}, []ev{{0, "open", 384}}},
	}
	for _, tt := range tests {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *pacing.Config) { conf(c); quiet(c) })
			h.run(tt.steps)
			if got := h.rec.brief(); !slices.Equal(got, tt.want) {
				t.Errorf("events = %v, want %v", got, tt.want)
			}
		})
	}
}
