package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/topology"
)

// recheckEvery is how long a read waits for records before it asks the
// broker again where each partition starts, so that a partition whose
// records were deleted (retention) or handled by another group member
// does not hold the read open forever.
const recheckEvery = 2 * time.Second

// List calls fn for every record of the DLQ that f matches, from the start
// of the topic up to its high-water marks when List began: records
// dead-lettered meanwhile are left for the next call, and an empty topic
// returns at once. It commits nothing. An error from fn stops List and is
// returned.
//
// cl asks the broker for offsets; List reads with a client of its own built
// from cl.Opts(), so cl must not be a consumer.
func List(ctx context.Context, cl *kgo.Client, names topology.Names, f Filter, fn func(*Record) error) error {
	adm := kadm.NewClient(cl)
	topic := names.DLQ()
	spans, err := snapshot(ctx, adm, topic, "")
	if err != nil {
		return err
	}
	return scan(ctx, cl, adm, topic, "", spans, func(r *kgo.Record) error {
		rec := Inspect(r, names)
		if !f.Match(rec) {
			return nil
		}
		return fn(rec)
	})
}

// span is what a run reads of one partition: offsets [start, end).
type span struct{ start, end int64 }

// snapshot returns, per partition of topic, where a run starts (the
// group's committed offset, or the log start when group is "" or has not
// committed) and ends (the high-water mark now).
func snapshot(ctx context.Context, adm *kadm.Client, topic, group string) (map[int32]span, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	starts, err := positions(ctx, adm, topic, group)
	if err != nil {
		return nil, err
	}
	spans := make(map[int32]span)
	ends.Each(func(lo kadm.ListedOffset) {
		if lo.Topic == topic && lo.Partition >= 0 {
			spans[lo.Partition] = span{start: starts[lo.Partition], end: lo.Offset}
		}
	})
	return spans, nil
}

// positions returns where a reader of topic stands per partition: the log
// start offset, or the group's committed offset when it is later.
func positions(ctx context.Context, adm *kadm.Client, topic, group string) (map[int32]int64, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	pos := make(map[int32]int64)
	starts.Each(func(lo kadm.ListedOffset) {
		if lo.Topic == topic {
			pos[lo.Partition] = lo.Offset
		}
	})
	if group == "" {
		return pos, nil
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return pos, nil // never committed (Kafka answers empty, kfake this)
	}
	if err != nil {
		return nil, fmt.Errorf("fetch offsets of group %s: %w", group, err)
	}
	for p := range pos {
		if c, ok := committed.Lookup(topic, p); ok && c.Err == nil && c.At > pos[p] {
			pos[p] = c.At
		}
	}
	return pos, nil
}

// scan reads spans of topic with a direct consumer built from cl's options
// and calls fn for each record in them, in offset order per partition.
func scan(ctx context.Context, cl *kgo.Client, adm *kadm.Client, topic, group string, spans map[int32]span, fn func(*kgo.Record) error) error {
	c := newCursor(topic, spans, func(ctx context.Context) (map[int32]int64, error) {
		return positions(ctx, adm, topic, group)
	})
	if c.done() {
		return nil
	}
	offsets := make(map[int32]kgo.Offset)
	for p := range c.pending {
		offsets[p] = kgo.NewOffset().At(spans[p].start)
	}
	reader, err := kgo.NewClient(append(cl.Opts(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offsets}),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return fmt.Errorf("read %s: %w", topic, err)
	}
	defer reader.Close()
	return c.run(ctx, reader.PollFetches, fn, func() error { return nil })
}

// cursor tracks which partitions of a bounded read are not finished.
type cursor struct {
	topic   string
	pending map[int32]int64 // partition → end offset (exclusive)
	// refresh returns where each partition stands now, for partitions
	// that get no records.
	refresh func(context.Context) (map[int32]int64, error)
}

func newCursor(topic string, spans map[int32]span, refresh func(context.Context) (map[int32]int64, error)) *cursor {
	c := &cursor{topic: topic, pending: make(map[int32]int64), refresh: refresh}
	for p, s := range spans {
		if s.start < s.end {
			c.pending[p] = s.end
		}
	}
	return c
}

func (c *cursor) done() bool { return len(c.pending) == 0 }

// run polls until every pending partition is read to its end, calling fn
// for each record within bounds and afterPoll after each poll's records.
// It returns fn's first error, or afterPoll's.
func (c *cursor) run(ctx context.Context, poll func(context.Context) kgo.Fetches, fn func(*kgo.Record) error, afterPoll func() error) error {
	for !c.done() {
		pctx, cancel := context.WithTimeout(ctx, recheckEvery)
		fs := poll(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetchErr(fs); err != nil {
			return err
		}
		n := 0
		var err error
		for it := fs.RecordIter(); !it.Done() && err == nil; {
			r := it.Next()
			end, ok := c.pending[r.Partition]
			if r.Topic != c.topic || !ok {
				continue
			}
			if r.Offset >= end {
				// Dead-lettered after the run began: not this run's.
				delete(c.pending, r.Partition)
				continue
			}
			n++
			// A transaction marker is no record, but it takes an
			// offset: it may be the last one before the end.
			if !r.Attrs.IsControl() {
				err = fn(r)
			}
			if err == nil && r.Offset+1 >= end {
				delete(c.pending, r.Partition)
			}
		}
		err = errors.Join(err, afterPoll())
		if err != nil {
			return err
		}
		if n == 0 && !c.done() {
			pos, err := c.refresh(ctx)
			if err != nil {
				return err
			}
			for p, end := range c.pending {
				if pos[p] >= end {
					delete(c.pending, p)
				}
			}
		}
	}
	return nil
}

// fetchErr returns the first error of fs that is neither the poll's own
// deadline nor one the client retries by itself.
func fetchErr(fs kgo.Fetches) error {
	for _, fe := range fs.Errors() {
		var ke *kerr.Error
		var loss *kgo.ErrDataLoss
		switch {
		case errors.Is(fe.Err, context.DeadlineExceeded), errors.Is(fe.Err, context.Canceled):
		case errors.As(fe.Err, &ke) && ke.Retriable:
		case errors.As(fe.Err, &loss):
			// Informational: the client resets and carries on.
		default:
			return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
		}
	}
	return nil
}
