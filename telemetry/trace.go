package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Propagator carries W3C trace context (traceparent, tracestate) and
// baggage in record headers.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// TracingEnabled reports whether the standard OpenTelemetry environment
// asks for traces: an OTLP endpoint is set, or OTEL_TRACES_EXPORTER names an
// exporter other than "none".
func TracingEnabled() bool {
	if e := os.Getenv("OTEL_TRACES_EXPORTER"); e != "" {
		return e != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// NewTracerProvider builds the tracer provider from the standard OTEL_*
// environment (exporter, protocol gRPC or HTTP, endpoint, headers,
// sampler — parent-based by default — and resource, OTEL_SERVICE_NAME
// defaulting to "tierpush"). With no tracing asked for it returns a no-op
// provider. shutdown flushes spans.
func NewTracerProvider(ctx context.Context) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if !TracingEnabled() {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("trace exporter from OTEL_* environment: %w", err)
	}
	res, err := Resource(ctx)
	if err != nil {
		return nil, nil, err
	}
	p := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return p, p.Shutdown, nil
}

// Resource describes this process: OTEL_RESOURCE_ATTRIBUTES and
// OTEL_SERVICE_NAME, with service.name "tierpush" unless set.
func Resource(ctx context.Context) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("tierpush")),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
		resource.WithProcessPID(),
		resource.WithHost(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	return res, nil
}

// NewKafkaTracer returns the kotel tracer of a kgo client: a span per
// produce and receive, trace context carried in record headers. Record
// keys appear only hashed: upstream may key by endpoint.
func NewKafkaTracer(tp trace.TracerProvider, clientID, group string) *kotel.Tracer {
	return kotel.NewTracer(
		kotel.TracerProvider(tp),
		kotel.TracerPropagator(Propagator),
		kotel.ClientID(clientID),
		kotel.ConsumerGroup(group),
		kotel.KeyFormatter(func(r *kgo.Record) (string, error) { return HashKey(r.Key), nil }),
	)
}

