package telemetry_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
)

// BenchmarkTracing delivers the same workload with tracing off and at 100%
// sampling (spans batched to a discarding exporter, as an OTLP exporter
// would batch them) and reports events/s of each.
func BenchmarkTracing(b *testing.B) {
	const n = 3000
	for _, traced := range []bool{false, true} {
		name := "off"
		if traced {
			name = "sampled-100pct"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				sim := pushsim.DefaultConfig()
				sim.VerifyEvery = 100
				sim.KeepDeliveries = 1
				o := testenv.Options{Sim: &sim, Pipeline: func(pc *pipeline.Config) { pc.Pacing.Enabled = os.Getenv("NOPACE") == "" }}
				if traced {
					tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sdktrace.AlwaysSample()))
					b.Cleanup(func() { tp.Shutdown(context.Background()) })
					o.ProcessorOptions = telemetry.PipelineTracing(tp, "tierpush", "tierpush")
				}
				env := testenv.Start(b, o)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				subs := make([]pushsim.Subscription, 200)
				for i := range subs {
					subs[i] = env.Sim.Subscribe()
				}
				recs := make([]*kgo.Record, n)
				for i := range recs {
					sub := subs[i%len(subs)]
					recs[i] = &kgo.Record{Topic: env.Names.Tier(tiers.All[i%3]), Key: []byte(sub.ID), Value: testenv.Event(fmt.Sprintf("bt-%d", i), sub, "x", nil)}
				}
				start := time.Now()
				env.Produce(ctx, recs...)
				if _, err := env.ReadOutcomes(ctx, n); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n)/time.Since(start).Seconds(), "events/s")
				cancel()
			}
		})
	}
}
