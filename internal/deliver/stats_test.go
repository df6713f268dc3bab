package deliver

import (
	"fmt"
	"testing"

	"github.com/tierpush/tierpush/internal/push"
)

// Counters are kept for at most MaxOrigins push services: any public host
// is a new origin, and one-shot origins must not grow memory for good.
func TestStatsBoundsOrigins(t *testing.T) {
	var s Stats
	for i := range 5 * MaxOrigins {
		s.Sent(SendInfo{Origin: fmt.Sprintf("https://h%d.example", i), Result: push.Result{Class: push.Delivered, Status: 201}})
	}
	s.Sent(SendInfo{Origin: "https://fcm.googleapis.com", Result: push.Result{Class: push.Retryable, Status: 429}})
	snap := s.Snapshot()
	if got := len(snap.Origins); got != MaxOrigins {
		t.Fatalf("%d origins kept, want %d", got, MaxOrigins)
	}
	if o := snap.Origins["https://fcm.googleapis.com"]; o.Sends != 1 || o.Rate429s != 1 {
		t.Fatalf("the newest origin's counters: %+v", o)
	}
}

// Counters by app: sends and deliveries of each identity, and the push
// services' refusals of its key.
func TestStatsApps(t *testing.T) {
	var s Stats
	ok := push.Result{Class: push.Delivered, Status: 201}
	s.Sent(SendInfo{Origin: "https://fcm.googleapis.com", App: "shop", Result: ok})
	s.Sent(SendInfo{Origin: "https://fcm.googleapis.com", App: "shop", Result: push.Result{Class: push.VAPIDRejected, Status: 403}})
	s.VAPIDRejected("shop")
	s.Sent(SendInfo{Origin: "https://fcm.googleapis.com", App: "default", Result: ok})
	got := s.Snapshot().Apps
	want := map[string]AppStats{"shop": {Sends: 2, Delivered: 1, VAPIDRejected: 1}, "default": {Sends: 1, Delivered: 1}}
	if len(got) != len(want) || got["shop"] != want["shop"] || got["default"] != want["default"] {
		t.Fatalf("apps %+v, want %+v", got, want)
	}
}