// HashKey is how a record key or subscription appears in telemetry: the
// first 16 hex digits of its SHA-256.
func HashKey(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Tracing follows each record through the engine (deliver.Tracer): kotel's
// process span continues the record's trace (upstream's, or the retry
// hop's), every record produced for it is its child, and the hold and send
// spans are written from the record's report once its records are
// acknowledged, with the times the engine measured.
type Tracing struct {
	kt     *kotel.Tracer
	tracer trace.Tracer
	attrs  semconvAfter
}

var _ deliver.Tracer = (*Tracing)(nil)

// NewTracing returns the tracing of the engine; kt is the Kafka client's
// tracer (NewKafkaTracer), whose hooks go on the client.
func NewTracing(kt *kotel.Tracer, tp trace.TracerProvider) *Tracing {
	return &Tracing{kt: kt, tracer: tp.Tracer("github.com/tierpush/tierpush/internal/deliver")}
}

// Start begins r's process span, with the current messaging attributes
// besides kotel's (semconv.go).
func (t *Tracing) Start(ctx context.Context, r *kgo.Record) context.Context {
	pctx, span := t.kt.WithProcessSpan(r)
	if span.IsRecording() {
		span.SetAttributes(t.attrs.consumed(r, semconv.MessagingOperationTypeProcess, "process")...)
	}
	// The partition's cancellation still reaches the handler; the span's
	// context travels in the produced records.
	return trace.ContextWithSpan(ctx, trace.SpanFromContext(pctx))
}

// End writes the hold and send spans of rep and ends the process span.
func (t *Tracing) End(ctx context.Context, rep *deliver.Report) {
	span := trace.SpanFromContext(ctx)
	defer span.End()
	if rep.EventID != "" {
		span.SetAttributes(attribute.String("push.event_id", rep.EventID), attribute.String("push.origin", rep.Origin))
	}
	if rep.Held {
		_, s := t.tracer.Start(ctx, "push.hold", trace.WithTimestamp(rep.Received), trace.WithAttributes(
			attribute.String("push.step", rep.Step),
			attribute.String("push.due", rep.Due.UTC().Format(time.RFC3339Nano)),
			attribute.Float64("push.lateness_s", rep.PickedUp.Sub(rep.Due).Seconds()),
		))
		s.End(trace.WithTimestamp(rep.PickedUp))
	}
	switch {
	case rep.Abandoned:
		span.AddEvent("push.handed_back")
	case rep.Hop:
		span.AddEvent("push.hop")
	case rep.Tombstoned:
		span.AddEvent("push.tombstoned")
	case rep.Paced:
		span.AddEvent("push.deferred_by_pacing", trace.WithAttributes(attribute.String("push.not_before", rep.DeferredUntil.UTC().Format(time.RFC3339Nano))))
	}
	if len(rep.Dead) > 0 && !rep.Sent {
		span.SetStatus(codes.Error, string(rep.Dead[0]))
	}
	if rep.Sent {
		t.sendSpan(ctx, rep)
	}
}

// sendSpan is the client span of one push: server.address names the push
// service host (never the URL), error.type the class of a failed send.
func (t *Tracing) sendSpan(ctx context.Context, rep *deliver.Report) {
	host, port := rep.Origin, 0
	if u, err := url.Parse(rep.Origin); err == nil && u.Hostname() != "" {
		host = u.Hostname()
		port, _ = strconv.Atoi(u.Port())
		if port == 0 && u.Scheme == "https" {
			port = 443
		} else if port == 0 && u.Scheme == "http" {
			port = 80
		}
	}
	_, s := t.tracer.Start(ctx, "push.send", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(rep.SendStart), trace.WithAttributes(
		semconv.ServerAddress(host),
		semconv.ServerPort(port),
		semconv.HTTPRequestMethodPost,
		attribute.String("push.event_id", rep.EventID),
		attribute.Int("push.attempt", rep.Attempt),
		attribute.String("push.tier", rep.Tier.String()),
		attribute.String("push.step", rep.Step),
		attribute.String("push.origin", rep.Origin),
		attribute.String("push.subscription", rep.Sub),
		attribute.Int64("push.ttl_s", int64(rep.TTL/time.Second)),
		attribute.Float64("push.held_late_s", rep.Lateness.Seconds()),
		attribute.Int("http.response.status_code", rep.Result.Status),
		attribute.String("push.class", rep.Result.Class.String()),
	))
	if rep.Result.RetryAfter > 0 {
		s.SetAttributes(attribute.Float64("push.retry_after_s", rep.Result.RetryAfter.Seconds()))
	}
	if rep.Result.Class != push.Delivered {
		errType := rep.Result.Class.String()
		if rep.Result.Status != 0 {
			errType = strconv.Itoa(rep.Result.Status)
		}
		s.SetAttributes(semconv.ErrorTypeKey.String(errType))
		s.SetStatus(codes.Error, rep.Result.Err)
	}
	d := rep.Decision
	next := string(d.Outcome)
	if d.Action == topology.ActionRetry {
		next = "retry " + tiers.StepName(d.Delay)
	}
	s.SetAttributes(attribute.String("push.outcome", next))
	if d.Reason != "" {
		s.SetAttributes(attribute.String("push.reason", string(d.Reason)))
	}
	s.End(trace.WithTimestamp(rep.SendEnd))
}

// PipelineTracing traces the engine: kotel's hooks on its Kafka client
// (named clientID, in group) and the engine's spans (Tracing).
func PipelineTracing(tp trace.TracerProvider, clientID, group string) []pipeline.Option {
	kt := NewKafkaTracer(tp, clientID, group)
	after := semconvAfter{clientID: clientID, group: group}
	tr := NewTracing(kt, tp)
	tr.attrs = after
	// The order matters: see semconv.go.
	return []pipeline.Option{pipeline.WithClientOpts(kgo.WithHooks(semconvBefore{}, kt, after)), pipeline.WithTracer(tr)}
}
