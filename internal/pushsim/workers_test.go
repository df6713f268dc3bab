package pushsim

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

const poolOrigin = "https://push.example.net"

// queueOf returns how many requests wait for a worker of origin and how many workers are busy.
func queueOf(w *workers, origin string) (queued, busy int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.origins[origin]
	if o == nil {
		return 0, 0
	}
	return o.queue.Len(), o.busy
}

// TestWorkersFIFO: past the pool's size requests wait; each freed worker goes to the oldest
// waiting request, and the pool never runs more at once than its size.
func TestWorkersFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkers(2)
		closing := make(chan struct{})
		for range 2 {
			if !w.take(t.Context(), closing, poolOrigin) {
				t.Fatal("take with a free worker = false")
			}
		}
		var (
			mu    sync.Mutex
			order []int
		)
		for i := range 4 {
			go func() {
				if w.take(t.Context(), closing, poolOrigin) {
					mu.Lock()
					order = append(order, i)
					mu.Unlock()
				}
			}()
			synctest.Wait() // request i is queued before i+1 arrives
		}
		if q, busy := queueOf(w, poolOrigin); q != 4 || busy != 2 {
			t.Fatalf("queue %d, busy %d; want 4 queued behind 2 busy", q, busy)
		}
		if !w.take(t.Context(), closing, "https://other.example.net") {
			t.Error("another origin waited behind this one's pool")
		}
		w.release("https://other.example.net")
		for served := 1; served <= 4; served++ {
			w.release(poolOrigin)
			synctest.Wait()
			mu.Lock()
			got := slices.Clone(order)
			mu.Unlock()
			if want := []int{0, 1, 2, 3}[:served]; !slices.Equal(got, want) {
				t.Fatalf("after %d releases served %v, want %v", served, got, want)
			}
			if _, busy := queueOf(w, poolOrigin); busy != 2 {
				t.Errorf("after %d releases %d busy, want 2 (a freed worker passes on)", served, busy)
			}
		}
		w.release(poolOrigin)
		w.release(poolOrigin)
		if len(w.origins) != 0 {
			t.Errorf("an idle pool is remembered: %d origins", len(w.origins))
		}
	})
}

// TestWorkersAbandoned: a request whose sender goes away while it waits leaves the queue and
// takes no worker; the next freed worker goes to the request behind it.
func TestWorkersAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorkers(1)
		closing := make(chan struct{})
		w.take(t.Context(), closing, poolOrigin)
		gone, leave := context.WithCancel(t.Context())
		results := make(chan bool, 2)
		go func() { results <- w.take(gone, closing, poolOrigin) }()
		synctest.Wait()
		next := make(chan bool, 1)
		go func() { next <- w.take(t.Context(), closing, poolOrigin) }()
		synctest.Wait()
		leave()
		if <-results {
			t.Error("take after the sender left = true")
		}
		if q, busy := queueOf(w, poolOrigin); q != 1 || busy != 1 {
			t.Errorf("queue %d, busy %d after one left; want 1 and 1", q, busy)
		}
		w.release(poolOrigin)
		if !<-next {
			t.Error("the request behind the one that left got no worker")
		}

		// Closing ends every wait.
		go func() { results <- w.take(t.Context(), closing, poolOrigin) }()
		synctest.Wait()
		close(closing)
		if <-results {
			t.Error("take while closing = true")
		}
		w.release(poolOrigin)
		if len(w.origins) != 0 {
			t.Errorf("%d origins left after every worker was freed", len(w.origins))
		}
	})
}

// TestWorkersUnlimited: a pool of size 0 never waits and keeps no state.
func TestWorkersUnlimited(t *testing.T) {
	w := newWorkers(0)
	for range 100 {
		if !w.take(t.Context(), nil, poolOrigin) {
			t.Fatal("unlimited take = false")
		}
	}
	w.release(poolOrigin)
	if len(w.origins) != 0 {
		t.Errorf("unlimited pool keeps %d origins", len(w.origins))
	}
}
