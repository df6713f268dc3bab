package pacing_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/tiers"
)

// The tests here queue requests in goroutines inside a synctest bubble:
// synctest.Wait returns once every one of them is blocked in Acquire (or
// has returned), so Lanes().Waiting and the order of arrival are exact.

// saturate takes every slot of the origin with tier-1 first attempts.
func (h *harness) saturate(limit int) []*pacing.Slot {
	h.t.Helper()
	held := make([]*pacing.Slot, 0, limit)
	for range limit {
		held = append(held, h.acquire(h.req(tiers.Tier1, false)))
	}
	return held
}

// TestWeightedShares saturates an origin, queues many waiters of the
// given tiers and counts which tier each freed slot goes to.
func TestWeightedShares(t *testing.T) {
	const (
		limit    = 10
		releases = 700
		perTier  = releases // no tier can run dry
	)
	tests := []struct {
		name    string
		waiting []tiers.Tier
		want    [3]int // grants per tier
	}{
		{"all three tiers: 6:3:1", tiers.All, [3]int{420, 210, 70}},
		{"tier 3 alone gets every slot", []tiers.Tier{tiers.Tier3}, [3]int{0, 0, 700}},
		{"tier 2 idle: its share is lent, 6:1", []tiers.Tier{tiers.Tier1, tiers.Tier3}, [3]int{600, 0, 100}},
		{"tier 1 idle: 3:1", []tiers.Tier{tiers.Tier2, tiers.Tier3}, [3]int{0, 525, 175}},
		{"tier 1 alone", []tiers.Tier{tiers.Tier1}, [3]int{700, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = limit; c.QueueLimit = 10_000 })
				held := h.saturate(limit)
				out := make(chan got, perTier*len(tt.waiting))
				// Interleaved arrivals: a FIFO queue would share evenly.
				for range perTier {
					for _, tier := range tt.waiting {
						h.spawn(context.Background(), "", h.req(tier, false), out)
					}
				}
				synctest.Wait()
				if got, want := h.lane().Waiting, perTier*len(tt.waiting); got != want {
					t.Fatalf("waiting = %d, want %d", got, want)
				}

				var grants [3]int
				for range releases {
					held[0].Done(ok)
					held = held[1:]
					g := next(t, out)
					if g.slot == nil {
						t.Fatalf("a waiter was deferred")
					}
					grants[g.req.Tier-1]++
					held = append(held, g.slot)
					if l := h.lane(); l.InFlight != limit {
						t.Fatalf("in flight = %d, want %d", l.InFlight, limit)
					}
				}
				// ±2 points of the releases: a FIFO (1:1:1) or strict
				// priority scheduler is far outside.
				tol := releases / 50
				for i := range grants {
					if math.Abs(float64(grants[i]-tt.want[i])) > float64(tol) {
						t.Errorf("grants per tier = %v, want %v ± %d", grants, tt.want, tol)
						break
					}
				}

				h.p.Close()
				for range perTier*len(tt.waiting) - releases {
					if g := next(t, out); g.slot != nil {
						t.Errorf("granted after Close")
					}
				}
				for _, sl := range held {
					sl.Done(ok)
				}
			})
		})
	}
}

// TestOldestFirstWithinTier: within a tier, first attempts and retries
// alike are served in order of arrival (while the retry budget allows).
func TestOldestFirstWithinTier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = 10 })
		held := h.saturate(10)
		out := make(chan got, 4)
		for i, retry := range []bool{false, true, false, true} {
			h.spawn(context.Background(), fmt.Sprint(i), h.req(tiers.Tier2, retry), out)
			synctest.Wait() // fixes the order of arrival
		}
		// Each release frees one slot, for exactly one waiter.
		var order []string
		for i := range 4 {
			held[i].Done(ok)
			g := next(t, out)
			order = append(order, g.name)
			held = append(held, g.slot)
		}
		if want := []string{"0", "1", "2", "3"}; !slices.Equal(order, want) {
			t.Errorf("order = %v, want %v", order, want)
		}
		for _, sl := range held[4:] {
			sl.Done(ok)
		}
	})
}

