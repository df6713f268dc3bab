package consume

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/checkpoint"
	"github.com/tierpush/tierpush/topology"
)

// A partition's new owner starts from its committed offset, and what the
// previous owner did after its last commit would be done again: after a
// crash every send it finished since, and, while kgo held its commits (a
// classic rebalance waits for a dead member's session), everything it did
// meanwhile. So before a new owner sends anything of the partitions it
// takes, it reads what the records it is about to consume led to:
//
//   - its previous owner's last commit: the finished offsets after the
//     committed one (checkpoint metadata) and when it was written;
//   - push.outcomes from that time less resumeMargin: every outcome names
//     its event's first record (push-origin), and an event with an outcome
//     is done, whichever of its records is consumed again;
//   - the retry topics of the partitions' tiers, from the group's committed
//     offset of each retry partition to its end. Each retry record names
//     its event's first record too, and its due time: a record's due time
//     is later than that of every record before it on its event's way (a
//     record is handled once due, and leads to a record due a step after),
//     so a record of the event due later shows that this one was handled
//     and its result produced. Only retry records whose signature holds
//     count. Where an event's way goes now is never committed past, so
//     reading from the committed offsets finds it; the retry records'
//     timestamps are their events' (they carry the event's first), so a
//     time tells nothing about where to start.
//
// The records found done are skipped as the previous owner's commit
// metadata is (checkpoint.Tracker.SetPrior), and listed in this member's
// commits from then on. Every record skipped has its result in a topic, so
// none is lost; the read only shortens what is sent again, and is bounded
// (resumeWait, resumeRecords per partition read): past the bound the records
// whose results were not read are sent again, at least once as before.
//
// The DLQ is not read: a record dead-lettered with an outcome has the
// outcome produced after the DLQ record (the outcome is produced last), and
// one dead-lettered without (a forged retry record, an event with no id)
// sent nothing, so handling it again costs a second DLQ record and no
// notification.

const (
	// resumeMargin: outcomes are read from this long before the previous
	// owner's last commit. A record's timestamp is set when its produce
	// starts, before it is acknowledged, and processors' clocks differ.
	resumeMargin = 5 * time.Second
	// resumeLookback: how far back outcomes are read for a partition
	// whose commit does not tell its time (none yet, or written by an
	// older processor).
	resumeLookback = time.Minute
	// resumeWait bounds the read of what was produced.
	resumeWait = 2 * time.Second
	// resumeRecords bounds the records read per partition: the newest.
	resumeRecords = 20_000
)

// Why a record was skipped (Hooks.Skipped).
const (
	whyCommitted = "committed"
	whyOutcome   = "outcome"
	whyRetry     = "retry"
)

// taking is what resume knows of one partition taken over.
type taking struct {
	w         *worker
	committed int64     // -1: no commit yet
	end       int64     // the end offset when resume looked
	at        time.Time // when the previous owner's commit was written; zero if unknown
	retry     bool
}

// waiting reports whether records wait beyond the committed offset.
func (t *taking) waiting() bool { return t.end > max(t.committed, 0) }

