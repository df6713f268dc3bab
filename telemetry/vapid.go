package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// vapidInstruments creates the per-app counter. Its series are bounded by
// the identities configured: only those are ever sent with.
func (m *Metrics) vapidInstruments(meter metric.Meter) error {
	var err error
	m.vapidRejected, err = meter.Int64Counter("tierpush_vapid_rejected",
		metric.WithDescription("sends a push service answered 401 or 403 (VAPID authorization refused, most likely a subscription made with another key), by app; default is the --vapid-* identity"))
	return err
}

// VAPIDRejected counts a push service's refusal of app's VAPID
// authorization. app is a name, never a key.
func (m *Metrics) VAPIDRejected(app string) {
	m.vapidRejected.Add(context.Background(), 1, metric.WithAttributes(attribute.String("app", app)))
}

// VAPIDIdentities starts each configured app's series at zero, so that
// alerts and dashboards find the metric before the first refusal.
func (m *Metrics) VAPIDIdentities(apps ...string) {
	for _, app := range apps {
		m.vapidRejected.Add(context.Background(), 0, metric.WithAttributes(attribute.String("app", app)))
	}
}
