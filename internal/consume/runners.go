package consume

import (
	"sync"
	"time"
)

// runners are the record goroutines, reused. A record started on a window
// slot (startOne) goes to an idle runner, or to a new one when none is
// idle. A runner keeps the stack a send grew (TLS, HTTP/2, P-256): a fresh
// goroutine per record grew its stack and copied it several times on every
// send, 8% of the processor's CPU in bench a (docs/benchmarks.md).
//
// A runner waits runnerIdle for its next record and then ends, so a burst
// leaves no goroutines behind for long; all end when the Consumer's Run
// returns (stop). The records themselves are counted in Consumer.records
// and worker.records, as before: a runner between records holds nothing.
type runners struct {
	work chan runJob // unbuffered: a send succeeds only when a runner waits
	quit chan struct{}
	once sync.Once
	wg   sync.WaitGroup
}

// runnerIdle is how long an idle runner waits for a record before it ends.
const runnerIdle = 30 * time.Second

type runJob struct {
	w *worker
	t *task
}

func newRunners() *runners {
	return &runners{work: make(chan runJob), quit: make(chan struct{})}
}

// run handles t of w on an idle runner, or on a new one.
func (p *runners) run(w *worker, t *task) {
	j := runJob{w: w, t: t}
	select {
	case p.work <- j:
	default:
		p.wg.Add(1)
		go p.loop(j)
	}
}

func (p *runners) loop(j runJob) {
	defer p.wg.Done()
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	for {
		j.w.handle(j.t)
		j = runJob{} // hold no record while idle
		idle.Reset(runnerIdle)
		select {
		case j = <-p.work:
		case <-idle.C:
			return
		case <-p.quit:
			return
		}
	}
}

// stop ends the idle runners and waits for every runner. Only records
// already finished may precede it (Run calls it after records.Wait). It is
// safe to call twice.
func (p *runners) stop() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}
