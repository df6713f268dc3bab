package pacing_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
)

// The Pacer's own behaviour, on the bubble's clock: waiting and deferring,
// tier turns, the breaker, pauses, peers. The laws are judged by the grid
// and the replay (internal tests); these judge what a caller sees.

const origin = "https://push.example.net"

var (
	ok        = push.Result{Class: push.Delivered, Status: 201}
	throttled = push.Result{Class: push.Retryable, Status: 429, RetryAfter: time.Second}
	failed    = push.Result{Class: push.Retryable, Status: 503}
)

func newPacer(t *testing.T, edit func(*pacing.Config), opts ...pacing.Option) *pacing.Pacer {
	t.Helper()
	cfg := pacing.DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	p, err := pacing.New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func req(i int, tier tiers.Tier) pacing.Request {
	return pacing.Request{Origin: origin, Sub: fmt.Sprint("sub-", i), Tier: tier}
}

func lane(t *testing.T, p *pacing.Pacer) pacing.LaneState {
	t.Helper()
	for _, l := range p.Lanes() {
		if l.Origin == origin {
			return l
		}
	}
	t.Fatalf("no lane for %s", origin)
	return pacing.LaneState{}
}

type got struct {
	i     int
	slot  *pacing.Slot
	until time.Time
}

func acquire(ctx context.Context, p *pacing.Pacer, i int, r pacing.Request, out chan<- got) {
	go func() {
		s, until := p.Acquire(ctx, r)
		out <- got{i, s, until}
	}()
}

// TestTierTurns: with one send at a time, tier 1 goes first, oldest
// first, and tiers 2 and 3 take turns by weight (3:1) after it.
func TestTierTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, func(c *pacing.Config) { c.MinLimit, c.MaxLimit = 1, 1 })
		hold, _ := p.Acquire(t.Context(), req(0, tiers.Tier1))
		out := make(chan got, 100)
		for i := range 30 {
			acquire(t.Context(), p, i+1, req(i+1, tiers.All[i%3]), out)
			synctest.Wait()
		}
		hold.Done(ok)
		counts := map[tiers.Tier]int{}
		var order []int // of tier 1's grants
		for range 20 {
			synctest.Wait()
			g := <-out
			tier := tiers.All[(g.i-1)%3]
			counts[tier]++
			if tier == tiers.Tier1 {
				order = append(order, g.i)
			}
			g.slot.Done(ok)
		}
		// 20 grants: tier 1's ten, then tiers 2 and 3 at 3:1.
		if counts[tiers.Tier1] != 10 || counts[tiers.Tier2] < 7 || counts[tiers.Tier3] > 3 {
			t.Errorf("grants by tier %v, want tier 1's ten, then tiers 2 and 3 at 3:1", counts)
		}
		for k, i := range order {
			if want := 1 + 3*k; i != want {
				t.Errorf("tier 1's grant %d went to request %d, want %d (oldest first)", k, i, want)
			}
		}
		if len(order) > 0 && order[len(order)-1] != 28 {
			t.Errorf("tier 1's grants %v, want all ten before any other", order)
		}
	})
}

