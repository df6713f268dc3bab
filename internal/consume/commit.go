package consume

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tierpush/tierpush/internal/checkpoint"
)

// annotateCommit writes each owned partition's finished offsets into an
// offset commit request (internal/checkpoint). kgo calls it just before it
// sends any commit: autocommits, commitLoop's and those of a hand-off,
// which runs before the partition is forgotten.
func (c *Consumer) annotateCommit(req *kmsg.OffsetCommitRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range req.Topics {
		rt := &req.Topics[i]
		for j := range rt.Partitions {
			rp := &rt.Partitions[j]
			w := c.parts[topicPart{rt.Topic, rp.Partition}]
			if w == nil {
				continue
			}
			if meta := w.ck.Metadata(rp.Offset); meta != "" {
				rp.Metadata = &meta
			}
		}
	}
	return nil
}

// commitLoop commits, every CommitInterval until ctx is done, the
// partitions whose finished offsets changed while their head did not move:
// kgo's autocommit sends only partitions with a new head, so a partition
// waiting on one slow record would otherwise never tell what finished
// behind it.
//
// kgo issues commits one after another, each once the one before it is
// answered, and a commit's metadata is written when it is issued
// (annotateCommit). So commitLoop keeps one commit in flight at most: on a
// slow broker or starved cores a commit every tick piled up, and a
// hand-off's commit waited behind all of them (3 s and more, until it
// timed out). And it reads the heads and queues their commit under
// commitMu, which a hand-off holds from its commit until it forgets the
// partitions: a head read before a hand-off but queued after its commit
// was committed last, at the old head and without the finished offsets
// (the partition was no longer ours to annotate), and the next owner sent
// again every record finished behind it.
func (c *Consumer) commitLoop(ctx context.Context) {
	tick := time.NewTicker(c.cfg.CommitInterval)
	defer tick.Stop()
	var busy atomic.Bool // a commit of ours is in flight
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if busy.Load() {
			continue
		}
		c.commitMu.Lock()
		moved := c.cl.MarkedOffsets() // a new head: autocommit sends these
		offs := make(map[string]map[int32]kgo.EpochOffset)
		for _, w := range c.workers() {
			if _, ok := moved[w.topic][w.part]; ok {
				continue
			}
			if h, ok := w.ck.Head(); ok {
				if offs[w.topic] == nil {
					offs[w.topic] = make(map[int32]kgo.EpochOffset)
				}
				offs[w.topic][w.part] = h
			}
		}
		if len(offs) > 0 {
			busy.Store(true)
			// Queued when CommitOffsets returns: ordered before any
			// commit a hand-off makes after it.
			c.cl.CommitOffsets(kgo.PreCommitFnContext(ctx, c.annotateCommit), offs,
				func(*kgo.Client, *kmsg.OffsetCommitRequest, *kmsg.OffsetCommitResponse, error) { busy.Store(false) })
		}
		c.commitMu.Unlock()
	}
}

// loadFinished reads the finished offsets the previous owners of newly
// assigned partitions committed, so that their workers skip them. Without
// them (an error, an older commit) every record after the committed offset
// is consumed again: at least once either way.
func (c *Consumer) loadFinished(ctx context.Context, cl *kgo.Client, m map[string][]int32) map[topicPart][]checkpoint.Span {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	topics := make([]string, 0, len(m))
	for t := range m {
		topics = append(topics, t)
	}
	resps, err := kadm.NewClient(cl).FetchOffsetsForTopics(ctx, c.cfg.Group, topics...)
	if err != nil {
		c.log.Warn("reading committed offsets on assignment; finished records after them will be sent again", "err", err)
		return nil
	}
	out := make(map[topicPart][]checkpoint.Span)
	for topic, parts := range m {
		for _, part := range parts {
			r, ok := resps.Lookup(topic, part)
			if !ok || r.Err != nil {
				continue
			}
			spans := checkpoint.Decode(r.At, r.Metadata)
			if len(spans) == 0 {
				continue
			}
			out[topicPart{topic, part}] = spans
			var n int64
			for _, s := range spans {
				n += s.To - s.From
			}
			c.log.Info("skipping records the previous owner finished after its last committed offset",
				"topic", topic, "partition", part, "committed", r.At, "finished", n)
		}
	}
	return out
}
