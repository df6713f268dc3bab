package pushsim

import (
	"container/list"
	"context"
	"sync"
)

// workers is a fixed pool of workers per origin, as a push service that serves from a bounded
// pool and queues the rest instead of refusing: a request that finds every worker of its
// origin busy waits, first come first served, for the next one freed. A freed worker passes
// straight to the request at the head of the queue, so no later arrival overtakes it.
//
// It owns no goroutine: a request waits on a channel of its own, so a testing/synctest bubble
// sees it durably blocked.
type workers struct {
	size int // per origin; 0 = unlimited

	mu      sync.Mutex
	origins map[string]*originWorkers // only origins with a worker busy
}

type originWorkers struct {
	busy  int
	queue list.List // of chan struct{}, closed when the worker is handed over
}

func newWorkers(size int) *workers {
	return &workers{size: size, origins: make(map[string]*originWorkers)}
}

// take waits for a free worker of origin. ok is false when ctx or closing ended the wait
// first: the request is then dropped from the queue and holds no worker. Otherwise the caller
// holds a worker until it calls release(origin).
func (w *workers) take(ctx context.Context, closing <-chan struct{}, origin string) (ok bool) {
	if w.size == 0 {
		return true
	}
	w.mu.Lock()
	o := w.origins[origin]
	if o == nil {
		o = &originWorkers{}
		w.origins[origin] = o
	}
	if o.busy < w.size && o.queue.Len() == 0 {
		o.busy++
		w.mu.Unlock()
		return true
	}
	handed := make(chan struct{})
	e := o.queue.PushBack(handed)
	w.mu.Unlock()

	select {
	case <-handed:
		return true
	case <-ctx.Done():
	case <-closing:
	}
	w.mu.Lock()
	select {
	case <-handed:
		// Handed over as the wait ended: the request is gone all the
		// same, so the worker goes on to the next one.
		w.mu.Unlock()
		w.release(origin)
	default:
		o.queue.Remove(e)
		w.mu.Unlock()
	}
	return false
}

// release frees a worker of origin taken by take: the head of its queue gets it, or it idles.
func (w *workers) release(origin string) {
	if w.size == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.origins[origin]
	if e := o.queue.Front(); e != nil {
		close(o.queue.Remove(e).(chan struct{}))
		return
	}
	o.busy--
	if o.busy == 0 {
		delete(w.origins, origin) // an idle origin is forgotten: the map holds only busy ones
	}
}
