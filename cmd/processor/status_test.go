package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/telemetry"
)

func TestStatus(t *testing.T) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	err = m.Observe(telemetry.Gauges{
		Lanes: func() []pacing.LaneState {
			return []pacing.LaneState{
				{Origin: "https://fcm.googleapis.com", Limit: 48, InFlight: 12, Rate429: 0.031, Breaker: pacing.Closed},
				{Origin: "https://web.push.apple.com", Limit: 9, InFlight: 0, Rate429: 0.25, Breaker: pacing.Open},
			}
		},
		InFlight: func() int { return 12 },
		Lag: func(context.Context) (map[string]telemetry.Lag, error) {
			return map[string]telemetry.Lag{"push.tier1": {Total: 7}, "push.tier1.retry-60s": {Total: 300, NotDue: 280}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	var out bytes.Buffer
	if err := runStatus(context.Background(), []string{"--http-addr", srv.URL}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"in flight: 12",
		"https://fcm.googleapis.com                    48      3.1%     closed        12",
		"https://web.push.apple.com                     9     25.0%       open         0",
		"push.tier1.retry-60s                             20            280",
		"push.tier1                                        7              0",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, &out)
		}
	}
	if err := runStatus(context.Background(), []string{"--http-addr", "127.0.0.1:1"}, &out, &out); err == nil {
		t.Error("status against nothing listening succeeded")
	}
}
