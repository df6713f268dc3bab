package telemetry

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tierpush/tierpush/internal/pacing"
)

// Pacing counts and logs the pacer's events (tierpush_pacing_events_total
// by origin and kind) and exports each origin's send rate
// (tierpush_pacing_rate, and the peers' part of it). Origins are scheme and
// host: no endpoint path, key or payload reaches a label or a log line.
type Pacing struct {
	log    *slog.Logger
	events metric.Int64Counter
	// attrs are the events' label sets, built once: the concurrency law
	// reports a round's cut at every round's end while the processor's own
	// CPU is the queue, and an attribute.Set per event was 5% of the
	// processor's CPU at 30,000 events.
	attrs *attrCache[pacingKey]
}

type pacingKey struct {
	origin, kind string
	peer         bool
}

// NewPacing registers the pacing instruments on m; lanes is read when
// scraped.
func (m *Metrics) NewPacing(log *slog.Logger, lanes func() []pacing.LaneState) (*Pacing, error) {
	meter := m.provider.Meter("github.com/tierpush/tierpush")
	events, err := meter.Int64Counter("tierpush_pacing_events", metric.WithDescription("pacing changes per push service origin: cut, raise, pause, open, half-open, closed, evict; peer=true when another processor's signal caused it"))
	if err != nil {
		return nil, fmt.Errorf("metric instrument: %w", err)
	}
	rate, err := meter.Float64ObservableGauge("tierpush_pacing_rate", metric.WithDescription("sends per second this processor allows itself per origin; peers=true: what the other processors sharing the origin last reported"))
	if err != nil {
		return nil, fmt.Errorf("metric instrument: %w", err)
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for _, l := range lanes() {
			a := attribute.String("origin", l.Origin)
			o.ObserveFloat64(rate, l.Rate, metric.WithAttributes(a, attribute.Bool("peers", false)))
			if l.Peers > 0 {
				o.ObserveFloat64(rate, l.PeerRate, metric.WithAttributes(a, attribute.Bool("peers", true)))
			}
		}
		return nil
	}, rate)
	if err != nil {
		return nil, fmt.Errorf("metric callback: %w", err)
	}
	attrs := newAttrCache(func(k pacingKey) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("origin", k.origin), attribute.String("kind", k.kind), attribute.Bool("peer", k.peer)}
	})
	return &Pacing{log: log, events: events, attrs: attrs}, nil
}

// Observe is a pacing.WithObserver function: it never blocks.
func (p *Pacing) Observe(e pacing.Event) {
	ctx := context.Background()
	p.events.Add(ctx, 1, p.attrs.get(pacingKey{origin: e.Origin, kind: e.Kind, peer: e.Peer}).add...)
	if e.Kind == "evict" || !p.log.Enabled(ctx, slog.LevelInfo) {
		return
	}
	attrs := []any{"origin", e.Origin, "kind", e.Kind, "rate", round(e.Estimate), "limit", e.Limit}
	if e.Rate > 0 {
		attrs = append(attrs, "share", round(e.Rate))
	}
	if e.Accepted > 0 {
		attrs = append(attrs, "accepted", round(e.Accepted))
	}
	if !e.Until.IsZero() {
		attrs = append(attrs, "until", e.Until.Format(time.RFC3339Nano))
	}
	if e.Peer {
		attrs = append(attrs, "peer", true)
	}
	p.log.Info("pacing", attrs...)
}

func round(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }
