package consume

import (
	"testing"
	"testing/synctest"
	"time"
)

// idleCount is how many runners wait for a record.
func (p *runners) idleCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

// TestRunnersReuse: records one after another run on one goroutine; the
// runner that went idle last takes the next record; idle runners end
// after runnerIdle, and stop waits for a record still running.
func TestRunnersReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		handled := make(chan *task, 16)
		started := 0
		p := newRunners(func(j runJob) {
			if j.w == nil {
				<-release
			}
			handled <- j.t
		})
		// A job of quick goes straight through; one with no worker waits
		// for release. The handle reads nothing else of the worker.
		quick := &worker{}
		run := func(w *worker) *task {
			tk := &task{}
			before := p.idleCount()
			p.run(w, tk)
			if before == 0 {
				started++
			}
			return tk
		}

		for range 5 {
			tk := run(quick)
			if got := <-handled; got != tk {
				t.Fatalf("handled %p, want %p", got, tk)
			}
			synctest.Wait()
		}
		if started != 1 || p.idleCount() != 1 {
			t.Fatalf("five records one after another: %d runners started, %d idle; want 1 and 1", started, p.idleCount())
		}

		// Three at once: the idle one and two new ones.
		for range 3 {
			run(nil)
		}
		if started != 3 {
			t.Fatalf("three records at once: %d runners started, want 3", started)
		}
		for range 3 {
			release <- struct{}{}
			<-handled
			synctest.Wait()
		}
		p.mu.Lock()
		stack := append([]chan runJob(nil), p.idle...)
		p.mu.Unlock()
		if len(stack) != 3 {
			t.Fatalf("%d runners idle, want 3", len(stack))
		}
		run(quick)
		<-handled
		synctest.Wait()
		p.mu.Lock()
		taken := p.idle[len(p.idle)-1]
		p.mu.Unlock()
		if taken != stack[2] {
			t.Fatal("the record did not go to the runner that went idle last")
		}

		// Idle runners end after runnerIdle.
		time.Sleep(runnerIdle + time.Millisecond)
		synctest.Wait()
		if n := p.idleCount(); n != 0 {
			t.Fatalf("%d runners still idle after %v", n, runnerIdle)
		}

		// stop waits for a record that is still running.
		run(nil)
		stopped := make(chan struct{})
		go func() { p.stop(); close(stopped) }()
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("stop returned while a record was running")
		default:
		}
		release <- struct{}{}
		<-handled
		<-stopped
		p.stop() // twice is safe
	})
}
