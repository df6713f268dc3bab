package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/tierpush/tierpush/internal/consume"
)

var _ consume.Hooks = (*Metrics)(nil)

// consumeInstruments creates the consumer's instruments: records skipped as
// done before this member took their partition, failed commits, and how
// long partitions taken over waited. Their labels are bounded: three
// reasons to skip, Kafka's error names.
func (m *Metrics) consumeInstruments(meter metric.Meter) error {
	var errs [4]error
	m.skippedDone, errs[0] = meter.Int64Counter("tierpush_skipped_done",
		metric.WithDescription("records a partition's new owner did not handle, found finished before it took them: reason=committed (the previous owner's commit listed them), outcome (their event's outcome was in push.outcomes) or retry (a later step of their event was on a retry topic)"))
	m.commitFailures, errs[1] = meter.Int64Counter("tierpush_commit_failures",
		metric.WithDescription("partitions whose offset commit failed, by reason (the Kafka error, or request); each is committed again"))
	m.resume, errs[2] = meter.Float64Histogram("tierpush_partition_resume", metric.WithUnit("s"),
		metric.WithDescription("how long a partition taken over with records waiting went unconsumed: from its previous owner's last commit (or its first waiting record, if later) until its new owner was ready to send"),
		metric.WithExplicitBucketBoundaries(0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 30, 45, 60, 120, 300))
	m.membersRemoved, errs[3] = meter.Int64Counter("tierpush_group_members_removed",
		metric.WithDescription("members of the group this processor removed because their beats on push.members stopped (--remove-silent-after), by protocol (classic or consumer)"))
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for _, why := range []string{"committed", "outcome", "retry"} {
		m.skippedDone.Add(context.Background(), 0, metric.WithAttributes(attribute.String("reason", why)))
	}
	return nil
}

// Skipped counts records skipped as done (consume.Hooks).
func (m *Metrics) Skipped(why string, n int) {
	m.skippedDone.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("reason", why)))
}

// CommitFailed counts partitions whose commit failed (consume.Hooks).
func (m *Metrics) CommitFailed(reason string, n int) {
	m.commitFailures.Add(context.Background(), int64(n), metric.WithAttributes(attribute.String("reason", reason)))
}

// MemberRemoved counts a silent member this processor removed from the
// group (pipeline.MemberHooks).
func (m *Metrics) MemberRemoved(protocol string) {
	m.membersRemoved.Add(context.Background(), 1, metric.WithAttributes(attribute.String("protocol", protocol)))
}

// Resumed observes how long a partition taken over waited (consume.Hooks).
func (m *Metrics) Resumed(waited time.Duration) {
	m.resume.Record(context.Background(), waited.Seconds())
}
