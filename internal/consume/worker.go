package consume

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/checkpoint"
	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/topology"
)

// worker is one assigned partition: its goroutine (run) takes the records
// polls bring, tracks them in the partition's checkpoint, holds retry
// records until due, and offers the ready ones to the window, which starts
// each on its own goroutine (startOne → handle). partitions.go starts and
// stops it.
//
// Lock order: Consumer.mu, then worker.mu, then the tracker's; window.mu
// and budget.mu are taken alone or last.
type worker struct {
	c     *Consumer
	cl    *kgo.Client
	topic string
	part  int32
	src   topology.Source
	ck    checkpoint.Tracker

	ctx    context.Context // cancelled at hand-off
	cancel context.CancelFunc
	drain  context.Context // a graceful hand-off: refused produces tried until then (stop)
	limit  context.Context // the hand-off waits for the records in flight until then
	grace  bool            // a graceful hand-off: finish, re-produce, mark
	wake   chan struct{}   // capacity 1: run has something to look at
	done   chan struct{}   // closed when run returns
	// resumed is closed once the tracker knows what was finished before
	// this member took the partition (resume.go): run waits for it.
	resumed chan struct{}

	// inWindow: queued in the window for a slot; window.mu guards it.
	inWindow bool
	// stuckSince: unix ns of the first produce failure not yet overcome.
	stuckSince atomic.Int64

	mu          sync.Mutex
	incoming    []*kgo.Record // polled, not yet tracked
	held        dueHeap       // retry records waiting for their due time
	maxDue      time.Time     // latest due time in held
	ready       []*task       // due, waiting for a window slot, in order
	paused      bool
	counted     int  // retry records in memory as the tier's budget counts them
	warnedAgain bool // told once that records came again
	// resumeSince is when the partition's previous owner last committed,
	// set by resume when records waited; the first record tracked
	// observes how long it waited until readyAt (Hooks.Resumed).
	resumeSince, readyAt time.Time
	closing              bool           // start nothing more
	records              sync.WaitGroup // record goroutines (startOne)
}

// task is one tracked record on its way.
type task struct {
	e        *checkpoint.Entry
	received time.Time // when the poll returned it
	due      time.Time // retry records: when it may be sent
	readyAt  time.Time // retry records: when run found it due
	startAt  time.Time // retry records: when it got a window slot
}

// tasks recycles the tasks that ran: one allocation per record less. A
// task dropped unstarted (hand-off) is left to the collector.
var tasks = sync.Pool{New: func() any { return new(task) }}

func newTask(e *checkpoint.Entry, received, due time.Time) *task {
	t := tasks.Get().(*task)
	*t = task{e: e, received: received, due: due}
	return t
}

func newWorker(c *Consumer, cl *kgo.Client, topic string, part int32, src topology.Source) *worker {
	ctx, cancel := context.WithCancel(context.Background())
	return &worker{c: c, cl: cl, topic: topic, part: part, src: src, ctx: ctx, cancel: cancel,
		wake: make(chan struct{}, 1), done: make(chan struct{}), resumed: make(chan struct{})}
}

// push hands records of a poll to the worker. They count at once, in the
// poll's goroutine, towards the tier topics' queue or the retry budget, so
// the next poll already sees them (pollContext, pollSize).
func (w *worker) push(rs []*kgo.Record) {
	w.mu.Lock()
	w.incoming = append(w.incoming, rs...)
	w.recountLocked()
	w.mu.Unlock()
	if !w.src.Retry {
		w.c.queued[w.src.Tier.Index()].Add(int64(len(rs)))
	}
	w.notify()
}

// notify wakes run, or leaves it a wake-up if it is busy.
func (w *worker) notify() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// stop starts the hand-off: run finishes it and closes done.
func (w *worker) stop(drain, limit context.Context, graceful bool) {
	w.mu.Lock()
	w.drain, w.limit, w.grace = drain, limit, graceful
	w.mu.Unlock()
	if !graceful {
		w.ck.Close() // mark nothing more
	}
	w.cancel()
}

