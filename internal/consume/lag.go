package consume

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Lag is the consumer lag of one topic over the partitions this consumer
// owns: summed over the group's members, every partition counts once.
type Lag struct {
	// Total is the records not yet committed.
	Total int64
	// NotDue (retry topics) is those of them that cannot be due yet: the
	// records written to the step less than its delay ago — a record
	// written at t is due at t plus the step's delay at the earliest
	// (jitter and Retry-After only add) — and the records held in memory
	// until due, whenever they were written.
	NotDue int64
}

// Lag returns the lag of each topic this consumer owns partitions of, from
// the broker's end and committed offsets (the start offset where nothing
// is committed yet) and, for retry steps, the first offset written less
// than the step's delay ago. Total - NotDue is the work that is due now:
// what an autoscaler should scale on, since more replicas cannot make a
// retry due sooner. Records written to a step with an older timestamp than
// their due time calls for (held records re-produced at a graceful
// hand-off) count as due a little early. It asks for the owned partitions
// alone, not the group's assignment (kadm's group lag reads that from
// classic group descriptions, which show no KIP-848 member).
func (c *Consumer) Lag(ctx context.Context) (map[string]Lag, error) {
	ws := c.workers()
	out := make(map[string]Lag)
	if len(ws) == 0 {
		return out, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	adm := kadm.NewClient(c.cl)
	topics := make(map[string]bool)
	for _, w := range ws {
		topics[w.topic] = true
	}
	list := slices.Collect(maps.Keys(topics))
	committed, err := adm.FetchOffsetsForTopics(ctx, c.cfg.Group, list...)
	if err != nil {
		return nil, fmt.Errorf("group lag: %w", err)
	}
	starts, err := adm.ListStartOffsets(ctx, list...)
	if err != nil {
		return nil, fmt.Errorf("group lag: %w", err)
	}
	ends, err := adm.ListEndOffsets(ctx, list...)
	if err != nil {
		return nil, fmt.Errorf("group lag: %w", err)
	}
	now := c.cfg.Now()
	recent, err := c.writtenSince(ctx, adm, ws, now)
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		e, ok := ends.Lookup(w.topic, w.part)
		if !ok || e.Err != nil {
			continue // unknown now; the next scrape asks again
		}
		end := e.Offset
		from := int64(0) // where the lag counts from: the commit, or the log's start
		if s, ok := starts.Lookup(w.topic, w.part); ok && s.Err == nil {
			from = s.Offset
		}
		if r, ok := committed.Lookup(w.topic, w.part); ok && r.Err == nil && r.At >= 0 {
			from = r.At
		}
		lag := max(end-from, 0)
		l := out[w.topic]
		l.Total += lag
		if w.src.Retry {
			recentFrom := end // the first offset written less than the delay ago
			if o, ok := recent.Lookup(w.topic, w.part); ok && o.Err == nil && o.Offset >= 0 {
				recentFrom = min(o.Offset, end)
			}
			n := max(end-max(recentFrom, from), 0) + int64(w.heldBefore(recentFrom))
			l.NotDue += min(n, lag)
		}
		out[w.topic] = l
	}
	return out, nil
}

// writtenSince lists, for the retry partitions of ws, the first offset
// written at or after now less the step's delay: one request per distinct
// delay.
func (c *Consumer) writtenSince(ctx context.Context, adm *kadm.Client, ws []*worker, now time.Time) (kadm.ListedOffsets, error) {
	byDelay := make(map[time.Duration][]string)
	for _, w := range ws {
		if w.src.Retry {
			byDelay[w.src.Delay] = append(byDelay[w.src.Delay], w.topic)
		}
	}
	out := make(kadm.ListedOffsets)
	for d, topics := range byDelay {
		los, err := adm.ListOffsetsAfterMilli(ctx, now.Add(-d).UnixMilli(), topics...)
		if err != nil {
			return nil, fmt.Errorf("offsets written in the last %s: %w", d, err)
		}
		for t, ps := range los {
			out[t] = ps
		}
	}
	return out, nil
}

// heldBefore is how many records the worker holds until due with an
// offset below from.
func (w *worker) heldBefore(from int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, t := range w.held {
		if t.e.Record.Offset < from {
			n++
		}
	}
	return n
}
