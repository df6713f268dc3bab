package pacing_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/tiers"
)

type throttleAt struct {
	at  time.Duration
	sub string
	ra  time.Duration
}

// maxHold is the longest pause tier 1 waits out in Acquire instead of
// being deferred (pacer.go).
const maxHold = 2 * time.Second

// TestSenderWidePause: enough distinct subscriptions throttled within
// SenderWideWindow pause the whole origin until max(Retry-After,
// DefaultPause) after the last. Tiers 2 and 3 are deferred until then;
// tier 1 too while more than maxHold remains, and after that it waits in
// Acquire and is let through when the pause ends.
func TestSenderWidePause(t *testing.T) {
	five := func(ra time.Duration) []throttleAt {
		return []throttleAt{{0, "a", ra}, {0, "b", ra}, {0, "c", ra}, {0, "d", ra}, {0, "e", ra}}
	}
	tests := []struct {
		name      string
		okBefore  int // deliveries at 0 s, before the throttles
		throttles []throttleAt
		wantUntil time.Duration // 0: no pause
		subPaused string        // a subscription that stays paused
	}{
		{name: "five distinct subscriptions, Retry-After 3 s", throttles: five(3 * s), wantUntil: 3 * s},
		{name: "Retry-After 30 s is the pause", throttles: five(30 * s), wantUntil: 30 * s},
		{name: "no Retry-After: DefaultPause", throttles: five(0), wantUntil: 1 * s},
		{name: "Retry-After below DefaultPause: DefaultPause", throttles: five(200 * time.Millisecond), wantUntil: 1 * s},
		{name: "four distinct subscriptions", throttles: five(3 * s)[:4]},
		{
			name: "the Retry-After of the fifth decides",
			throttles: []throttleAt{
				{0, "a", 60 * s}, {0, "b", 60 * s}, {0, "c", 60 * s}, {0, "d", 60 * s}, {0, "e", 2 * s},
			},
			wantUntil: 2 * s,
		},
		{
			name: "five within 10 s",
			throttles: []throttleAt{
				{0, "a", 0}, {2 * s, "b", 0}, {4 * s, "c", 0}, {6 * s, "d", 0}, {9 * s, "e", 3 * s},
			},
			wantUntil: 12 * s,
		},
		{
			name:      "five among 95 deliveries: 5%, left to the cuts, no pause",
			okBefore:  95,
			throttles: five(3 * s),
		},
		{
			name:      "five among 94 deliveries: above SenderWideRate, pause",
			okBefore:  94,
			throttles: five(3 * s),
			wantUntil: 3 * s,
		},
		{
			name: "five spread over more than 10 s",
			throttles: []throttleAt{
				{0, "a", 0}, {3 * s, "b", 0}, {6 * s, "c", 0}, {9 * s, "d", 0}, {12 * s, "e", 3 * s},
			},
		},
		{
			name: "five from one subscription pause only it",
			throttles: []throttleAt{
				{0, "a", 1 * s}, {1 * s, "a", 1 * s}, {2 * s, "a", 1 * s}, {3 * s, "a", 1 * s}, {4 * s, "a", 1 * s},
			},
			subPaused: "a",
		},
	}
	for _, tt := range tests {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.send(rep(tt.okBefore, ok)...)
			for _, th := range tt.throttles {
				h.clk.Advance(th.at - h.clk.Now().Sub(base))
				h.acquire(pacing.Request{Origin: origin, Sub: th.sub, Tier: tiers.Tier1}).Done(throttledFor(th.ra))
			}
			var pauses []pacing.Event
			for _, e := range h.rec.all() {
				if e.Kind == "pause" {
					pauses = append(pauses, e)
				}
			}
			if tt.wantUntil == 0 {
				if len(pauses) != 0 {
					t.Errorf("pauses = %+v, want none", pauses)
				}
				if tt.subPaused != "" {
					if !h.p.SubscriptionPaused(tt.subPaused) {
						t.Errorf("SubscriptionPaused(%s) = false, want true", tt.subPaused)
					}
					if slot, _ := h.p.Acquire(context.Background(), pacing.Request{Origin: origin, Sub: tt.subPaused, Tier: tiers.Tier1}); slot != nil {
						t.Errorf("Acquire(%s) granted, want deferred", tt.subPaused)
					}
				}
				for _, tier := range tiers.All {
					h.acquire(h.req(tier, false)).Done(ok)
				}
				return
			}

			until := base.Add(tt.wantUntil)
			if len(pauses) != 1 || !pauses[0].Until.Equal(until) {
				t.Errorf("pauses = %+v, want one until %s", pauses, tt.wantUntil)
			}
			if got := h.lane().PausedUntil; !got.Equal(until) {
				t.Errorf("PausedUntil = %s, want %s", got.Sub(base), tt.wantUntil)
			}
			deferredUntil := func(tier tiers.Tier) {
				t.Helper()
				if slot, got := h.p.Acquire(context.Background(), h.req(tier, false)); slot != nil || !got.Equal(until) {
					t.Errorf("at %s Acquire(%s) = %v, %s; want nil, %s", h.clk.Now().Sub(base), tier, slot != nil, got.Sub(base), tt.wantUntil)
				}
			}
			// More than maxHold left: every tier is deferred.
			if until.Sub(h.clk.Now()) > maxHold {
				for _, tier := range tiers.All {
					deferredUntil(tier)
				}
				h.clk.Advance(until.Sub(h.clk.Now()) - maxHold)
			}
			// maxHold or less: tier 1 waits for the end of the pause.
			out := make(chan got, 1)
			h.spawn(context.Background(), "tier1", h.req(tiers.Tier1, false), out)
			synctest.Wait()
			deferredUntil(tiers.Tier2)
			deferredUntil(tiers.Tier3)
			if got := h.lane().Waiting; got != 1 {
				t.Fatalf("waiting = %d, want the tier-1 request", got)
			}
			h.clk.Advance(until.Sub(h.clk.Now()))
			g := next(t, out)
			if g.slot == nil || g.at != tt.wantUntil {
				t.Errorf("tier 1 got a slot %v at %s, want one at %s", g.slot != nil, g.at, tt.wantUntil)
			} else {
				g.slot.Done(ok)
			}
			h.acquire(h.req(tiers.Tier3, false)).Done(ok)
		})
	}
}

