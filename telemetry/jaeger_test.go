package telemetry_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
)

// jaegerBinary finds the Jaeger v2 all-in-one that `make jaeger` builds.
func jaegerBinary() string {
	if p := os.Getenv("TIERPUSH_JAEGER_BIN"); p != "" {
		return p
	}
	p, _ := filepath.Abs("../.cache/jaeger")
	return p
}

type jaegerTrace struct {
	Data []struct {
		TraceID string `json:"traceID"`
		Spans   []struct {
			OperationName string `json:"operationName"`
			StartTime     int64  `json:"startTime"`
			Tags          []struct {
				Key   string `json:"key"`
				Value any    `json:"value"`
			} `json:"tags"`
		} `json:"spans"`
	} `json:"data"`
}

// TestJaegerEndToEnd sends an event that fails twice through the pipeline
// with OTLP export to a real Jaeger v2, then reads the trace back from
// Jaeger's query API: the whole retry chain is one trace.
func TestJaegerEndToEnd(t *testing.T) {
	testenv.Long(t, "a real Jaeger, built by make jaeger")
	bin := jaegerBinary()
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("Jaeger binary %s missing in CI (make jaeger builds it): %v", bin, err)
		}
		t.Skipf("no Jaeger binary at %s: run make jaeger", bin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = t.TempDir()
	logs, _ := os.Create(filepath.Join(cmd.Dir, "jaeger.log"))
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitHTTP(ctx, t, "http://127.0.0.1:16686/api/services", func() string { b, _ := os.ReadFile(logs.Name()); return string(b) })

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_SERVICE_NAME", "tierpush-e2e")
	tp, shutdown, err := telemetry.NewTracerProvider(ctx)
	if err != nil {
		t.Fatal(err)
	}
	env := testenv.Start(t, testenv.Options{Partitions: 1, ProcessorOptions: telemetry.PipelineTracing(tp, "tierpush", "tierpush")})
	sub := env.Sim.Subscribe(pushsim.Response{Status: 503}, pushsim.Response{Status: 500})
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	env.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte(sub.ID),
		Value:   testenv.Event("evt-jaeger", sub, "hello jaeger", nil),
		Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-" + traceID + "-00f067aa0ba902b7-01")}}})
	if _, err := env.ReadOutcomes(ctx, 1); err != nil {
		t.Fatal(err)
	}
	env.StopProcessor()
	if err := shutdown(ctx); err != nil { // flush every span to Jaeger
		t.Fatal(err)
	}

	var tr jaegerTrace
	for {
		resp, err := http.Get("http://127.0.0.1:16686/api/traces/" + traceID)
		if err == nil {
			tr = jaegerTrace{}
			json.NewDecoder(resp.Body).Decode(&tr)
			resp.Body.Close()
			if sends := countOps(tr, "push.send"); sends >= 3 {
				break
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("Jaeger never returned the whole trace %s: %+v", traceID, tr)
		case <-time.After(200 * time.Millisecond):
		}
	}
	if len(tr.Data) != 1 || tr.Data[0].TraceID != traceID {
		t.Fatalf("Jaeger returned %d traces, want the one trace %s", len(tr.Data), traceID)
	}
	if got := countOps(tr, "push.send"); got != 3 {
		t.Errorf("%d send spans in Jaeger, want 3", got)
	}
	if got := countOps(tr, "push.hold"); got != 2 {
		t.Errorf("%d hold spans in Jaeger, want 2", got)
	}
	for _, topic := range []string{"push.tier1.retry-2s publish", "push.tier1.retry-8s publish", "push.outcomes publish"} {
		if countOps(tr, topic) != 1 {
			t.Errorf("no %q span: the retry chain is not whole", topic)
		}
	}
	t.Logf("Jaeger trace %s holds %d spans", traceID, len(tr.Data[0].Spans))
}

func countOps(tr jaegerTrace, op string) int {
	n := 0
	for _, d := range tr.Data {
		for _, s := range d.Spans {
			if s.OperationName == op {
				n++
			}
		}
	}
	return n
}

// waitHTTP polls url until it answers 200 or ctx ends.
func waitHTTP(ctx context.Context, t *testing.T, url string, logs func() string) {
	t.Helper()
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never answered: %v\n%s", url, err, logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
