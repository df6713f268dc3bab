package consume

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file owns the life of every partition worker: a worker is started in
// the assign callback and stopped and waited for at every hand-off — revoke,
// loss, shutdown — as in franz-go's examples/autocommit_marks. A hand-off
// cancels the worker's context, and everything that waits on the
// partition's behalf (the pacer, the window, the hold until due) returns:
// nothing is sent for a partition this member no longer owns.
//
// kgo runs the callbacks only between polls (BlockRebalanceOnPoll), never
// beside accept or the shutdown in Run. They use the client they are given:
// the first assignment can arrive before kgo.NewClient has returned.

// assigned starts a worker for each new partition. The workers wait, and
// their partitions stay paused, until resume has read what the partitions'
// previous owners finished (resume.go).
func (c *Consumer) assigned(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	c.joined.Store(true)
	taken := make(map[topicPart]*worker)
	for topic, parts := range m {
		src, ok := c.dropped[topic]
		if !ok {
			var err error
			if src, err = c.cfg.Names.Parse(topic, &c.cfg.Policy); err != nil {
				// Cannot happen: we consume only our own topics.
				c.log.Error("unexpected topic", "topic", topic, "err", err)
				continue
			}
		}
		for _, part := range parts {
			k := topicPart{topic, part}
			c.mu.Lock()
			if c.parts[k] == nil {
				w := newWorker(c, cl, topic, part, src)
				c.parts[k] = w
				taken[k] = w
				go w.run()
			}
			c.mu.Unlock()
		}
	}
	// A partition paused during an earlier ownership of ours must not
	// stay paused: its held records were handed back with it. Those
	// taken now resume once resume has told their workers what is done.
	cl.ResumeFetchPartitions(m)
	if len(taken) == 0 {
		return
	}
	tps := make(map[string][]int32)
	for k := range taken {
		tps[k.topic] = append(tps[k.topic], k.part)
	}
	cl.PauseFetchPartitions(tps)
	c.resumes.Add(1)
	go func() {
		defer c.resumes.Done()
		c.resume(cl, taken)
		cl.ResumeFetchPartitions(tps)
		for _, w := range taken {
			close(w.resumed)
		}
	}()
}

func (c *Consumer) revoked(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	if err := c.handOff(cl, m, true); err != nil {
		c.log.Warn("hand-off on revoke", "err", err)
	}
}

func (c *Consumer) lost(_ context.Context, cl *kgo.Client, m map[string][]int32) {
	_ = c.handOff(cl, m, false)
}

// handOff stops the workers of partitions given up and waits for them. A
// graceful hand-off lets the sends under way finish and their results be
// produced, so their offsets are marked, re-produces the held records that
// stand before finished ones (worker.handBack), and commits with the
// partitions' checkpoints while their trackers can still tell what
// finished; only then are the partitions forgotten. A lost partition marks
// and commits nothing: another member may own it already.
//
// Cancelling the workers returns at once whatever waits for the pacer or a
// window slot, unsent: what is left in flight is sends under way and the
// produce of what they led to, and those are waited for as long as they
// take (a send is bounded by the sender's timeout). A hand-off that
// committed before one finished left it to the next owner, who sent it
// again while this member was still sending it. Only at waitLimit, past
// which the group may evict the member and give its partitions to another
// anyway, does it stop waiting. DrainTimeout bounds how long a produce the
// broker refuses is tried again (worker.retryAfter).
func (c *Consumer) handOff(cl *kgo.Client, m map[string][]int32, graceful bool) error {
	var ws []*worker
	c.mu.Lock()
	for topic, parts := range m {
		for _, part := range parts {
			if w := c.parts[topicPart{topic, part}]; w != nil {
				ws = append(ws, w)
			}
		}
	}
	c.mu.Unlock()
	if len(ws) == 0 {
		return nil
	}
	drain, cancelDrain := context.WithTimeout(context.Background(), c.cfg.DrainTimeout)
	defer cancelDrain()
	wait, cancelWait := context.WithTimeout(context.Background(), c.waitLimit)
	defer cancelWait()
	for _, w := range ws {
		w.stop(drain, wait, graceful)
	}
	var errs []error
	for _, w := range ws {
		select {
		case <-w.done:
			continue
		case <-wait.Done():
		}
		select {
		case <-w.done:
		default:
			errs = append(errs, fmt.Errorf("records of %s/%d still in flight after %s: the next owner sends them again", w.topic, w.part, c.waitLimit))
		}
	}
	err := errors.Join(errs...)
	if graceful {
		err = errors.Join(err, c.commitHandedOff(cl, ws))
	}
	c.mu.Lock()
	for _, w := range ws {
		w.ck.Close()
		delete(c.parts, topicPart{w.topic, w.part})
	}
	c.mu.Unlock()
	cl.ResumeFetchPartitions(m)
	return err
}

// commitHandedOff commits every partition of ws at its checkpoint's head,
// with the finished offsets after it. Every one, not only those whose head
// moved (what CommitMarkedOffsets sends): records that finished behind an
// unfinished one during the drain must reach the metadata, or the next
// owner sends them again. The trackers are sealed first: from then on no
// other commit names these partitions (annotateCommit), so this one is the
// last, and a record that finishes after it (past waitLimit) moves neither
// kgo's head nor what is committed.
func (c *Consumer) commitHandedOff(cl *kgo.Client, ws []*worker) error {
	offs := make(map[string]map[int32]kgo.EpochOffset)
	for _, w := range ws {
		w.ck.Seal()
		if h, ok := w.ck.Committable(); ok {
			if offs[w.topic] == nil {
				offs[w.topic] = make(map[int32]kgo.EpochOffset)
			}
			offs[w.topic][w.part] = h
		}
	}
	if len(offs) == 0 {
		return nil
	}
	// It waits behind the commits already queued (kgo issues them in
	// order), which a slow broker answers late.
	ctx, cancel := context.WithTimeout(context.Background(), c.commitLimit)
	defer cancel()
	var errs []error
	cl.CommitOffsetsSync(kgo.PreCommitFnContext(ctx, c.annotateHandOff(ws)), offs, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		c.committed(req, resp, err)
		if err != nil {
			errs = append(errs, err)
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					errs = append(errs, fmt.Errorf("%s/%d: %w", t.Topic, p.Partition, err))
				}
			}
		}
	})
	if err := errors.Join(errs...); err != nil && !errors.Is(err, kgo.ErrClientClosed) {
		return fmt.Errorf("commit on hand-off: %w", err)
	}
	return nil
}
