package telemetry_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
)

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, a := range s.Attributes() {
		m[a.Key] = a.Value
	}
	return m
}

// TestOneTracePerEvent: an event that fails twice and is then delivered is
// one trace, continuing the upstream producer's traceparent, with its
// three sends in order, the hold of each retry, and no endpoint, key or
// payload anywhere in it.
func TestOneTracePerEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1, ProcessorOptions: telemetry.PipelineTracing(tp, "tierpush", "tierpush")})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		sub := env.Sim.Subscribe(pushsim.Response{Status: 503}, pushsim.Response{Status: 429, RetryAfter: "3"})
		const payload = "secret payload 7d1f"
		const upstream = "0af7651916cd43dd8448eb211c80319c"
		env.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte(sub.Endpoint),
			Value:   testenv.Event("evt-traced", sub, payload, nil),
			Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + upstream + "-b7ad6b7169203331-01")}}})
		got, err := env.ReadOutcomes(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if o := got["evt-traced"]; len(o) != 1 || o[0].Outcome != "delivered" || o[0].Attempts != 3 {
			t.Fatalf("outcome %+v, want delivered after 3 attempts", o)
		}
		env.StopProcessor() // flush the last spans

		spans := exp.GetSpans().Snapshots()
		var sends, holds []sdktrace.ReadOnlySpan
		for _, s := range spans {
			if s.SpanContext().TraceID().String() != upstream {
				t.Errorf("span %q is in trace %s, want the upstream trace %s", s.Name(), s.SpanContext().TraceID(), upstream)
			}
			switch s.Name() {
			case "push.send":
				sends = append(sends, s)
			case "push.hold":
				holds = append(holds, s)
			}
			secrets := []string{sub.Endpoint, sub.P256dh, sub.Auth, payload, env.VAPID.PrivateKey, string(testenv.HMACKey)}
			for _, a := range s.Attributes() {
				for _, sec := range secrets {
					if strings.Contains(a.Value.String(), sec) {
						t.Errorf("span %q attribute %s leaks a secret", s.Name(), a.Key)
					}
				}
			}
			for _, e := range s.Events() {
				for _, a := range e.Attributes {
					for _, sec := range secrets {
						if strings.Contains(a.Value.String(), sec) {
							t.Errorf("span %q event %q leaks a secret", s.Name(), e.Name)
						}
					}
				}
			}
		}
		if len(sends) != 3 {
			t.Fatalf("%d send spans, want 3", len(sends))
		}
		want := []struct {
			attempt int64
			step    string
			status  int64
			outcome string
		}{
			{1, "first", 503, "retry retry-2s"},
			{2, "retry-2s", 429, "retry retry-8s"},
			{3, "retry-8s", 201, "delivered"},
		}
		for i, w := range want {
			a := attrs(sends[i])
			if a["push.attempt"].AsInt64() != w.attempt || a["push.step"].AsString() != w.step ||
				a["http.response.status_code"].AsInt64() != w.status || a["push.outcome"].AsString() != w.outcome {
				t.Errorf("send span %d: attempt %d step %q status %d outcome %q, want %+v", i,
					a["push.attempt"].AsInt64(), a["push.step"].AsString(), a["http.response.status_code"].AsInt64(), a["push.outcome"].AsString(), w)
			}
			if a["push.tier"].AsString() != "tier1" || a["push.origin"].AsString() != "http://"+env.SimAddr || a["push.event_id"].AsString() != "evt-traced" {
				t.Errorf("send span %d lacks tier, origin or event id: %v", i, a)
			}
			if i > 0 && !sends[i].StartTime().After(sends[i-1].EndTime()) {
				t.Errorf("send span %d starts before send %d ended", i, i-1)
			}
		}
		if ra := attrs(sends[1])["push.retry_after_s"].AsFloat64(); ra != 3 {
			t.Errorf("second send's retry-after %v, want 3", ra)
		}
		if len(holds) != 2 {
			t.Errorf("%d hold spans, want one per retry (2)", len(holds))
		}
		for _, h := range holds {
			if _, ok := attrs(h)["push.lateness_s"]; !ok {
				t.Errorf("hold span without lateness: %v", attrs(h))
			}
		}
	})
}

// scrape parses the Prometheus text of the metrics handler into
// "name{labels}" → value.
func scrape(t *testing.T, m *telemetry.Metrics) map[string]float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := make(map[string]float64)
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// sum adds every series of name whose labels contain all of match.
func sum(ms map[string]float64, name string, match ...string) float64 {
	var total float64
	for k, v := range ms {
		if !strings.HasPrefix(k, name+"{") && k != name {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(k, m)
		}
		if ok {
			total += v
		}
	}
	return total
}

// TestMetricsMatchLedger: after a workload with failures, the outcome,
// DLQ and send counters equal what the ledger and the simulator saw.
func TestMetricsMatchLedger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := telemetry.NewMetrics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		env := testenv.Start(t, testenv.Options{Virtual: true, Hooks: m})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		const n = 300
		var recs []*kgo.Record
		for i := range n {
			var script []pushsim.Response
			switch i % 10 {
			case 0:
				script = []pushsim.Response{{Status: 503}}
			case 1:
				script = []pushsim.Response{{Status: 410, Repeat: true}}
			case 2:
				script = []pushsim.Response{{Status: 400}}
			}
			sub := env.Sim.Subscribe(script...)
			if i%10 == 3 {
				sub.Auth = "short"
			}
			recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.All[i%3]), Key: []byte(sub.ID), Value: testenv.Event(fmt.Sprintf("m-%d", i), sub, "x", nil)})
		}
		env.Produce(ctx, recs...)
		got, err := env.ReadOutcomes(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		ledger := make(map[string]float64)
		for _, os := range got {
			ledger[os[0].Outcome+"/"+os[0].Reason]++
		}
		ms := scrape(t, m)
		for k, want := range ledger {
			outcome, reason, _ := strings.Cut(k, "/")
			if got := sum(ms, "tierpush_outcomes_total", `outcome="`+outcome+`"`, `reason="`+reason+`"`); got != want {
				t.Errorf("tierpush_outcomes_total{outcome=%q,reason=%q} = %v, ledger has %v", outcome, reason, got, want)
			}
		}
		if got, want := sum(ms, "tierpush_outcomes_total"), float64(n); got != want {
			t.Errorf("tierpush_outcomes_total = %v, want %v", got, want)
		}
		if got, want := sum(ms, "tierpush_dlq_total"), ledger["dead/rejected"]+ledger["dead/invalid_event"]; got != want {
			t.Errorf("tierpush_dlq_total = %v, want %v", got, want)
		}
		if got, want := sum(ms, "tierpush_sends_total"), float64(env.Sim.Stats().Requests); got != want {
			t.Errorf("tierpush_sends_total = %v, simulator answered %v", got, want)
		}
		if got := sum(ms, "tierpush_retries_total", `deferred="false"`); got != n/10 {
			t.Errorf("retries after a send = %v, want %d (one per 503)", got, n/10)
		}
		if sum(ms, "tierpush_retry_lateness_seconds_count") != n/10 {
			t.Errorf("retry lateness observations = %v, want %d", sum(ms, "tierpush_retry_lateness_seconds_count"), n/10)
		}
	})
}
