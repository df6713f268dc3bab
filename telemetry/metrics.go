package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/twmb/franz-go/plugin/kprom"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/tierpush/tierpush/internal/consume"
	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/topology"
)

// Metrics turns the pipeline's hooks into OpenTelemetry metrics, exported
// in the Prometheus format on /metrics. Labels carry origins, tiers, steps,
// classes and reasons, never an endpoint, key or payload.
type Metrics struct {
	reg      *prometheus.Registry
	provider *sdkmetric.MeterProvider

	sends       metric.Int64Counter
	outcomes    metric.Int64Counter
	retries     metric.Int64Counter
	dlq         metric.Int64Counter
	expired     metric.Int64Counter
	retryAfter  metric.Int64Counter
	lateness    metric.Float64Histogram
	delivery    metric.Float64Histogram
	sendLatency metric.Float64Histogram
	// vapidRejected counts 401/403 per app (vapid.go).
	vapidRejected metric.Int64Counter
	// The consumer's (consume.go).
	skippedDone, commitFailures metric.Int64Counter
	membersRemoved              metric.Int64Counter
	resume                      metric.Float64Histogram
	// attrs are the label sets of the per-record hooks, built once.
	attrs hotAttrs
}

var _ deliver.Hooks = (*Metrics)(nil)

// NewMetrics returns the metrics of one process.
func NewMetrics(ctx context.Context) (*Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	res, err := Resource(ctx)
	if err != nil {
		return nil, err
	}
	m := &Metrics{reg: reg, provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(res),
		// Per-origin series: any public host is a new origin. Past this
		// many label sets a metric folds the rest into one overflow
		// series instead of growing for good.
		sdkmetric.WithCardinalityLimit(MaxSeries)), attrs: newHotAttrs()}
	meter := m.provider.Meter("github.com/tierpush/tierpush")
	seconds := metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
	var errs [9]error
	m.sends, errs[0] = meter.Int64Counter("tierpush_sends", metric.WithDescription("sends to push services by origin, tier, step and status class"))
	m.outcomes, errs[1] = meter.Int64Counter("tierpush_outcomes", metric.WithDescription("terminal outcomes written to push.outcomes by outcome and reason"))
	m.retries, errs[2] = meter.Int64Counter("tierpush_retries", metric.WithDescription("records routed to a retry step; deferred=true when no send was made"))
	m.dlq, errs[3] = meter.Int64Counter("tierpush_dlq", metric.WithDescription("records routed to push.dlq by reason"))
	m.expired, errs[4] = meter.Int64Counter("tierpush_ttl_expired", metric.WithDescription("events whose TTL ran out before delivery"))
	m.retryAfter, errs[5] = meter.Int64Counter("tierpush_retry_after_honoured", metric.WithDescription("retries whose step a push service's Retry-After chose"))
	m.lateness, errs[6] = meter.Float64Histogram("tierpush_retry_lateness", metric.WithUnit("s"), metric.WithDescription("how long after its due time a retry was sent"), seconds)
	m.delivery, errs[7] = meter.Float64Histogram("tierpush_delivery_latency", metric.WithUnit("s"), metric.WithDescription("from event creation to its terminal outcome, by tier and outcome"), seconds)
	m.sendLatency, errs[8] = meter.Float64Histogram("tierpush_send_duration", metric.WithUnit("s"), metric.WithDescription("one HTTP send to a push service, by origin"), seconds)
	for _, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("metric instrument: %w", err)
		}
	}
	if err := m.vapidInstruments(meter); err != nil {
		return nil, fmt.Errorf("metric instrument: %w", err)
	}
	if err := m.consumeInstruments(meter); err != nil {
		return nil, fmt.Errorf("metric instrument: %w", err)
	}
	return m, nil
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// KafkaMeter returns the hooks of the processor's kgo client that export
// the client's own metrics through franz-go's kprom, as tierpush_kafka_*:
// connections, errors and bytes per broker, and records, batches and bytes
// produced and fetched per broker and topic. (kotel's meter came out of the
// OTel exporter as messaging_kafka_fetch_bytes_count_by_total and the like.)
// The hooks serve one client: kprom registers its collectors when that
// client starts and unregisters them when it closes.
func (m *Metrics) KafkaMeter() *kprom.Metrics {
	return kprom.NewMetrics("tierpush",
		kprom.Subsystem("kafka"),
		kprom.Registry(m.reg),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Records, kprom.Batches,
			kprom.UncompressedBytes, kprom.CompressedBytes, kprom.ConsistentNaming),
	)
}

