package telemetry_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
)

// TestMessagingSemconv: the Kafka spans carry the messaging attributes of
// the current semantic conventions (operation type and name, destination
// and partition, offset, consumer group, client id) next to kotel's older
// ones, and the send span names the push service as server.address and
// server.port, never the URL.
func TestMessagingSemconv(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1, ProcessorOptions: telemetry.PipelineTracing(tp, "tierpush", "tierpush-group")})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		sub := env.Sim.Subscribe(pushsim.Response{Status: 503})
		env.Produce(ctx, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte(sub.ID), Value: testenv.Event("evt-semconv", sub, "x", nil)})
		if _, err := env.ReadOutcomes(ctx, 1); err != nil {
			t.Fatal(err)
		}
		env.StopProcessor()

		kinds := map[string]int{}
		for _, s := range exp.GetSpans().Snapshots() {
			a := attrs(s)
			op := a["messaging.operation.type"].AsString()
			switch {
			case s.Name() == "push.send":
				if a["server.address"].AsString() != "127.0.0.1" || a["server.port"].AsInt64() == 0 || a["http.request.method"].AsString() != "POST" {
					t.Errorf("send span: server.address %q server.port %d method %q", a["server.address"].AsString(), a["server.port"].AsInt64(), a["http.request.method"].AsString())
				}
				if st := a["http.response.status_code"].AsInt64(); (st == 503) != (a["error.type"].AsString() == "503") {
					t.Errorf("send span with status %d: error.type %q", st, a["error.type"].AsString())
				}
				for _, kv := range s.Attributes() {
					if strings.Contains(kv.Value.String(), sub.Endpoint) {
						t.Errorf("send span %s holds the endpoint", kv.Key)
					}
				}
				kinds["send"]++
				continue
			case s.SpanKind() == trace.SpanKindProducer:
				if op != "send" || a["messaging.operation.name"].AsString() != "send" || a["messaging.destination.partition.id"].AsString() == "" {
					t.Errorf("publish span %q: %v", s.Name(), a)
				}
				if _, ok := a["messaging.kafka.offset"]; !ok {
					t.Errorf("publish span %q lacks messaging.kafka.offset", s.Name())
				}
			case s.SpanKind() == trace.SpanKindConsumer:
				if op != "receive" && op != "process" {
					t.Errorf("consumer span %q: operation type %q", s.Name(), op)
				}
				if a["messaging.consumer.group.name"].AsString() != "tierpush-group" || a["messaging.destination.partition.id"].AsString() != "0" {
					t.Errorf("consumer span %q: group %q partition %q", s.Name(), a["messaging.consumer.group.name"].AsString(), a["messaging.destination.partition.id"].AsString())
				}
				if a["messaging.operation"].AsString() != op {
					t.Errorf("consumer span %q lost kotel's messaging.operation (%q)", s.Name(), a["messaging.operation"].AsString())
				}
			default:
				continue
			}
			kinds[op]++
			if a["messaging.system"].AsString() != "kafka" || a["messaging.destination.name"].AsString() == "" || a["messaging.client.id"].AsString() != "tierpush" {
				t.Errorf("span %q: system %q destination %q client %q", s.Name(), a["messaging.system"].AsString(),
					a["messaging.destination.name"].AsString(), a["messaging.client.id"].AsString())
			}
		}
		for _, k := range []string{"send", "receive", "process"} {
			if kinds[k] == 0 {
				t.Errorf("no %s span (%v)", k, kinds)
			}
		}
	})
}
