package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/pacing"
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

// BenchmarkPacingObserve is what one pacing event costs at the default
// log level (warn): the concurrency law reports one at the end of every
// round that cuts.
func BenchmarkPacingObserve(b *testing.B) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	p, err := m.NewPacing(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})), func() []pacing.LaneState { return nil })
	if err != nil {
		b.Fatal(err)
	}
	e := pacing.Event{At: time.Now(), Origin: "https://fcm.googleapis.com", Kind: "queue", Limit: 40}
	b.ReportAllocs()
	for b.Loop() {
		p.Observe(e)
	}
}
