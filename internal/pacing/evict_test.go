package pacing

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
)

// One-shot origins (any public host is one) do not keep a lane each for
// good: the pacer holds at most MaxLanes, and lanes idle for LaneIdle go.
func TestLanesEvicted(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var evicted int
	p, err := New(DefaultConfig(), WithClock(func() time.Time { return now }), WithObserver(func(e Event) {
		if e.Kind == "evict" {
			evicted++
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	send := func(origin string, r push.Result) {
		s, _ := p.Acquire(context.Background(), Request{Origin: origin, Sub: origin, Tier: tiers.Tier3})
		if s == nil {
			t.Fatalf("%s: no slot", origin)
		}
		s.Done(r)
	}
	const n = 50_000
	for i := range n {
		now = now.Add(time.Millisecond)
		send(fmt.Sprintf("https://h%d.example", i), push.Result{Class: push.Delivered, Status: 201})
		if i%1000 != 999 {
			continue
		}
		if got := len(p.Lanes()); got > MaxLanes {
			t.Fatalf("%d lanes after %d origins, want at most %d", got, i+1, MaxLanes)
		}
	}
	if evicted < n-MaxLanes {
		t.Fatalf("%d lanes evicted of %d one-shot origins", evicted, n)
	}

	// An origin that paused the sender keeps its lane while the pause
	// lasts, however idle; once nothing is in force and LaneIdle passed,
	// the next new origin's sweep drops every idle lane.
	send("https://fcm.googleapis.com", push.Result{Class: push.Retryable, Status: 429, RetryAfter: time.Hour})
	for i := range 10 { // 5 distinct subscriptions throttled make a sender-wide pause
		s, _ := p.Acquire(context.Background(), Request{Origin: "https://fcm.googleapis.com", Sub: fmt.Sprint(i), Tier: tiers.Tier1})
		if s != nil {
			s.Done(push.Result{Class: push.Retryable, Status: 429, RetryAfter: time.Hour})
		}
	}
	now = now.Add(LaneIdle + time.Minute)
	send("https://new.example", push.Result{Class: push.Delivered, Status: 201})
	lanes := map[string]bool{}
	for _, l := range p.Lanes() {
		lanes[l.Origin] = true
	}
	if lanes["https://h49999.example"] {
		t.Error("an idle lane outlived LaneIdle")
	}
	if !lanes["https://new.example"] {
		t.Error("the new origin has no lane")
	}
	t.Logf("lanes left: %d (fcm paused: %v)", len(lanes), lanes["https://fcm.googleapis.com"])
}
