package telemetry

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// kotel writes the messaging attributes of semantic conventions v1.18
// (messaging.operation, messaging.source.name,
// messaging.kafka.consumer.group, messaging.kafka.destination.partition,
// messaging.kafka.message.offset, …). The hooks below add the current ones
// to the same spans — messaging.operation.type and .name,
// messaging.destination.name and .partition.id, messaging.kafka.offset,
// messaging.consumer.group.name, messaging.client.id — and keep the old
// ones, so queries written against either keep working.
//
// kgo runs hooks in the order given: kotel starts a span in its Buffered
// hook and ends it in its Unbuffered hook, so semconvAfter goes after
// kotel's tracer (the span exists) and semconvBefore before it (the span
// has not ended).

// semconvAfter adds the attributes known when a record is buffered.
type semconvAfter struct{ clientID, group string }

// semconvBefore adds what is known once a produced record is acknowledged.
type semconvBefore struct{}

var (
	_ kgo.HookProduceRecordBuffered   = semconvAfter{}
	_ kgo.HookFetchRecordBuffered     = semconvAfter{}
	_ kgo.HookProduceRecordUnbuffered = semconvBefore{}
)

// OnProduceRecordBuffered: kotel's "publish" span is a send.
func (h semconvAfter) OnProduceRecordBuffered(r *kgo.Record) {
	span := trace.SpanFromContext(recordContext(r))
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.MessagingSystemKafka, semconv.MessagingOperationTypeSend, semconv.MessagingOperationName("send"),
		semconv.MessagingDestinationName(r.Topic), semconv.MessagingClientID(h.clientID))
}

// OnFetchRecordBuffered: kotel's "receive" span is a poll.
func (h semconvAfter) OnFetchRecordBuffered(r *kgo.Record) {
	span := trace.SpanFromContext(recordContext(r))
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(h.consumed(r, semconv.MessagingOperationTypeReceive, "poll")...)
}

// OnProduceRecordUnbuffered: the partition and offset the broker gave.
func (semconvBefore) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	span := trace.SpanFromContext(recordContext(r))
	if !span.IsRecording() || err != nil {
		return
	}
	span.SetAttributes(semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))), semconv.MessagingKafkaOffset(int(r.Offset)))
}

// consumed are the attributes of a span about a consumed record.
func (h semconvAfter) consumed(r *kgo.Record, op attribute.KeyValue, name string) []attribute.KeyValue {
	return []attribute.KeyValue{
		semconv.MessagingSystemKafka, op, semconv.MessagingOperationName(name),
		semconv.MessagingDestinationName(r.Topic), semconv.MessagingDestinationPartitionID(strconv.Itoa(int(r.Partition))),
		semconv.MessagingKafkaOffset(int(r.Offset)), semconv.MessagingConsumerGroupName(h.group), semconv.MessagingClientID(h.clientID),
	}
}

func recordContext(r *kgo.Record) context.Context {
	if r.Context == nil {
		return context.Background()
	}
	return r.Context
}