// TestHaltedWaiters: when the breaker opens or the origin is paused, queued
// requests go back to the ladder with the time to wait; only tier 1 waits
// out a short pause. The limit is 5, held by five sends; four tier-1
// fillers queue first and take the slots freed by the first four answers,
// so the fifth answer halts the origin with the waiters under test queued.
func TestHaltedWaiters(t *testing.T) {
	tests := []struct {
		name       string
		edit       func(*pacing.Config)
		answer     push.Result
		wantUntil  time.Duration
		wantHeldT1 bool // tier 1 stays queued and is granted at wantUntil
		wantEvents []string
	}{
		{
			name:       "breaker opens: every tier goes back",
			edit:       func(c *pacing.Config) { c.MinSamples = 5; quiet(c) },
			answer:     throttled,
			wantUntil:  10 * s,
			wantEvents: []string{pacing.Open},
		},
		{
			name:       "long pause: every tier goes back",
			answer:     throttledFor(7 * s),
			wantUntil:  7 * s,
			wantEvents: []string{"pause"},
		},
		{
			name:       "short pause: tier 1 waits it out, the others go back",
			answer:     throttledFor(maxHold),
			wantUntil:  maxHold,
			wantHeldT1: true,
			wantEvents: []string{"pause"},
		},
	}
	for _, tt := range tests {
		inBubble(t, tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *pacing.Config) {
				c.MaxLimit = 5
				c.Weights = [3]int{100, 1, 1} // the fillers go first
				if tt.edit != nil {
					tt.edit(c)
				}
			})
			held := h.saturate(5)
			fillers := make(chan got, 4)
			for range 4 {
				h.spawn(context.Background(), "filler", h.req(tiers.Tier1, false), fillers)
			}
			synctest.Wait()
			out := make(chan got, 3)
			for _, tier := range tiers.All {
				h.spawn(context.Background(), tier.String(), h.req(tier, false), out)
			}
			synctest.Wait()
			for _, sl := range held {
				sl.Done(tt.answer)
			}
			synctest.Wait()
			for range 4 {
				if g := next(t, fillers); g.slot == nil {
					t.Fatalf("a filler was deferred")
				} else {
					defer g.slot.Done(ok)
				}
			}
			wantWaiting := 0
			if tt.wantHeldT1 {
				wantWaiting = 1
			}
			if got := h.lane().Waiting; got != wantWaiting {
				t.Errorf("waiting after the halt = %d, want %d", got, wantWaiting)
			}
			h.clk.Advance(tt.wantUntil)
			for range 3 {
				g := next(t, out)
				switch {
				case g.req.Tier == tiers.Tier1 && tt.wantHeldT1:
					if g.slot == nil || g.at != tt.wantUntil {
						t.Errorf("tier 1: slot %v at %s, want one at %s", g.slot != nil, g.at, tt.wantUntil)
					}
					if g.slot != nil {
						g.slot.Done(ok)
					}
				case g.slot != nil || g.at != 0 || !g.until.Equal(base.Add(tt.wantUntil)):
					t.Errorf("%s: slot %v at %s until %s, want deferred at 0s until %s", g.name, g.slot != nil, g.at, g.until.Sub(base), tt.wantUntil)
				}
			}
			var kinds []string
			for _, e := range h.rec.all() {
				kinds = append(kinds, e.Kind)
			}
			if len(kinds) != len(tt.wantEvents) || (len(kinds) > 0 && kinds[0] != tt.wantEvents[0]) {
				t.Errorf("events = %v, want %v", kinds, tt.wantEvents)
			}
		})
	}
}

