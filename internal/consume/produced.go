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

// What the records of partitions taken over led to, read from the topics
// they were produced to (resume.go says why and what counts).

// resumeFound is what readProduced found.
type resumeFound struct {
	done map[topicPart]map[string][]int64 // offsets done, by why
	read int
	cut  string // the bound that stopped the read, if one did
}

func (f *resumeFound) count(why string) int {
	n := 0
	for _, d := range f.done {
		n += len(d[why])
	}
	return n
}

// trail is what the records read tell of one event (by its first record,
// push-origin): whether it has an outcome, and the latest due time of its
// retry records.
type trail struct {
	terminal bool
	maxDue   int64 // unix ms; 0 when no retry record was read
}

// pending is a retry record of a partition taken over, not yet committed.
type pending struct {
	k      topicPart
	offset int64
	origin string
	due    int64
}

// readProduced reads the outcomes produced since from and the retry
// records not yet committed (see the top of this file), within the
// bounds, and returns the offsets of the partitions taken whose records
// are done.
func (c *Consumer) readProduced(ctx context.Context, adm *kadm.Client, plan *resumePlan, from time.Time) resumeFound {
	var found resumeFound
	outcomes := c.cfg.Names.Outcomes()
	starts, err := adm.ListOffsetsAfterMilli(ctx, from.UnixMilli(), outcomes)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		found.cut = fmt.Sprintf("listing %s offsets: %v", outcomes, err)
		return found
	}
	oends, err := adm.ListEndOffsets(ctx, outcomes)
	if err == nil {
		err = oends.Error()
	}
	if err != nil {
		found.cut = fmt.Sprintf("listing %s offsets: %v", outcomes, err)
		return found
	}
	read := make(map[string]map[int32]kgo.Offset)
	ends := make(map[topicPart]int64)
	add := func(k topicPart, start, end int64) {
		if end-start > resumeRecords {
			start = end - resumeRecords
			found.cut = fmt.Sprintf("%d records of %s/%d", resumeRecords, k.topic, k.part)
		}
		if start >= end {
			return
		}
		if read[k.topic] == nil {
			read[k.topic] = make(map[int32]kgo.Offset)
		}
		read[k.topic][k.part] = kgo.NewOffset().At(start)
		ends[k] = end
	}
	starts.Each(func(o kadm.ListedOffset) {
		if e, ok := oends.Lookup(o.Topic, o.Partition); ok {
			add(topicPart{o.Topic, o.Partition}, o.Offset, e.Offset)
		}
	})
	for k, ce := range plan.retries {
		add(k, max(ce[0], 0), ce[1])
	}
	if len(read) == 0 || len(c.cfg.ReaderOpts) == 0 {
		return found
	}
	rcl, err := kgo.NewClient(append(c.cfg.ReaderOpts[:len(c.cfg.ReaderOpts):len(c.cfg.ReaderOpts)],
		kgo.ConsumePartitions(read),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchMaxBytes(8<<20),
		kgo.FetchMaxPartitionBytes(1<<20),
	)...)
	if err != nil {
		found.cut = fmt.Sprintf("reader client: %v", err)
		return found
	}
	defer rcl.Close()
	rctx, cancel := context.WithTimeout(ctx, resumeWait)
	defer cancel()
	trails := make(map[string]*trail)
	var pend []pending
	for len(ends) > 0 {
		fs := rcl.PollFetches(rctx)
		if rctx.Err() != nil {
			found.cut = fmt.Sprintf("%s of reading, %d partitions unfinished", resumeWait, len(ends))
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			k := topicPart{r.Topic, r.Partition}
			end, ok := ends[k]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset == end-1 {
				delete(ends, k)
			}
			found.read++
			if r.Topic == outcomes {
				if o := headerValue(r, topology.HeaderOrigin); o != "" {
					trailOf(trails, o).terminal = true
				}
				return
			}
			if c.cfg.Verify != nil && c.cfg.Verify(r) != nil {
				return
			}
			m, err := topology.DecodeMeta(r.Headers)
			if err != nil || m.Origin == "" {
				return
			}
			due := m.Due.UnixMilli()
			tr := trailOf(trails, m.Origin)
			tr.maxDue = max(tr.maxDue, due)
			if t := plan.parts[k]; t != nil && r.Offset >= t.committed && r.Offset < t.end {
				pend = append(pend, pending{k, r.Offset, m.Origin, due})
			}
		})
		// A partition whose last records are gone (compacted, deleted)
		// never shows its end: the fetch says where the log ends.
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			k := topicPart{p.Topic, p.Partition}
			if end, ok := ends[k]; ok && len(p.Records) == 0 && p.Err == nil && p.HighWatermark >= end && p.LogStartOffset >= end {
				delete(ends, k)
			}
		})
	}
	found.done = doneOffsets(plan.parts, trails, pend)
	return found
}

// doneOffsets returns, from what was read of their events, the offsets of
// the partitions taken whose records are done, by why.
func doneOffsets(parts map[topicPart]*taking, trails map[string]*trail, pend []pending) map[topicPart]map[string][]int64 {
	done := make(map[topicPart]map[string][]int64)
	mark := func(k topicPart, why string, o int64) {
		if done[k] == nil {
			done[k] = make(map[string][]int64)
		}
		done[k][why] = append(done[k][why], o)
	}
	// A first record is done when anything of its event was read: its
	// outcome, or a retry record, which only its handling can lead to.
	for origin, tr := range trails {
		topic, part, off, err := topology.ParseOrigin(origin)
		if err != nil {
			continue
		}
		k := topicPart{topic, part}
		t := parts[k]
		if t == nil || t.retry || off < t.committed || off >= t.end {
			continue
		}
		if tr.terminal {
			mark(k, whyOutcome, off)
		} else {
			mark(k, whyRetry, off)
		}
	}
	// A retry record is done when its event has an outcome or a retry
	// record due after it.
	for _, p := range pend {
		switch tr := trails[p.origin]; {
		case tr.terminal:
			mark(p.k, whyOutcome, p.offset)
		case tr.maxDue > p.due:
			mark(p.k, whyRetry, p.offset)
		}
	}
	return done
}

func trailOf(m map[string]*trail, origin string) *trail {
	t := m[origin]
	if t == nil {
		t = new(trail)
		m[origin] = t
	}
	return t
}

// headerValue returns r's first header named key, or "".
func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// spansOf turns offsets into sorted spans.
func spansOf(offsets []int64) []checkpoint.Span {
	if len(offsets) == 0 {
		return nil
	}
	slices.Sort(offsets)
	var out []checkpoint.Span
	for _, o := range offsets {
		if n := len(out); n > 0 && out[n-1].To >= o {
			out[n-1].To = max(out[n-1].To, o+1)
			continue
		}
		out = append(out, checkpoint.Span{From: o, To: o + 1})
	}
	return out
}
