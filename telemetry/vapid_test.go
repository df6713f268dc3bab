package telemetry_test

import (
	"context"
	"testing"

	"github.com/tierpush/tierpush/telemetry"
)

// TestVAPIDRejectedByApp: the per-app counter names the app and nothing
// else.
func TestVAPIDRejectedByApp(t *testing.T) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m.VAPIDRejected("shop")
	m.VAPIDRejected("shop")
	m.VAPIDRejected("default")
	ms := scrape(t, m)
	for series, want := range map[string]float64{
		`tierpush_vapid_rejected_total{app="shop"}`:    2,
		`tierpush_vapid_rejected_total{app="default"}`: 1,
	} {
		if got := ms[series]; got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if got := sum(ms, "tierpush_vapid_rejected_total"); got != 3 {
		t.Errorf("tierpush_vapid_rejected_total sums to %v, want 3", got)
	}
}
