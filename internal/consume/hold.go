package consume

import (
	"container/heap"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/topology"
)

// Holding retry records until due: a heap per partition ordered by due
// time (worker.held), read from push-due.

// heldCount is the number of records held until due.
func (w *worker) heldCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.held)
}

// holdLocked adds a retry record to the held set.
func (w *worker) holdLocked(t *task) {
	heap.Push(&w.held, t)
	if t.due.After(w.maxDue) {
		w.maxDue = t.due
	}
}

// popDueLocked removes and returns every held record due at or before now.
func (w *worker) popDueLocked(now time.Time) []*task {
	var out []*task
	for len(w.held) > 0 && !w.held[0].due.After(now) {
		t := heap.Pop(&w.held).(*task)
		t.readyAt = now
		out = append(out, t)
	}
	if len(w.held) == 0 {
		w.maxDue = time.Time{}
	}
	return out
}

// dueHeap orders held records by due time.
type dueHeap []*task

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*task)) }
func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return t
}

// dueOf reads push-due; a record without a readable one is due now, and
// deliver sends it to the DLQ.
func dueOf(r *kgo.Record, now time.Time) time.Time {
	for _, h := range r.Headers {
		if h.Key == topology.HeaderDue {
			m, err := topology.DecodeMeta([]kgo.RecordHeader{h})
			if err != nil {
				return now
			}
			return m.Due
		}
	}
	return now
}

// detach copies a record that will be held until due out of its fetch:
// kgo decodes a batch into one slice of records over one decompressed
// buffer, and one record kept for a minute would keep all of both alive.
func detach(r *kgo.Record) *kgo.Record {
	c := *r
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Value)
	}
	buf := make([]byte, 0, n)
	carve := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		i := len(buf)
		buf = append(buf, b...)
		return buf[i:len(buf):len(buf)]
	}
	c.Key, c.Value = carve(r.Key), carve(r.Value)
	c.Headers = make([]kgo.RecordHeader, len(r.Headers))
	for i, h := range r.Headers {
		c.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: carve(h.Value)}
	}
	return &c
}