// TestRetryBudget: while first attempts wait, retries hold at most
// max(1, RetryShare×limit) slots; with none waiting, any number.
func TestRetryBudget(t *testing.T) {
	tests := []struct {
		name        string
		limit       int
		firstTier   tiers.Tier // of the first attempts waiting; 0: none
		wantRetries int        // most retries in flight
	}{
		{"limit 10: 2", 10, tiers.Tier1, 2},
		{"limit 20: 4", 20, tiers.Tier1, 4},
		{"limit 8: 1, not 2", 8, tiers.Tier1, 1},
		{"limit 3: at least 1", 3, tiers.Tier1, 1},
		{"limit 1: at least 1", 1, tiers.Tier1, 1},
		{"tier-1 retries against tier-3 first attempts", 10, tiers.Tier3, 2},
		{"no first attempts waiting: no budget", 10, 0, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				releases := 20 * tt.limit
				h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = tt.limit; c.QueueLimit = 10_000 })
				held := make([]got, 0, tt.limit)
				for _, sl := range h.saturate(tt.limit) {
					held = append(held, got{slot: sl})
				}
				out := make(chan got, 2*releases)
				waiting := 0
				for range releases { // retries first: they are the oldest
					h.spawn(context.Background(), "", h.req(tiers.Tier1, true), out)
					waiting++
				}
				synctest.Wait()
				if tt.firstTier != 0 {
					for range releases { // never run dry
						h.spawn(context.Background(), "", h.req(tt.firstTier, false), out)
						waiting++
					}
				}
				synctest.Wait()

				most := 0
				for range releases {
					held[0].slot.Done(ok)
					held = held[1:]
					g := next(t, out)
					waiting--
					held = append(held, g)
					retries := 0
					for _, x := range held {
						if x.req.Retry {
							retries++
						}
					}
					most = max(most, retries)
				}
				if most != tt.wantRetries {
					t.Errorf("most retries in flight = %d, want %d", most, tt.wantRetries)
				}

				h.p.Close()
				for range waiting {
					next(t, out)
				}
				for _, x := range held {
					x.slot.Done(ok)
				}
			})
		})
	}
}

// TestQueueLimit: at QueueLimit waiters an arrival evicts the newest waiter
// of the lowest tier strictly below its own, or is deferred itself (a start
// rate of 1/s keeps the rate's part of the limit, two seconds of it, below
// QueueLimit).
func TestQueueLimit(t *testing.T) {
	type arrival struct {
		name string
		tier tiers.Tier
	}
	tests := []struct {
		name         string
		queued       []arrival // QueueLimit = len(queued)
		arrive       tiers.Tier
		wantDeferred string // "new": the arrival itself
	}{
		{"tier 1 evicts the newest tier 3", []arrival{{"t3a", tiers.Tier3}, {"t3b", tiers.Tier3}}, tiers.Tier1, "t3b"},
		{"lowest tier first", []arrival{{"t3a", tiers.Tier3}, {"t2a", tiers.Tier2}}, tiers.Tier1, "t3a"},
		{"tier 2 evicts tier 3, not tier 1", []arrival{{"t1a", tiers.Tier1}, {"t3a", tiers.Tier3}}, tiers.Tier2, "t3a"},
		{"tier 1 evicts tier 2", []arrival{{"t2a", tiers.Tier2}, {"t1a", tiers.Tier1}}, tiers.Tier1, "t2a"},
		{"tier 3 at a full queue is deferred", []arrival{{"t3a", tiers.Tier3}, {"t3b", tiers.Tier3}}, tiers.Tier3, "new"},
		{"tier 2 does not evict its own tier", []arrival{{"t2a", tiers.Tier2}, {"t1a", tiers.Tier1}}, tiers.Tier2, "new"},
		{"tier 1 at a queue of tier 1 is deferred", []arrival{{"t1a", tiers.Tier1}, {"t1b", tiers.Tier1}}, tiers.Tier1, "new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHarness(t, func(c *pacing.Config) {
					c.MaxLimit = 1
					c.QueueLimit = len(tt.queued)
					c.ShedAfter = 0
					c.StartRate = 1
				})
				held := h.saturate(1)
				out := make(chan got, len(tt.queued)+1)
				for _, a := range tt.queued {
					h.spawn(context.Background(), a.name, h.req(a.tier, false), out)
					synctest.Wait()
				}
				h.spawn(context.Background(), "new", h.req(tt.arrive, false), out)
				synctest.Wait()

				select {
				case g := <-out:
					if g.name != tt.wantDeferred || g.slot != nil || !g.until.IsZero() {
						t.Errorf("returned: %s (slot %v, until %v), want %s deferred", g.name, g.slot != nil, g.until, tt.wantDeferred)
					}
				default:
					t.Errorf("nobody deferred, want %s", tt.wantDeferred)
				}
				if got, want := h.lane().Waiting, len(tt.queued); got != want {
					t.Errorf("waiting = %d, want %d", got, want)
				}

				h.p.Close()
				for range tt.queued {
					next(t, out)
				}
				held[0].Done(ok)
			})
		})
	}
}