// resume tells the workers of the partitions taken what was finished before
// this member took them (see above). Whatever it cannot read, it leaves to
// be sent again.
func (c *Consumer) resume(cl *kgo.Client, taken map[topicPart]*worker) {
	ctx, cancel := context.WithTimeout(c.life, 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	plan, err := c.planResume(ctx, adm, taken)
	if err != nil {
		c.log.Warn("reading committed offsets on assignment; finished records after them will be sent again", "err", err)
		return
	}
	// Outcomes are read from the earliest last commit, less the margin.
	var waiting int
	var from time.Time
	for _, t := range plan.parts {
		if !t.waiting() {
			continue
		}
		waiting++
		since := t.at.Add(-resumeMargin)
		if t.at.IsZero() {
			since = plan.began.Add(-resumeLookback)
		}
		if waiting == 1 || since.Before(from) {
			from = since
		}
	}
	var found resumeFound
	if waiting > 0 {
		found = c.readProduced(ctx, adm, plan, from)
	}
	ready := c.cfg.Now()
	for k, t := range plan.parts {
		f := found.done[k]
		t.w.ck.SetPrior(spansOf(f[whyOutcome]), whyOutcome)
		t.w.ck.SetPrior(spansOf(f[whyRetry]), whyRetry)
		if t.waiting() && !t.at.IsZero() {
			t.w.mu.Lock()
			t.w.resumeSince, t.w.readyAt = t.at, ready
			t.w.mu.Unlock()
		}
	}
	if waiting == 0 {
		return
	}
	c.log.Info("read what partitions taken over had done since their last commit",
		"partitions", len(taken), "with_records_waiting", waiting, "from", from.Format(time.RFC3339Nano),
		"records_read", found.read, "done_by_outcome", found.count(whyOutcome), "done_by_retry", found.count(whyRetry),
		"took", ready.Sub(plan.began).Round(time.Millisecond))
	if found.cut != "" {
		c.log.Warn("stopped reading what partitions taken over had done; their records whose results were not read are sent again", "bound", found.cut)
	}
}

// resumePlan is what resume reads.
type resumePlan struct {
	began time.Time
	parts map[topicPart]*taking
	// retries are the retry topics of the partitions' tiers, and their
	// partitions' committed and end offsets.
	retries map[topicPart][2]int64
}

// planResume reads the committed offsets of the partitions taken and of
// the retry topics of their tiers, and their end offsets, and hands each
// worker what its previous owner's commit said was finished.
func (c *Consumer) planResume(ctx context.Context, adm *kadm.Client, taken map[topicPart]*worker) (*resumePlan, error) {
	p := &resumePlan{began: c.cfg.Now(), parts: make(map[topicPart]*taking), retries: make(map[topicPart][2]int64)}
	topics := make(map[string]bool)
	for k, w := range taken {
		topics[k.topic] = true
		for _, rt := range c.budgets[w.src.Tier.Index()].topics {
			topics[rt] = true
		}
	}
	list := make([]string, 0, len(topics))
	for t := range topics {
		list = append(list, t)
	}
	slices.Sort(list)
	committed, err := adm.FetchOffsetsForTopics(ctx, c.cfg.Group, list...)
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, list...)
	if err != nil {
		return nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, err
	}
	var errs int
	ends.Each(func(o kadm.ListedOffset) {
		k := topicPart{o.Topic, o.Partition}
		at := int64(-1)
		r, ok := committed.Lookup(o.Topic, o.Partition)
		if ok && r.Err == nil {
			at = r.At
		}
		if w := taken[k]; w != nil {
			t := &taking{w: w, committed: at, end: o.Offset, retry: w.src.Retry}
			if ok && r.Err == nil && at >= 0 {
				spans, when := checkpoint.Decode(at, r.Metadata)
				t.at = when
				w.ck.SetPrior(spans, whyCommitted)
				if len(spans) > 0 {
					c.log.Info("skipping records the previous owner finished after its last committed offset",
						"topic", o.Topic, "partition", o.Partition, "committed", at, "finished", spanLen(spans))
				}
			} else if ok && r.Err != nil {
				errs++
			}
			p.parts[k] = t
		}
		if src, err := c.source(o.Topic); err == nil && src.Retry {
			p.retries[k] = [2]int64{at, o.Offset}
		}
	})
	if errs > 0 {
		return nil, fmt.Errorf("%d partitions taken over without their committed offset", errs)
	}
	return p, nil
}

// source is the topology source of one of the consumer's input topics.
func (c *Consumer) source(topic string) (topology.Source, error) {
	if src, ok := c.dropped[topic]; ok {
		return src, nil
	}
	return c.cfg.Names.Parse(topic, &c.cfg.Policy)
}

func spanLen(spans []checkpoint.Span) int64 {
	var n int64
	for _, s := range spans {
		n += s.To - s.From
	}
	return n
}
