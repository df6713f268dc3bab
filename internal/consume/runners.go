package consume

import (
	"slices"
	"sync"
	"time"
)

// runners are the record goroutines, reused. A record started on a window
// slot (startOne) goes to the runner that went idle last, or to a new one
// when none is idle. A runner keeps the stack a send grew (TLS, HTTP/2,
// P-256): a fresh goroutine per record grew its stack and copied it
// several times on every send, 8% of the processor's CPU in bench a
// (docs/benchmarks.md). Last in, first out, so that the few runners a
// steady load needs stay in use and the rest end: taken in turn, every
// runner went idle for as long as the whole set took to come round, and
// each garbage collection meanwhile halved its stack, which the next
// record grew and copied again.
//
// A runner waits runnerIdle for its next record and then ends, so a burst
// leaves no goroutines behind for long; all end when the Consumer's Run
// returns (stop). The records themselves are counted in Consumer.records
// and worker.records, as before: a runner between records holds nothing.
type runners struct {
	handle func(runJob)
	mu     sync.Mutex
	// idle holds the mailboxes of the runners waiting for a record, the
	// last to go idle last. A mailbox holds one record: run takes it off
	// the stack before it sends, so the send never blocks.
	idle []chan runJob
	quit chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// runnerIdle is how long an idle runner waits for a record before it ends.
const runnerIdle = 2 * time.Second

type runJob struct {
	w *worker
	t *task
}

// newRunners returns runners that handle each job with handle.
func newRunners(handle func(runJob)) *runners {
	return &runners{handle: handle, quit: make(chan struct{})}
}

// run handles t of w on the runner that went idle last, or on a new one.
func (p *runners) run(w *worker, t *task) {
	j := runJob{w: w, t: t}
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		mb := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		mb <- j
		return
	}
	p.mu.Unlock()
	p.wg.Add(1)
	go p.loop(make(chan runJob, 1), j)
}

func (p *runners) loop(mb chan runJob, j runJob) {
	defer p.wg.Done()
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		p.handle(j)
		j = runJob{} // hold no record while idle
		p.mu.Lock()
		p.idle = append(p.idle, mb)
		p.mu.Unlock()
		idle.Reset(runnerIdle)
		select {
		case j = <-mb:
			continue
		case <-idle.C:
		case <-p.quit:
		}
		if p.leave(mb) {
			return
		}
		// run took it off the stack first: its record is on the way.
		j = <-mb
	}
}

// leave takes the mailbox mb off the idle stack, if run has not already.
func (p *runners) leave(mb chan runJob) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, q := range p.idle {
		if q == mb {
			p.idle = slices.Delete(p.idle, i, i+1)
			return true
		}
	}
	return false
}

// stop ends the idle runners and waits for every runner. Only records
// already finished may precede it (Run calls it after records.Wait). It is
// safe to call twice.
func (p *runners) stop() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}
