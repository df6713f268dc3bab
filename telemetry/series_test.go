package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
)

// Per-origin series are bounded: any public host is a new origin, and
// sends to thousands of one-shot origins must not grow /metrics for good.
func TestOriginSeriesBounded(t *testing.T) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	for i := range telemetry.MaxSeries + 1000 {
		m.Sent(deliver.SendInfo{Tier: tiers.Tier1, Step: "first", Origin: fmt.Sprintf("https://h%d.example", i),
			Result: push.Result{Class: push.Delivered, Status: 201}})
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "tierpush_sends_total{") {
			n++
		}
	}
	if n == 0 || n > telemetry.MaxSeries {
		t.Fatalf("%d series of tierpush_sends_total after %d origins, want 1..%d", n, telemetry.MaxSeries+1000, telemetry.MaxSeries)
	}
}

func TestBuildInfo(t *testing.T) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	if err := m.BuildInfo("v1.2.3", "abc123", "go1.26.8"); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	for _, want := range []string{`tierpush_build_info{`, `version="v1.2.3"`, `commit="abc123"`, `go_version="go1.26.8"`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