// TestShedAfter: a healthy origin's full queue takes a burst as long as it
// keeps moving; once its oldest waiter has stood ShedAfter, the lowest
// tier is shed.
func TestShedAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = 1; c.QueueLimit = 2; c.ShedAfter = time.Second; c.StartRate = 1 })
		held := h.saturate(1)
		out := make(chan got, 8)
		for _, name := range []string{"a", "b", "c"} {
			h.spawn(context.Background(), name, h.req(tiers.Tier3, false), out)
			synctest.Wait()
		}
		select {
		case g := <-out:
			t.Fatalf("%s returned before the queue stood still", g.name)
		default:
		}
		if got := h.lane().Waiting; got != 3 {
			t.Errorf("waiting = %d, want 3: a moving queue takes the burst", got)
		}
		time.Sleep(time.Second)
		h.spawn(context.Background(), "urgent", h.req(tiers.Tier1, false), out)
		synctest.Wait()
		if g := next(t, out); g.name != "c" || g.slot != nil {
			t.Errorf("returned %s (slot %v), want c shed", g.name, g.slot != nil)
		}
		h.p.Close()
		for range 3 {
			next(t, out)
		}
		held[0].Done(ok)
	})
}

// TestClose: waiters and later requests are deferred; Close is safe twice.
func TestClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = 1 })
		held := h.saturate(1)
		out := make(chan got, 3)
		for _, tier := range tiers.All {
			h.spawn(context.Background(), "", h.req(tier, false), out)
		}
		synctest.Wait()
		h.p.Close()
		for range 3 {
			if g := next(t, out); g.slot != nil || !g.until.IsZero() {
				t.Errorf("waiter got slot %v until %v, want deferred", g.slot != nil, g.until)
			}
		}
		if l := h.lane(); l.Waiting != 0 || l.InFlight != 1 {
			t.Errorf("waiting, in flight = %d, %d; want 0, 1", l.Waiting, l.InFlight)
		}
		held[0].Done(ok)
		h.p.Close()
		for _, o := range []string{origin, "https://other"} {
			req := h.req(tiers.Tier1, false)
			req.Origin = o
			if slot, until := h.p.Acquire(context.Background(), req); slot != nil || !until.IsZero() {
				t.Errorf("Acquire(%s) after Close = %v, %v; want nil, zero", o, slot != nil, until)
			}
		}
	})
}

// TestCancelWhileWaiting: a cancelled waiter is deferred and leaves the
// queue; nothing is granted to it later.
func TestCancelWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = 1 })
		held := h.saturate(1)
		ctx, cancel := context.WithCancel(context.Background())
		out := make(chan got, 1)
		h.spawn(ctx, "", h.req(tiers.Tier1, true), out)
		synctest.Wait()
		if got := h.lane().Waiting; got != 1 {
			t.Fatalf("waiting = %d, want 1", got)
		}
		cancel()
		if g := next(t, out); g.slot != nil || !g.until.IsZero() {
			t.Errorf("cancelled waiter got slot %v until %v, want deferred", g.slot != nil, g.until)
		}
		if l := h.lane(); l.Waiting != 0 || l.InFlight != 1 {
			t.Errorf("after cancel: waiting, in flight = %d, %d; want 0, 1", l.Waiting, l.InFlight)
		}
		held[0].Done(ok)
		if l := h.lane(); l.Waiting != 0 || l.InFlight != 0 {
			t.Errorf("after release: waiting, in flight = %d, %d; want 0, 0", l.Waiting, l.InFlight)
		}
		h.acquire(h.req(tiers.Tier3, true)).Done(ok) // the fast path is open again
	})
}

// TestCancelRacingGrant cancels a waiter while a freed slot is handed to
// it: either it keeps the slot, or the slot goes back; it never leaks.
func TestCancelRacingGrant(t *testing.T) {
	for i := range 50 {
		synctest.Test(t, func(t *testing.T) {
			h := newHarness(t, func(c *pacing.Config) { c.MaxLimit = 1 })
			held := h.saturate(1)
			ctx, cancel := context.WithCancel(context.Background())
			out := make(chan got, 1)
			h.spawn(ctx, "", h.req(tiers.Tier2, i%2 == 0), out)
			synctest.Wait()
			cancel()
			held[0].Done(ok)
			g := next(t, out)
			wantInFlight := 0
			if g.slot != nil {
				wantInFlight = 1
			}
			if l := h.lane(); l.Waiting != 0 || l.InFlight != wantInFlight {
				t.Errorf("granted %v: waiting, in flight = %d, %d; want 0, %d", g.slot != nil, l.Waiting, l.InFlight, wantInFlight)
			}
			if g.slot != nil {
				g.slot.Done(ok)
			}
			// Nothing leaked: a full set of slots is free again.
			h.acquire(h.req(tiers.Tier1, true)).Done(ok)
		})
	}
}
