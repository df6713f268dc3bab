package telemetry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
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