// TestRateAfterPause: a sender-wide pause teaches the lane the rate the
// origin sustained (95% of the deliveries per second over the last 10 s);
// afterwards tiers 2 and 3 queue for tokens at that rate while tier 1
// goes straight through.
func TestRateAfterPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		// 10 deliveries a second, 0 s to 9 s; six throttled at 9.5 s, so
		// that the throttled share (6 of 106) is above SenderWideRate:
		// paused 9.5 s to 10.5 s; learnt: 95% of 100 in 10 s.
		pauseAfter(t, h, 10, "")
		h.clk.Advance(1 * s)

		out := make(chan got, 20)
		for range 20 {
			h.spawn(context.Background(), "", h.req(tiers.Tier3, false), out)
		}
		synctest.Wait()
		t1 := h.acquire(h.req(tiers.Tier1, false)) // not held back
		h.clk.Advance(1 * s)
		granted := len(out)
		if granted < 9 || granted > 11 {
			t.Errorf("tier-3 grants in the first second = %d, want about 9.5", granted)
		}
		h.clk.Advance(2 * s)
		if got := len(out); got != 20 {
			t.Errorf("tier-3 grants after 3 s = %d, want all 20", got)
		}
		t1.Done(ok)
		for range 20 {
			if g := next(t, out); g.slot != nil {
				g.slot.Done(ok)
			} else {
				t.Errorf("a tier-3 request was deferred")
			}
		}
	})
}

// TestTier1Debt: tier 1 is never held back by a learnt rate, but what it
// sends past it is owed by the lower tiers, up to half a second of the
// rate: after a pause the tier-1 requests that waited it out go at once,
// and with a debt of a tenth of a second the lower tiers sent at the full
// rate beside them, over the limit the origin had just signalled
// (bench d: 5–10 % 429s).
func TestTier1Debt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = 1000 })
		// Learnt: 95% of 100 a second.
		pauseAfter(t, h, 100, "")
		h.clk.Advance(1 * s)
		var t1 []*pacing.Slot
		for range 200 {
			t1 = append(t1, h.acquire(h.req(tiers.Tier1, false)))
		}
		out := make(chan got, 200)
		for range 200 {
			h.spawn(context.Background(), "", h.req(tiers.Tier3, false), out)
		}
		synctest.Wait()
		h.clk.Advance(1 * s)
		// 95 tokens in the second, 47.5 of them owed: about 47.
		if granted := len(out); granted < 40 || granted > 55 {
			t.Errorf("tier-3 grants in the second after 200 tier-1 sends = %d, want about 47 (half a second of 95/s owed)", granted)
		}
		for _, sl := range t1 {
			sl.Done(ok)
		}
		h.clk.Advance(3 * s)
		for range 200 {
			if g := next(t, out); g.slot != nil {
				g.slot.Done(ok)
			} else {
				t.Fatal("a tier-3 request was deferred")
			}
		}
	})
}

// TestRateLapse: a learnt rate lapses 30 s after the pause that taught it;
// a lower tier arriving then, with the tokens of that rate spent, goes
// straight through instead of queueing for a token no timer will bring.
func TestRateLapse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		pauseAfter(t, h, 10, "")
		h.clk.Advance(1 * s)
		// Tier 1 overdraws the tokens.
		for range 5 {
			h.acquire(h.req(tiers.Tier1, false)).Done(ok)
		}
		h.clk.Advance(31 * s)
		out := make(chan got, 1)
		h.spawn(context.Background(), "", h.req(tiers.Tier3, true), out)
		synctest.Wait()
		if len(out) != 1 {
			t.Fatalf("a tier-3 retry after the learnt rate lapsed is still waiting; want it granted at once")
		}
		if g := next(t, out); g.slot == nil {
			t.Errorf("deferred, want granted")
		} else {
			g.slot.Done(ok)
		}
	})
}

