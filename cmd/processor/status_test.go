package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/telemetry"
)

func TestStatus(t *testing.T) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	lanes := func() []pacing.LaneState {
		return []pacing.LaneState{
			{Origin: "https://fcm.googleapis.com", Limit: 48, InFlight: 12, Rate429: 0.031, Breaker: pacing.Closed, Rate: 120.5, PeerRate: 240, Peers: 2},
			{Origin: "https://web.push.apple.com", Limit: 9, InFlight: 0, Rate429: 0.25, Breaker: pacing.Open, Rate: 20},
		}
	}
	if _, err := m.NewPacing(slog.New(slog.NewTextHandler(io.Discard, nil)), lanes); err != nil {
		t.Fatal(err)
	}
	err = m.Observe(telemetry.Gauges{
		Lanes:    lanes,
		InFlight: func() int { return 12 },
		Lag: func(context.Context) (map[string]telemetry.Lag, error) {
			return map[string]telemetry.Lag{"push.tier1": {Total: 7}, "push.tier1.retry-60s": {Total: 300, NotDue: 280}}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	m.VAPIDRejected("shop")
	m.VAPIDRejected("shop")
	m.VAPIDRejected("default")
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	var out bytes.Buffer
	if err := runStatus(context.Background(), []string{"--http-addr", srv.URL}, &out, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"in flight: 12",
		"https://fcm.googleapis.com                  120.5      360.5      48      3.1%     closed        12",
		"https://web.push.apple.com                   20.0       20.0       9     25.0%       open         0",
		"push.tier1.retry-60s                             20            280",
		"push.tier1                                        7              0",
		"app (VAPID identity)                        key refused",
		"default                                               1",
		"shop                                                  2",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status output lacks %q:\n%s", want, &out)
		}
	}
	if err := runStatus(context.Background(), []string{"--http-addr", "127.0.0.1:1"}, &out, &out); err == nil {
		t.Error("status against nothing listening succeeded")
	}
}

// TestDevStatusApps: the --dev table shows the apps section once more than
// the default identity sends, or a key was refused.
func TestDevStatusApps(t *testing.T) {
	one := deliver.Snapshot{Apps: map[string]deliver.AppStats{"default": {Sends: 10, Delivered: 10}}}
	if out := renderStatus(one, nil, nil, time.Minute, devWhere{}); strings.Contains(out, "app (VAPID identity)") {
		t.Errorf("apps section for the default identity alone:\n%s", out)
	}
	two := deliver.Snapshot{Apps: map[string]deliver.AppStats{"default": {Sends: 10, Delivered: 10}, "shop": {Sends: 5, Delivered: 3, VAPIDRejected: 2}}}
	out := renderStatus(two, nil, nil, time.Minute, devWhere{})
	for _, want := range []string{"app (VAPID identity)", "default                                    10         10            0", "shop                                        5          3            2"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestDevStatusWhere: the --dev table says where the broker, /metrics, the
// simulators and the logs are.
func TestDevStatusWhere(t *testing.T) {
	where := devWhere{Broker: "127.0.0.1:9092", HTTP: "127.0.0.1:9464", Logs: "data/processor.log", Sims: []string{"http://127.0.0.1:4001 (failure mix)", "http://127.0.0.1:4002 (allows 50 requests/s, offered 80/s)"}}
	out := renderStatus(deliver.Snapshot{}, nil, nil, time.Minute, where)
	for _, want := range []string{"broker     127.0.0.1:9092", "http://127.0.0.1:9464/metrics", "simulator  http://127.0.0.1:4001 (failure mix)", "simulator  http://127.0.0.1:4002 (allows 50", "logs       data/processor.log"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// TestDevStateKept: a second --dev run on the same data dir signs with the
// first one's HMAC key and listens where its simulators did, so the first
// run's retry records verify and reach a simulator.
func TestDevStateKept(t *testing.T) {
	dir := t.TempDir()
	first := loadDevState(dir)
	ln, err := first.listenSim(0)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := first.save(dir); err != nil {
		t.Fatal(err)
	}
	second := loadDevState(dir)
	if second.HMACKey != first.HMACKey {
		t.Errorf("second run's HMAC key differs from the first's")
	}
	ln, err = second.listenSim(0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got := ln.Addr().String(); got != addr {
		t.Errorf("simulator listens on %s, the first run's on %s", got, addr)
	}
	if fresh := loadDevState(t.TempDir()); fresh.HMACKey == first.HMACKey || len(fresh.HMACKey) != 64 {
		t.Errorf("a fresh data dir's key %q: want a new 32-byte hex key", fresh.HMACKey)
	}
}