// MaxSeries bounds the label sets of one metric (per-origin series).
const MaxSeries = 2000

// Gauges are the values Metrics reads when scraped.
type Gauges struct {
	Lanes    func() []pacing.LaneState
	InFlight func() int
	// InFlightLimit is the window InFlight is bounded by (it shrinks below
	// --max-in-flight while the cores are saturated).
	InFlightLimit func() int
	// Lag returns, per topic, the records not yet committed in the
	// partitions this process owns and, for retry topics, how many of them
	// cannot be due yet (consume.Consumer.Lag).
	Lag func(ctx context.Context) (map[string]Lag, error)
	// ProduceFailures counts produces that failed and were tried again.
	ProduceFailures func() int64
	// Stuck counts partitions whose produce has failed past the bound
	// that makes the processor unready.
	Stuck func() int
	// Held returns, per retry topic, the records held in memory until due
	// (what --max-held bounds).
	Held func() map[string]int
}

// Lag is the consumer lag of one topic over the partitions this process
// owns: Total not yet committed, NotDue of them not due yet.
type Lag = consume.Lag

// Observe registers the gauges.
func (m *Metrics) Observe(g Gauges) error {
	meter := m.provider.Meter("github.com/tierpush/tierpush")
	limit, err := meter.Int64ObservableGauge("tierpush_pacing_limit", metric.WithDescription("concurrency limit per push service origin"))
	if err != nil {
		return err
	}
	share, err := meter.Float64ObservableGauge("tierpush_pacing_429_share", metric.WithDescription("share of attempts answered 429 over the rolling window, per origin"))
	if err != nil {
		return err
	}
	breaker, err := meter.Int64ObservableGauge("tierpush_pacing_breaker_state", metric.WithDescription("0 closed, 1 half-open, 2 open, per origin"))
	if err != nil {
		return err
	}
	originFlight, err := meter.Int64ObservableGauge("tierpush_pacing_in_flight", metric.WithDescription("sends in flight per origin"))
	if err != nil {
		return err
	}
	inFlight, err := meter.Int64ObservableGauge("tierpush_in_flight", metric.WithDescription("records being sent or awaiting broker acknowledgement"))
	if err != nil {
		return err
	}
	inFlightLimit, err := meter.Int64ObservableGauge("tierpush_in_flight_limit", metric.WithDescription("the window of records in flight: --max-in-flight, or less while the processor's CPUs are saturated"))
	if err != nil {
		return err
	}
	lag, err := meter.Int64ObservableGauge("tierpush_consumer_lag", metric.WithDescription("records not yet committed per topic in the partitions this process owns (summed over replicas: the group's lag); due=false counts retry records that cannot be due yet, due=true what is due now"))
	if err != nil {
		return err
	}
	produceFailures, err := meter.Int64ObservableCounter("tierpush_produce_failures", metric.WithDescription("produces that failed and were tried again; the source record stays uncommitted meanwhile"))
	if err != nil {
		return err
	}
	stuck, err := meter.Int64ObservableGauge("tierpush_partition_stuck", metric.WithDescription("partitions whose produce has failed past the bound that makes /readyz unready"))
	if err != nil {
		return err
	}
	held, err := meter.Int64ObservableGauge("tierpush_retry_held", metric.WithDescription("retry records held in memory until due, per retry topic (--max-held bounds their sum)"))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		if g.ProduceFailures != nil {
			o.ObserveInt64(produceFailures, g.ProduceFailures())
		}
		if g.Stuck != nil {
			o.ObserveInt64(stuck, int64(g.Stuck()))
		}
		if g.Held != nil {
			for topic, n := range g.Held() {
				o.ObserveInt64(held, int64(n), metric.WithAttributes(attribute.String("topic", topic)))
			}
		}
		if g.Lanes != nil {
			for _, l := range g.Lanes() {
				a := metric.WithAttributes(attribute.String("origin", l.Origin))
				o.ObserveInt64(limit, int64(l.Limit), a)
				o.ObserveFloat64(share, l.Rate429, a)
				o.ObserveInt64(breaker, breakerState(l.Breaker), a)
				o.ObserveInt64(originFlight, int64(l.InFlight), a)
			}
		}
		if g.InFlight != nil {
			o.ObserveInt64(inFlight, int64(g.InFlight()))
		}
		if g.InFlightLimit != nil {
			o.ObserveInt64(inFlightLimit, int64(g.InFlightLimit()))
		}
		if g.Lag != nil {
			lags, err := g.Lag(ctx)
			if err != nil {
				return nil // the broker is away; the scrape still answers
			}
			for topic, l := range lags {
				o.ObserveInt64(lag, l.Total-l.NotDue, metric.WithAttributes(attribute.String("topic", topic), attribute.Bool("due", true)))
				if l.NotDue > 0 {
					o.ObserveInt64(lag, l.NotDue, metric.WithAttributes(attribute.String("topic", topic), attribute.Bool("due", false)))
				}
			}
		}
		return nil
	}, limit, share, breaker, originFlight, inFlight, inFlightLimit, lag, produceFailures, stuck, held)
	return err
}