// TestRateEpisode: a learnt rate cap lasts 30 s from the pause that first
// taught it. A later pause may lower it but does not prolong it: else every
// pause caused by devices throttled one by one would lower and renew the
// cap, for good.
func TestRateEpisode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, nil)
		pauseAfter(t, h, 100, "a") // 0–9.5 s: learnt 95/s
		h.clk.Advance(1 * s)
		pauseAfter(t, h, 85, "b") // 10.5–20 s: lowered to 0.95 × 76.5 = 72.7/s
		synctest.Wait()
		if pauses := countKind(h.rec.all(), "pause"); pauses != 2 {
			t.Fatalf("%d pauses, want 2: %v", pauses, h.rec.brief())
		}
		h.clk.Advance(1 * s)
		out := make(chan got, 500)
		for range 200 {
			h.spawn(context.Background(), "", h.req(tiers.Tier3, false), out)
		}
		synctest.Wait()
		h.clk.Advance(1 * s)
		if granted := len(out); granted < 66 || granted > 80 {
			t.Errorf("tier-3 grants in a second after the second pause = %d, want about 73; events %v", granted, h.rec.brief())
		}
		h.clk.Advance(2 * s) // the rest of the 200
		for range 200 {
			if g := next(t, out); g.slot != nil {
				g.slot.Done(ok)
			} else {
				t.Fatal("a tier-3 request was deferred")
			}
		}
		// 24 s now; at 41 s the cap learnt at 9.5 s has lapsed although
		// the second pause came at 20 s: every tier-3 request goes at once.
		h.clk.Advance(17 * s)
		for range 250 {
			h.spawn(context.Background(), "", h.req(tiers.Tier3, false), out)
		}
		synctest.Wait()
		if granted := len(out); granted != 250 {
			t.Errorf("tier-3 grants 31 s after the cap was learnt = %d, want all 250 (the cap lapsed)", granted)
		}
		for len(out) > 0 {
			if g := next(t, out); g.slot != nil {
				g.slot.Done(ok)
			}
		}
	})
}

func countKind(evs []pacing.Event, kind string) int {
	n := 0
	for _, e := range evs {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// pauseAfter sends perSec deliveries a second for 10 s (tier 1), then
// throttles distinct subscriptions (prefix0, prefix1, …) until the origin
// is paused: the sender-wide rule, which learns a rate from those 10 s.
func pauseAfter(t *testing.T, h *harness, perSec int, prefix string) {
	t.Helper()
	for i := range 10 {
		if i > 0 {
			h.clk.Advance(1 * s)
		}
		h.send(rep(perSec, ok)...)
	}
	h.clk.Advance(500 * time.Millisecond)
	before := countKind(h.rec.all(), "pause")
	for i := 0; countKind(h.rec.all(), "pause") == before; i++ {
		if i == 100 {
			t.Fatalf("no pause after 100 throttled subscriptions: %v", h.rec.brief())
		}
		h.acquire(pacing.Request{Origin: origin, Sub: fmt.Sprintf("%s%d", prefix, i), Tier: tiers.Tier1}).Done(throttled)
	}
}

// TestSenderWideNoise: devices throttled one by one at the sender-wide
// share itself (5%, as FCM and APNs do per device; the ledger mix has
// them) must not pause the origin, though the rule looks again at every
// 429: judged with the plain confidence at each look, one of the hundreds
// of looks a second found a run of them above 5% and stopped every tier.
func TestSenderWideNoise(t *testing.T) {
	for seed := range uint64(5) {
		inBubble(t, fmt.Sprintf("seed %d", seed), func(t *testing.T) {
			h := newHarness(t, func(c *pacing.Config) { c.Confidence = 0.95 })
			rng := rand.New(rand.NewPCG(seed, 1))
			for range 200 { // 20,000 sends in 20 s
				for range 100 {
					r := ok
					if rng.Float64() < 0.05 {
						r = throttledFor(5 * s)
					}
					h.send(r)
				}
				h.clk.Advance(100 * time.Millisecond)
			}
			if n := countKind(h.rec.all(), "pause"); n > 0 {
				t.Errorf("%d sender-wide pauses from per-device 429s at 5%%: %v", n, h.rec.brief())
			}
		})
	}
}
