package consume

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/deliver"
)

// produce produces d's records and waits for every acknowledgement. A
// produce that fails is tried again, with backoff, until it succeeds or the
// partition is handed back (retryAfter): the record stays unfinished
// meanwhile, the partition counts as stuck (Consumer.Stuck) and every
// failure is logged and counted.
func (w *worker) produce(d *deliver.Delivery) bool {
	ctx := d.Context()
	pending := d.Records
	for attempt := 0; ; attempt++ {
		pending = w.produceAll(ctx, pending)
		if len(pending) == 0 {
			w.stuckSince.Store(0)
			return true
		}
		w.stuckSince.CompareAndSwap(0, w.c.cfg.Now().UnixNano())
		backoff := min(250*time.Millisecond<<min(attempt, 6), 10*time.Second)
		backoff += rand.N(backoff / 4)
		if !w.retryAfter(backoff) {
			return false
		}
	}
}

// retryAfter waits d before a refused produce is tried again, and reports
// false when it is given up instead: at once when the partition is lost,
// at the drain deadline (DrainTimeout after it began) when it is handed off
// gracefully. What a send already led to is worth trying again for a
// while: a record given up stays unfinished, and its next owner sends it
// again.
func (w *worker) retryAfter(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-w.ctx.Done():
	}
	w.mu.Lock()
	drain, graceful := w.drain, w.grace // set before ctx is cancelled (stop)
	w.mu.Unlock()
	if !graceful {
		return false
	}
	select {
	case <-t.C:
		return true
	case <-drain.Done():
		return false
	}
}

// produceAll produces rs and returns copies of those that failed.
func (w *worker) produceAll(ctx context.Context, rs []*kgo.Record) (failed []*kgo.Record) {
	a := acksPool.Get().(*acks)
	a.w = w
	a.left.Add(len(rs))
	for _, o := range rs {
		o.Context = ctx
		w.cl.Produce(ctx, o, a.promise)
	}
	a.left.Wait()
	failed = a.failed
	a.w, a.failed = nil, nil
	acksPool.Put(a)
	for _, r := range failed {
		r.Context = ctx
	}
	return failed
}

// acks collects the acknowledgements of one produceAll. Pooled, with its
// promise bound once: a closure and the WaitGroup, mutex and slice it
// captured were allocated per record before (3.4 of an event's allocations
// in bench a).
type acks struct {
	w       *worker
	left    sync.WaitGroup
	mu      sync.Mutex
	failed  []*kgo.Record
	promise func(*kgo.Record, error) // a.done
}

var acksPool = sync.Pool{New: func() any {
	a := &acks{}
	a.promise = a.done
	return a
}}

// done is the promise of each record: a failed one is logged, counted and
// copied to be produced again (produceAll gives the copies its context).
func (a *acks) done(r *kgo.Record, err error) {
	defer a.left.Done()
	if err == nil {
		return
	}
	w := a.w
	w.c.produceFailures.Add(1)
	if !errors.Is(err, kgo.ErrClientClosed) {
		w.c.log.Error("produce failed; trying again, the source record stays uncommitted", "topic", r.Topic, "source", w.topic, "partition", w.part, "err", err)
	}
	a.mu.Lock()
	a.failed = append(a.failed, &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp})
	a.mu.Unlock()
}

// reproduce appends a copy of each stranded record (checkpoint.Stranded)
// to the end of its topic and, once the copy is acknowledged, counts the
// record finished, so the commit passes it and the later records already
// sent: otherwise the next owner would consume and send them again. In
// practice these are retry records held until due while a later offset,
// due earlier (jitter, Retry-After floors), was sent.
//
// The copy is the record unchanged: key, value, headers (push-sig signs
// them and the topic) and timestamp, so it is due when the original was
// and the next owner holds it as before. It goes to the same partition
// through the client's partitioner (kgo's default hashes the key, as when
// the original was produced). A copy not acknowledged before ctx is done
// leaves its record unfinished: at least once, never at most once.
func (w *worker) reproduce(ctx context.Context) (acked, failed int) {
	es := w.ck.Stranded()
	if len(es) == 0 {
		return 0, 0
	}
	results := make(chan bool, len(es))
	for _, e := range es {
		r := e.Record
		cp := &kgo.Record{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: slices.Clone(r.Headers), Timestamp: r.Timestamp}
		w.cl.Produce(ctx, cp, func(_ *kgo.Record, err error) { results <- err == nil })
	}
	var last *kgo.Record
	for _, e := range es {
		select {
		case ok := <-results:
			if !ok {
				failed++
				continue
			}
		case <-ctx.Done():
			return acked, len(es) - acked
		}
		// Which copy was acknowledged does not matter: the records are
		// finished in order, and an unacknowledged one stops the rest.
		acked++
		if l := w.ck.Finish(e); l != nil {
			last = l
		}
	}
	if last != nil {
		w.cl.MarkCommitRecords(last)
	}
	return acked, failed
}