// TestHoldsAShortHaltInMemory: a halt (a 429 share past HaltRate) shorter
// than a request's Hold keeps it waiting in memory, and it is sent when
// the halt ends; one longer than its Hold defers it to the ladder at once,
// with the halt's end as its floor.
func TestHoldsAShortHaltInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, nil)
		for i := range 20 {
			s, _ := p.Acquire(t.Context(), req(i, tiers.Tier2))
			if s == nil {
				break
			}
			s.Done(throttled)
		}
		l := lane(t, p)
		if l.Breaker != pacing.Open {
			t.Fatalf("breaker %s after 429s only, want open", l.Breaker)
		}
		pause := time.Until(l.PausedUntil)
		out := make(chan got, 2)
		long := req(100, tiers.Tier2)
		long.Hold = pause / 2
		acquire(t.Context(), p, 0, long, out)
		synctest.Wait()
		if g := <-out; g.slot != nil || !g.until.Equal(l.PausedUntil) {
			t.Errorf("a request holding %s for a %s halt: slot %v until %s, want deferred until %s", long.Hold, pause, g.slot != nil, g.until, l.PausedUntil)
		}
		short := req(101, tiers.Tier2)
		short.Hold = 2 * pause
		acquire(t.Context(), p, 1, short, out)
		synctest.Wait()
		select {
		case g := <-out:
			t.Fatalf("a request holding %s got an answer during the halt: %+v", short.Hold, g)
		default:
		}
		time.Sleep(pause)
		synctest.Wait()
		g := <-out
		if g.slot == nil {
			t.Fatalf("the held request was deferred when the halt ended")
		}
		g.slot.Done(ok)
	})
}

// TestBreakerOnErrors: past ErrorHaltRate of 5xx the breaker opens for
// OpenFor; then half-open probes, and it closes once they succeed.
// Errors of notifications already failing do not open it.
func TestBreakerOnErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var kinds []string
		p := newPacer(t, nil, pacing.WithObserver(func(e pacing.Event) { kinds = append(kinds, e.Kind) }))
		for i := range 30 {
			r := req(i, tiers.Tier1)
			r.Failing = true
			s, _ := p.Acquire(t.Context(), r)
			s.Done(failed)
		}
		if b := lane(t, p).Breaker; b != pacing.Closed {
			t.Fatalf("breaker %s after failing notifications' errors, want closed", b)
		}
		for i := range 30 {
			s, _ := p.Acquire(t.Context(), req(i, tiers.Tier1))
			if s == nil {
				break
			}
			s.Done(failed)
		}
		l := lane(t, p)
		if l.Breaker != pacing.Open || time.Until(l.PausedUntil) != pacing.DefaultConfig().OpenFor {
			t.Fatalf("breaker %s until +%s, want open for %s", l.Breaker, time.Until(l.PausedUntil), pacing.DefaultConfig().OpenFor)
		}
		if s, until := p.Acquire(t.Context(), req(99, tiers.Tier1)); s != nil || !until.Equal(l.PausedUntil) {
			t.Errorf("open: slot %v until %s, want deferred until %s", s != nil, until, l.PausedUntil)
		}
		time.Sleep(time.Until(l.PausedUntil))
		for i := range pacing.DefaultConfig().Probes {
			s, _ := p.Acquire(t.Context(), req(200+i, tiers.Tier1))
			if s == nil {
				t.Fatalf("probe %d refused", i)
			}
			s.Done(ok)
		}
		if b := lane(t, p).Breaker; b != pacing.Closed {
			t.Errorf("breaker %s after the probes succeeded, want closed; events %v", b, kinds)
		}
	})
}

// TestSubscriptionPause: a 429 pauses its subscription for its
// Retry-After; the others go on.
func TestSubscriptionPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, nil)
		s, _ := p.Acquire(t.Context(), req(1, tiers.Tier1))
		r := throttled
		r.RetryAfter = 5 * time.Second
		s.Done(r)
		if s, until := p.Acquire(t.Context(), req(1, tiers.Tier1)); s != nil || time.Until(until) != 5*time.Second {
			t.Errorf("paused subscription: slot %v, until +%s; want deferred 5s", s != nil, time.Until(until))
		}
		if s, _ := p.Acquire(t.Context(), req(2, tiers.Tier1)); s == nil {
			t.Error("another subscription was deferred")
		} else {
			s.Done(ok)
		}
		time.Sleep(5 * time.Second)
		if !p.SubscriptionPaused("sub-1") {
			s, _ := p.Acquire(t.Context(), req(1, tiers.Tier1))
			if s == nil {
				t.Error("the subscription's pause outlived its Retry-After")
			} else {
				s.Done(ok)
			}
		}
	})
}