// run is the partition's goroutine until its hand-off.
func (w *worker) run() {
	defer close(w.done)
	select {
	case <-w.resumed:
	case <-w.ctx.Done():
		w.handBack()
		return
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		next, ok := w.step()
		if ok {
			timer.Reset(max(next.Sub(w.c.cfg.Now()), 0))
		} else {
			timer.Stop()
		}
		select {
		case <-w.wake:
		case <-timer.C:
		case <-w.ctx.Done():
			w.handBack()
			return
		}
	}
}

// step tracks what polls brought, moves held records that came due to
// ready, keeps the fetch paused or resumed, and offers ready records to the
// window. It returns when run must look again.
func (w *worker) step() (next time.Time, ok bool) {
	now := w.c.cfg.Now()
	w.mu.Lock()
	w.trackLocked(now)
	w.ready = append(w.ready, w.popDueLocked(now)...)
	next, ok = w.scheduleLocked(now)
	w.recountLocked()
	ready := len(w.ready) > 0
	w.mu.Unlock()
	if ready {
		w.c.window.offer(w)
	}
	return next, ok
}

// trackLocked tracks the incoming records: a tier record is ready at once,
// a retry record held until due. Records the partition's previous owner
// finished are skipped.
func (w *worker) trackLocked(now time.Time) {
	if len(w.incoming) > 0 && !w.resumeSince.IsZero() {
		w.observeResume(w.incoming[0], now)
	}
	var skipped skips
	again := 0 // consumed again: dropped (checkpoint.Tracker.Track)
	for _, r := range w.incoming {
		if !w.src.Retry {
			e, why, mark := w.ck.Track(r)
			switch {
			case e == nil:
				again++
			case !w.skip(why, mark, &skipped):
				w.ready = append(w.ready, newTask(e, now, time.Time{}))
			}
			continue
		}
		due := dueOf(r, now)
		if due.After(now) {
			r = detach(r)
		}
		e, why, mark := w.ck.Track(r)
		switch {
		case e == nil:
			again++
		case !w.skip(why, mark, &skipped):
			w.holdLocked(newTask(e, now, due))
		}
	}
	clear(w.incoming)
	w.incoming = w.incoming[:0]
	if again > 0 && !w.warnedAgain {
		w.warnedAgain = true
		w.c.log.Warn("the client consumed records of this partition again (its position went back); they are dropped", "topic", w.topic, "partition", w.part, "records", again)
	}
	if !w.src.Retry {
		w.c.unqueue(w.src.Tier.Index(), skipped.total()+again)
	}
	if w.c.hooks != nil {
		for why, n := range skipped {
			w.c.hooks.Skipped(why, n)
		}
	}
}

// observeResume tells how long the partition's first record after a
// takeover waited for this member: from the previous owner's last commit,
// or from when the record came (produced, or due), if later, until this
// member was ready for it.
func (w *worker) observeResume(r *kgo.Record, now time.Time) {
	since := w.resumeSince
	w.resumeSince = time.Time{}
	came := r.Timestamp
	if w.src.Retry {
		came = dueOf(r, now)
	}
	if came.After(since) {
		since = came
	}
	if waited := w.readyAt.Sub(since); waited > 0 && w.c.hooks != nil {
		w.c.hooks.Resumed(waited)
	}
}

// skips counts skipped records by why they were.
type skips map[string]int

func (s skips) total() int {
	n := 0
	for _, k := range s {
		n += k
	}
	return n
}

// skip reports whether Track skipped a record (why is not ""), counting
// it and marking what it let the head pass.
func (w *worker) skip(why string, mark *kgo.Record, skipped *skips) bool {
	if why == "" {
		return false
	}
	if *skipped == nil {
		*skipped = make(skips, 1)
	}
	(*skipped)[why]++
	if mark != nil {
		w.cl.MarkCommitRecords(mark)
	}
	return true
}

