package pipeline_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

// latencies collects the retry lateness the processor reports.
type latencies struct {
	deliver.NopHooks
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) Sent(s deliver.SendInfo) {
	if s.Step == "first" {
		return
	}
	l.mu.Lock()
	l.d = append(l.d, s.Lateness)
	l.mu.Unlock()
}

func (l *latencies) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// BenchmarkRetryLateness measures, on the real clock and loopback, how long
// after its due time each retry is sent: 500 events fail once with 503 and
// come back from the 2 s step.
func BenchmarkRetryLateness(b *testing.B) {
	for b.Loop() {
		lat := &latencies{}
		// Pacing off: 500 sends failing at once read as an outage and
		// open the breaker; this measures the hold, not the breaker.
		env := testenv.Start(b, testenv.Options{Hooks: lat, Pipeline: func(pc *pipeline.Config) { pc.Pacing.Enabled = false }})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		const n = 500
		var recs []*kgo.Record
		for i := range n {
			sub := env.Sim.Subscribe(pushsim.Response{Status: 503})
			recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte(sub.ID),
				Value: testenv.Event(fmt.Sprintf("late-%d", i), sub, "x", nil)})
		}
		env.Produce(ctx, recs...)
		if _, err := env.ReadOutcomes(ctx, n); err != nil {
			b.Fatal(err)
		}
		cancel()
		b.ReportMetric(float64(lat.quantile(0.5).Microseconds())/1000, "lateness-p50-ms")
		b.ReportMetric(float64(lat.quantile(0.99).Microseconds())/1000, "lateness-p99-ms")
		b.ReportMetric(float64(lat.quantile(1).Microseconds())/1000, "lateness-max-ms")
		b.ReportMetric(float64(lat.quantile(0).Microseconds())/1000, "lateness-min-ms")
	}
}
