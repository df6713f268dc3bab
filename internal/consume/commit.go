package consume

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Commits. kgo issues a group's commits one after another, each once the
// one before it is answered: its autocommits (the partitions whose head
// moved), commitLoop's (those whose head did not move while records
// finished behind it) and a hand-off's. Every one passes annotateCommit
// when it is issued, which writes each partition's checkpoint into it and
// leaves out the partitions this member no longer owns; every answer
// passes committed, which logs and counts what failed and tells each
// tracker what the broker acknowledged. A partition whose finished offsets
// a commit did not get acknowledged stays dirty, and commitLoop commits it
// again at its next tick, with its checkpoint as it is then.

// annotateCommit writes each owned partition's finished offsets and the
// time into an offset commit request (internal/checkpoint), and leaves out
// every partition this member does not own: one handed over, lost, or
// sealed for its hand-off's own commit (annotateHandOff). A commit queued
// while the member owned a partition, and issued after it gave it up, so
// names it no more: otherwise it could land after the hand-off's commit,
// or after the next owner's, at an older offset.
func (c *Consumer) annotateCommit(req *kmsg.OffsetCommitRequest) error {
	c.annotate(req, nil)
	return nil
}

// annotateHandOff is annotateCommit for the commit of a hand-off: the
// sealed partitions of ws are its to commit.
func (c *Consumer) annotateHandOff(ws []*worker) func(*kmsg.OffsetCommitRequest) error {
	own := make(map[*worker]bool, len(ws))
	for _, w := range ws {
		own[w] = true
	}
	return func(req *kmsg.OffsetCommitRequest) error {
		c.annotate(req, own)
		return nil
	}
}

func (c *Consumer) annotate(req *kmsg.OffsetCommitRequest, handOff map[*worker]bool) {
	now := c.cfg.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	topics := req.Topics[:0]
	for _, rt := range req.Topics {
		parts := rt.Partitions[:0]
		for _, rp := range rt.Partitions {
			w := c.parts[topicPart{rt.Topic, rp.Partition}]
			if w == nil || !handOff[w] && !w.ck.Owned() {
				continue
			}
			meta := w.ck.Metadata(rp.Offset, now)
			if meta == "" {
				continue // handed over
			}
			rp.Metadata = &meta
			parts = append(parts, rp)
		}
		if len(parts) > 0 {
			rt.Partitions = parts
			topics = append(topics, rt)
		}
	}
	req.Topics = topics
}

// committed handles the answer to a commit: what failed is logged and
// counted, and the partitions acknowledged no longer need a commit of
// their own for the finishes it told (checkpoint.Tracker.Acked).
func (c *Consumer) committed(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err != nil {
		if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
			return // shutting down: the hand-off's commit is the last
		}
		n := 0
		for _, rt := range req.Topics {
			n += len(rt.Partitions)
		}
		c.commitFailed(reasonOf(err), n, err)
		return
	}
	failed := make(map[string]int)
	var first error
	c.mu.Lock()
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rp.ErrorCode != 0 {
				e := kerr.ErrorForCode(rp.ErrorCode)
				failed[reasonOf(e)]++
				if first == nil {
					first = fmt.Errorf("%s/%d: %w", rt.Topic, rp.Partition, e)
				}
				continue
			}
			if w := c.parts[topicPart{rt.Topic, rp.Partition}]; w != nil {
				w.ck.Acked()
			}
		}
	}
	c.mu.Unlock()
	for reason, n := range failed {
		c.commitFailed(reason, n, first)
	}
}

// reasonOf names a commit's failure for its counter: the Kafka error code,
// or "request" when the request itself failed (a connection, a timeout).
func reasonOf(err error) string {
	var ke *kerr.Error
	if errors.As(err, &ke) {
		return ke.Message
	}
	return "request"
}

// commitFailed counts n partitions whose commit failed and logs it, at most
// once per logEvery.
func (c *Consumer) commitFailed(reason string, n int, err error) {
	if c.hooks != nil {
		c.hooks.CommitFailed(reason, n)
	}
	if suppressed, ok := c.commitLog.allow(c.cfg.Now()); ok {
		c.log.Warn("commit failed; committed again at the next commit interval", "partitions", n, "err", err, "failures_not_logged", suppressed)
	}
}

// logLimit lets one line through per logEvery and counts the rest.
type logLimit struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

const logEvery = 10 * time.Second

func (l *logLimit) allow(now time.Time) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < logEvery {
		l.suppressed++
		return 0, false
	}
	l.last, suppressed, l.suppressed = now, l.suppressed, 0
	return suppressed, true
}

// commitLoop commits, every CommitInterval until ctx is done, the
// partitions whose finished offsets changed, or were not acknowledged,
// while their head did not move: kgo's autocommit sends only partitions
// with a new head, so a partition waiting on one slow record would
// otherwise never tell what finished behind it.
//
// It keeps one commit of its own in flight at most: on a slow broker or
// starved cores a commit every tick piled up, and a hand-off's commit
// waited behind all of them. While the classic protocol joins the group,
// kgo holds every commit until the join is done; commitLoop waits with it,
// holding nothing a hand-off or a shutdown needs.
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
		if len(offs) == 0 {
			continue
		}
		busy.Store(true)
		c.cl.CommitOffsets(kgo.PreCommitFnContext(ctx, c.annotateCommit), offs,
			func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
				c.committed(req, resp, err)
				busy.Store(false)
			})
	}
}