func breakerState(s string) int64 {
	switch s {
	case pacing.HalfOpen:
		return 1
	case pacing.Open:
		return 2
	}
	return 0
}

// Shutdown stops the meter provider.
func (m *Metrics) Shutdown(ctx context.Context) error { return m.provider.Shutdown(ctx) }

// Sent counts a send.
func (m *Metrics) Sent(s deliver.SendInfo) {
	ctx := context.Background()
	tier := s.Tier.String()
	m.sends.Add(ctx, 1, m.attrs.sends.get(sendKey{origin: s.Origin, tier: tier, step: s.Step, class: statusClass(s.Result)}).add...)
	m.sendLatency.Record(ctx, s.Took.Seconds(), m.attrs.latency.get(originKey{s.Origin}).record...)
	if s.Step != "first" {
		m.lateness.Record(ctx, max(s.Lateness.Seconds(), 0), m.attrs.lateness.get(stepKey{tier: tier, step: s.Step}).record...)
	}
}

// Retried counts a record routed to a retry step.
func (m *Metrics) Retried(r deliver.RetryInfo) {
	ctx := context.Background()
	m.retries.Add(ctx, 1, metric.WithAttributes(attribute.String("tier", r.Tier.String()), attribute.String("step", r.Step), attribute.Bool("deferred", r.Deferred)))
	if r.RetryAfter {
		m.retryAfter.Add(ctx, 1, metric.WithAttributes(attribute.String("tier", r.Tier.String())))
	}
}

// DeadLettered counts a record routed to the DLQ.
func (m *Metrics) DeadLettered(reason topology.Reason) {
	m.dlq.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", string(reason))))
}

// Finished counts a terminal outcome.
func (m *Metrics) Finished(f deliver.FinishInfo) {
	ctx := context.Background()
	m.outcomes.Add(ctx, 1, m.attrs.outcomes.get(outcomeKey{outcome: string(f.Outcome), reason: string(f.Reason), tier: f.Tier}).add...)
	if f.Outcome == topology.OutcomeExpired {
		m.expired.Add(ctx, 1, m.attrs.expired.get(tierKey{f.Tier}).add...)
	}
	if f.Latency > 0 {
		m.delivery.Record(ctx, f.Latency.Seconds(), m.attrs.delivery.get(deliveryKey{tier: f.Tier, outcome: string(f.Outcome)}).record...)
	}
}

// statusClasses name the status classes without building a string.
var statusClasses = [...]string{"0xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

func statusClass(r push.Result) string {
	switch {
	case r.Status == 0:
		return "error"
	case r.Status == 429:
		return "429"
	case r.Status > 0 && r.Status/100 < len(statusClasses):
		return statusClasses[r.Status/100]
	default:
		return strconv.Itoa(r.Status/100) + "xx"
	}
}

// BuildInfo exports tierpush_build_info{version,commit,go_version} = 1, so
// dashboards can tell which build each replica runs.
func (m *Metrics) BuildInfo(version, commit, goVersion string) error {
	meter := m.provider.Meter("github.com/tierpush/tierpush")
	attrs := metric.WithAttributes(attribute.String("version", version), attribute.String("commit", commit), attribute.String("go_version", goVersion))
	_, err := meter.Int64ObservableGauge("tierpush_build_info", metric.WithDescription("the processor's build: always 1"),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(1, attrs)
			return nil
		}))
	return err
}