// TestCancelAndClose: a waiter whose context ends, and every waiter when
// the pacer closes, return without a slot; a closed pacer defers all.
func TestCancelAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, func(c *pacing.Config) { c.MinLimit, c.MaxLimit = 1, 1 })
		hold, _ := p.Acquire(t.Context(), req(0, tiers.Tier1))
		ctx, cancel := context.WithCancel(t.Context())
		out := make(chan got, 3)
		acquire(ctx, p, 1, req(1, tiers.Tier1), out)
		acquire(t.Context(), p, 2, req(2, tiers.Tier1), out)
		synctest.Wait()
		cancel()
		synctest.Wait()
		if g := <-out; g.i != 1 || g.slot != nil {
			t.Fatalf("cancelled waiter: %+v, want request 1 without a slot", g)
		}
		if w := lane(t, p).Waiting; w != 1 {
			t.Errorf("%d waiting after the cancel, want 1", w)
		}
		p.Close()
		synctest.Wait()
		if g := <-out; g.slot != nil {
			t.Errorf("a waiter got a slot from a closed pacer")
		}
		if s, _ := p.Acquire(t.Context(), req(3, tiers.Tier1)); s != nil {
			t.Error("a closed pacer granted a slot")
		}
		hold.Done(ok)
	})
}

// TestDisabled: off, every request gets a slot at once, however answered.
func TestDisabled(t *testing.T) {
	p := newPacer(t, func(c *pacing.Config) { c.Enabled = false })
	for i := range 100 {
		s, _ := p.Acquire(context.Background(), req(i, tiers.Tier3))
		if s == nil {
			t.Fatal("pacing off deferred a request")
		}
		s.Done(throttled)
	}
}

// TestGroupShares: processors sharing an origin hold one estimate, the
// newest cut any of them made; each sends an equal part of it while all
// have more to send; a joiner's first report takes its part at once, a
// leaver's is taken up when it says so, and one not heard of for a second
// is taken up too.
func TestGroupShares(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, nil)
		at := time.Now()
		p.Apply(pacing.Signal{Origin: origin, From: "b", At: at, Kind: pacing.SignalCut, Ceiling: 300, Epoch: at.Add(-time.Minute), Limited: true, Rate: 100})
		l := lane(t, p)
		if l.Estimate < 300 || l.Rate != l.Estimate/2 || l.Peers != 1 {
			t.Fatalf("after b's cut: estimate %.0f, part %.0f, peers %d; want 300 or more, half of it, 1", l.Estimate, l.Rate, l.Peers)
		}
		p.Apply(pacing.Signal{Origin: origin, From: "c", At: at, Kind: pacing.SignalRate, Limited: true, Rate: 100})
		if l := lane(t, p); l.Rate != l.Estimate/3 {
			t.Errorf("with c: part %.0f of %.0f, want a third", l.Rate, l.Estimate)
		}
		p.Apply(pacing.Signal{Origin: origin, From: "c", At: at, Kind: pacing.SignalLeave})
		if l := lane(t, p); l.Rate != l.Estimate/2 {
			t.Errorf("c left: part %.0f of %.0f, want a half", l.Rate, l.Estimate)
		}
		time.Sleep(2 * time.Second)
		if l := lane(t, p); l.Rate != l.Estimate || l.Peers != 0 {
			t.Errorf("b silent for 2 s: part %.0f of %.0f, peers %d; want all of it", l.Rate, l.Estimate, l.Peers)
		}
		// An older cut than the one in force changes nothing.
		p.Apply(pacing.Signal{Origin: origin, From: "d", At: time.Now(), Kind: pacing.SignalCut, Ceiling: 10, Epoch: at.Add(-2 * time.Minute)})
		if l := lane(t, p); l.Ceiling != 300 {
			t.Errorf("an older cut replaced the newer: ceiling %.0f, want 300", l.Ceiling)
		}
	})
}

