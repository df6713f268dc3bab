package telemetry_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/telemetry"
)

// TestPacingEvents: each pacing event is counted by origin and kind and
// logged at info with the origin (scheme and host, never a path); each
// origin's rate is a gauge, the peers' part apart.
func TestPacingEvents(t *testing.T) {
	m, err := telemetry.NewMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p, err := m.NewPacing(slog.New(slog.NewTextHandler(&logs, nil)), func() []pacing.LaneState {
		return []pacing.LaneState{{Origin: "https://fcm.googleapis.com", Rate: 95.5, PeerRate: 190, Peers: 2}}
	})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	p.Observe(pacing.Event{At: at, Origin: "https://fcm.googleapis.com", Kind: "cut", Estimate: 95.5, Rate: 0.12, Accepted: 106})
	p.Observe(pacing.Event{At: at, Origin: "https://fcm.googleapis.com", Kind: "pause", Until: at.Add(time.Second), Peer: true})
	p.Observe(pacing.Event{At: at, Origin: "https://fcm.googleapis.com", Kind: "cut"})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`tierpush_pacing_events_total{kind="cut",origin="https://fcm.googleapis.com",peer="false"} 2`,
		`tierpush_pacing_events_total{kind="pause",origin="https://fcm.googleapis.com",peer="true"} 1`,
		`tierpush_pacing_rate{origin="https://fcm.googleapis.com",peers="false"} 95.5`,
		`tierpush_pacing_rate{origin="https://fcm.googleapis.com",peers="true"} 190`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, want := range []string{"level=INFO msg=pacing origin=https://fcm.googleapis.com kind=cut rate=95.5", "accepted=106", "kind=pause", "peer=true"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, &logs)
		}
	}
}
