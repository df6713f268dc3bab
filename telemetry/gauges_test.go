package telemetry_test

import (
	"context"
	"testing"

	"github.com/tierpush/tierpush/telemetry"
)

// TestLagAndHeldGauges: the lag splits into due and not due, and the
// records held in memory come out per retry topic.
func TestLagAndHeldGauges(t *testing.T) {
	ctx := context.Background()
	m, err := telemetry.NewMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(ctx)
	err = m.Observe(telemetry.Gauges{
		Lag: func(context.Context) (map[string]telemetry.Lag, error) {
			return map[string]telemetry.Lag{"push.tier1": {Total: 5}, "push.tier1.retry-8s": {Total: 700, NotDue: 650}}, nil
		},
		Held: func() map[string]int { return map[string]int{"push.tier1.retry-8s": 120} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ms := scrape(t, m)
	for series, want := range map[string]float64{
		`tierpush_consumer_lag{due="true",topic="push.tier1"}`:           5,
		`tierpush_consumer_lag{due="true",topic="push.tier1.retry-8s"}`:  50,
		`tierpush_consumer_lag{due="false",topic="push.tier1.retry-8s"}`: 650,
		`tierpush_retry_held{topic="push.tier1.retry-8s"}`:               120,
	} {
		if got, ok := ms[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if _, ok := ms[`tierpush_consumer_lag{due="false",topic="push.tier1"}`]; ok {
		t.Error("a tier topic has a not-due series")
	}
}
