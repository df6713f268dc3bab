package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// BenchmarkMetricsHooks is what the metrics cost each delivered event: one
// Sent and one Finished.
func BenchmarkMetricsHooks(b *testing.B) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	s := deliver.SendInfo{Tier: tiers.Tier2, Step: "first", Origin: "https://fcm.googleapis.com", App: "default",
		Attempt: 1, Result: push.Result{Class: push.Delivered, Status: 201}, Took: 20 * time.Millisecond}
	f := deliver.FinishInfo{Outcome: topology.OutcomeDelivered, Reason: topology.ReasonDelivered, Tier: "tier2", App: "default", Latency: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		m.Sent(s)
		m.Finished(f)
	}
}