// scheduleLocked pauses fetching a retry partition while what it holds
// reaches further than Prefetch plus the step's jitter span, or while
// MaxInFlight of its records are due and wait for a slot, and resumes it
// otherwise. It returns when run must look again: the head is due, or it
// is time to fetch what follows the last held record; ok is false when
// nothing is held.
func (w *worker) scheduleLocked(now time.Time) (next time.Time, ok bool) {
	if !w.src.Retry {
		return time.Time{}, false
	}
	// A record after the last one held is due at least that one's due
	// time less the jitter span: fetch it a Prefetch before then.
	lead := w.c.cfg.Prefetch + w.c.cfg.JitterSpan(w.src.Delay)
	hold := len(w.held) > 0 && w.maxDue.Sub(now) > lead
	if want := hold || len(w.ready) >= w.c.cfg.MaxInFlight; want != w.paused {
		w.paused = want
		tp := map[string][]int32{w.topic: {w.part}}
		if want {
			w.cl.PauseFetchPartitions(tp)
		} else {
			w.cl.ResumeFetchPartitions(tp)
		}
	}
	if len(w.held) == 0 {
		return time.Time{}, false
	}
	next = w.held[0].due
	if hold {
		if r := w.maxDue.Add(-lead); r.Before(next) {
			next = r
		}
	}
	return next, true
}

// recountLocked brings the tier's count of held retry records up to date.
func (w *worker) recountLocked() {
	if !w.src.Retry {
		return
	}
	n := len(w.incoming) + len(w.held) + len(w.ready)
	w.c.budgets[w.src.Tier.Index()].add(w.cl, n-w.counted)
	w.counted = n
}

// startOne starts the partition's next ready record on a window slot taken
// for it (window.start), on a record goroutine (runners.go).
func (c *Consumer) startOne(w *worker) (started, more bool) {
	w.mu.Lock()
	if w.closing || w.ctx.Err() != nil || len(w.ready) == 0 {
		w.mu.Unlock()
		return false, false
	}
	t := w.ready[0]
	w.ready[0] = nil
	w.ready = w.ready[1:]
	if w.src.Retry {
		t.startAt = c.cfg.Now()
	}
	w.ck.Start(t.e)
	w.recountLocked()
	more = len(w.ready) > 0
	// Below MaxInFlight ready again: run may resume the fetch.
	look := w.src.Retry && len(w.ready) == c.cfg.MaxInFlight-1
	w.records.Add(1)
	c.records.Add(1)
	w.mu.Unlock()
	if look {
		w.notify()
	}
	if !w.src.Retry {
		c.unqueue(w.src.Tier.Index(), 1)
	}
	c.runners.run(w, t)
	return true, more
}

// handle is one record on its runner: deliver decides, the records it leads
// to are produced, and once all are acknowledged the hooks fire and the
// checkpoint moves. A record abandoned at hand-off stays unfinished.
func (w *worker) handle(t *task) {
	defer func() {
		*t = task{}
		tasks.Put(t)
	}()
	defer w.c.records.Done()
	defer w.records.Done()
	defer w.c.window.release(w.src.Tier.Index())
	r := t.e.Record
	if w.src.Retry {
		w.c.notePickup(t, w.c.cfg.Now())
	}
	d := w.c.h.Handle(w.ctx, deliver.In{Record: r, Source: w.src, Received: t.received, Due: t.due})
	if d == nil || !w.produce(d) {
		return
	}
	d.Acked()
	if last := w.ck.Finish(t.e); last != nil {
		w.cl.MarkCommitRecords(last)
	}
}

// handBack finishes the hand-off stop started: nothing more starts, the
// tier records that waited for a slot no longer count, and — on a graceful
// hand-off — the records in flight finish (sends under way and the produce
// of their results, until the hand-off's limit: handOff) and the held
// records standing before finished ones are re-produced, so that the
// commit passes them and the records already sent behind them.
func (w *worker) handBack() {
	w.mu.Lock()
	w.closing = true
	limit, graceful := w.limit, w.grace
	if !w.src.Retry {
		w.c.unqueue(w.src.Tier.Index(), len(w.incoming)+len(w.ready))
	}
	w.mu.Unlock()
	if graceful {
		waited := make(chan struct{})
		go func() { w.records.Wait(); close(waited) }()
		select {
		case <-waited:
			if n, failed := w.reproduce(limit); n+failed > 0 {
				w.c.log.Info("re-produced held records on hand-off", "topic", w.topic, "partition", w.part, "records", n, "failed", failed)
			}
		case <-limit.Done():
			w.c.log.Warn("hand-off: records still in flight; the next owner sends them again", "topic", w.topic, "partition", w.part)
		}
	}
	w.mu.Lock()
	w.held, w.ready, w.incoming = nil, nil, nil
	w.recountLocked()
	w.mu.Unlock()
}