// TestQueueWordIsFresh: another processor's word that the origin queues
// ends slow start here (the limit halves) only while it is fresh; one read
// back from the topic by a processor that starts tells of the service as
// it was, and a new owner judges for itself.
func TestQueueWordIsFresh(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, nil)
		p.Apply(pacing.Signal{Origin: origin, From: "b", At: time.Now(), Kind: pacing.SignalRate})
		start := lane(t, p).Limit
		p.Apply(pacing.Signal{Origin: origin, From: "b", At: time.Now().Add(-4 * time.Second), Kind: pacing.SignalQueue})
		if got := lane(t, p).Limit; got != start {
			t.Errorf("after a queue word 4 s old: limit %d, want %d as at the start", got, start)
		}
		p.Apply(pacing.Signal{Origin: origin, From: "b", At: time.Now(), Kind: pacing.SignalQueue})
		if got, want := lane(t, p).Limit, start/2; got != want {
			t.Errorf("after a fresh queue word: limit %d, want %d (half)", got, want)
		}
	})
}

// TestHaltHoldsTheGroup: a halt one processor signals holds here too.
func TestHaltHoldsTheGroup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPacer(t, nil)
		until := time.Now().Add(3 * time.Second)
		p.Apply(pacing.Signal{Origin: origin, From: "b", At: time.Now(), Kind: pacing.SignalCut, Ceiling: 50, Epoch: time.Now(), Until: until})
		r := req(1, tiers.Tier1)
		r.Hold = time.Second
		if s, got := p.Acquire(t.Context(), r); s != nil || !got.Equal(until) {
			t.Errorf("during b's halt: slot %v until %s, want deferred until %s", s != nil, got, until)
		}
	})
}

// TestWaitingShare: a busy origin's requests wait in memory however long
// their queue, up to MaxWaiting of their class (tier 1, or the lower
// tiers); past it they are deferred. Two origins asked for split half of
// it, and tier 1 is never deferred for the lower tiers' waiting.
func TestWaitingShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const share = 8
		p := newPacer(t, func(c *pacing.Config) { c.MinLimit, c.MaxLimit, c.MaxWaiting = 1, 1, share })
		hold, _ := p.Acquire(t.Context(), req(0, tiers.Tier1))
		out := make(chan got, 100)
		for i := range share {
			r := req(i+1, tiers.Tier3)
			r.Hold = time.Millisecond // far shorter than the queue: still waits
			acquire(t.Context(), p, i+1, r, out)
			synctest.Wait()
		}
		select {
		case g := <-out:
			t.Fatalf("request %d answered while the origin was busy: slot %v", g.i, g.slot != nil)
		default:
		}
		if w := lane(t, p).Waiting; w != share {
			t.Fatalf("%d waiting, want %d", w, share)
		}
		if s, _ := p.Acquire(t.Context(), req(100, tiers.Tier3)); s != nil {
			t.Fatal("a request past the origin's share got a slot")
		}
		acquire(t.Context(), p, 101, req(101, tiers.Tier1), out)
		synctest.Wait()
		if w := lane(t, p).Waiting; w != share+1 {
			t.Fatalf("tier 1 behind %d lower-tier waiters: %d waiting, want %d", share, w, share+1)
		}
		// A second origin asked for: the two split half of MaxWaiting,
		// and the next tier-3 request of the first finds 8 waiting, more
		// than its 2.
		other := req(200, tiers.Tier3)
		other.Origin = "https://other.example.net"
		s, _ := p.Acquire(t.Context(), other)
		if s == nil {
			t.Fatal("an idle origin's request did not get a slot")
		}
		s.Done(ok)
		if s, _ := p.Acquire(t.Context(), req(102, tiers.Tier3)); s != nil {
			t.Fatal("a request past the origin's share beside another got a slot")
		}
		hold.Done(ok)
		for range share + 1 {
			g := <-out
			if g.slot == nil {
				t.Fatalf("waiting request %d deferred", g.i)
			}
			g.slot.Done(ok)
		}
	})
}
