package telemetry_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
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

// TestStepLabelsAreTopicSuffixes: the step label has one form in every
// metric: "first" or the retry topic's suffix (retry-2s, not 2s or 2000ms),
// the same as the spans' push.step.
func TestStepLabelsAreTopicSuffixes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := telemetry.NewMetrics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1, Hooks: m})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		sub := env.Sim.Subscribe(pushsim.Response{Status: 503}, pushsim.Response{Status: 503})
		env.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte(sub.ID), Value: testenv.Event("evt-steps", sub, "x", nil)})
		if _, err := env.ReadOutcomes(ctx, 1); err != nil {
			t.Fatal(err)
		}
		steps := map[string]bool{"first": true}
		for _, d := range env.Policy.Ladder(tiers.Tier1).Steps {
			topic := env.Names.Retry(tiers.Tier1, d)
			steps[topic[strings.LastIndexByte(topic, '.')+1:]] = true
		}
		seen := map[string]bool{}
		for series := range scrape(t, m) {
			_, labels, ok := strings.Cut(series, "{")
			if !ok {
				continue
			}
			for _, l := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
				if v, ok := strings.CutPrefix(l, `step="`); ok {
					v = strings.TrimSuffix(v, `"`)
					if !steps[v] {
						t.Errorf("%s: step %q is not a retry topic's suffix (%v)", series, v, steps)
					}
					seen[series[:strings.IndexByte(series, '{')]+" "+v] = true
				}
			}
		}
		for _, want := range []string{"tierpush_sends_total first", "tierpush_sends_total retry-2s", "tierpush_sends_total retry-8s",
			"tierpush_retries_total retry-2s", "tierpush_retries_total retry-8s", "tierpush_retry_lateness_seconds_count retry-2s"} {
			if !seen[want] {
				t.Errorf("no series %s", want)
			}
		}
	})
}
