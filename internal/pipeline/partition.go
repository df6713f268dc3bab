package pipeline

import (
	"container/heap"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/topology"
)

// tracked is one consumed record on its way through the pipeline.
type tracked struct {
	rec      *kgo.Record
	received time.Time // when the poll returned it
	due      time.Time // retry records: when it may be sent
	readyAt  time.Time // retry records: when the dispatcher found it due
	startAt  time.Time // retry records: when it got a window slot
	started  bool      // handed to handle: in flight, finished or failed
	done     bool      // every output acknowledged
}

// partition is the state of one assigned partition: the checkpoint of
// consumed records, the records waiting for a window slot and, for retry
// topics, the records held until due. Its ready records are started in
// order as window slots free (Processor.startOne); a retry partition's
// dispatcher goroutine (Processor.dispatch) moves held records to ready as
// they come due.
//
// The checkpoint commits only up to the last record with no unfinished
// record before it, so a crash never skips an event whose outputs were not
// acknowledged.
type partition struct {
	topic string
	part  int32
	src   topology.Source

	wake chan struct{} // capacity 1: the dispatcher has something to look at
	stop chan struct{} // closed when the partition is handed back

	mu     sync.Mutex
	queue  []*tracked // consumed, not yet committed, in offset order
	held   dueHeap    // retry records waiting for their due time
	maxDue time.Time  // latest due time in held
	// counted is len(held)+len(ready) as Processor.held last counted it
	// (retry partitions).
	counted int
	ready   []*tracked // due, waiting for a window slot, in the order to start them
	paused  bool
	// inWindow: queued in Processor.window for a slot; the window's mutex
	// guards it, not mu.
	inWindow bool
	prior    []span // offsets an earlier owner finished after its committed offset
	// metaDirty: a record finished behind an unfinished one since the last
	// commit told which (see annotateCommit).
	metaDirty bool
	revoked   bool // dispatch nothing more
	lost      bool // and mark nothing more
	inFlight  int
	idleCh    chan struct{} // closed when inFlight drops to zero after a revoke
}

func newPartition(topic string, part int32, src topology.Source) *partition {
	return &partition{topic: topic, part: part, src: src, wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// notify wakes the dispatcher, or leaves it a wake-up if it is busy.
func (p *partition) notify() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// track appends a consumed record to the checkpoint queue.
func (p *partition) track(r *kgo.Record, now time.Time) *tracked {
	t := &tracked{rec: r, received: now}
	p.queue = append(p.queue, t)
	return t
}

// finish marks t done and returns the newest record that may now be marked
// for commit, or nil when the head of the queue is still unfinished.
// p.mu must be held.
func (p *partition) finish(t *tracked) *kgo.Record {
	t.done = true
	var last *kgo.Record
	i := 0
	for ; i < len(p.queue) && p.queue[i].done; i++ {
		last = p.queue[i].rec
	}
	if i > 0 {
		n := copy(p.queue, p.queue[i:])
		clear(p.queue[n:])
		p.queue = p.queue[:n]
	}
	if len(p.queue) > 0 && t.rec.Offset > p.queue[0].rec.Offset {
		p.metaDirty = true
	}
	return last
}

// stranded returns the records never started that the checkpoint cannot
// pass although a later record is finished: those between the head of the
// queue and its last finished record that comes before any record started
// but unfinished (in flight, or failed: nothing past it can be committed
// anyway). Records never started after that point need nothing: they are
// not committed, so the next owner consumes them. For a tier partition,
// started in offset order, there are none. p.mu must be held.
func (p *partition) stranded() []*tracked {
	last := -1
	for i, t := range p.queue {
		if t.done {
			last = i
			continue
		}
		if t.started {
			break
		}
	}
	var out []*tracked
	for _, t := range p.queue[:last+1] {
		if !t.started && !t.done {
			out = append(out, t)
		}
	}
	return out
}

// dueHeap orders held records by due time.
type dueHeap []*tracked

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*tracked)) }
func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return t
}

// popDue removes and returns every held record due at or before now.
func (p *partition) popDue(now time.Time) []*tracked {
	var out []*tracked
	for len(p.held) > 0 && !p.held[0].due.After(now) {
		t := heap.Pop(&p.held).(*tracked)
		t.readyAt = now
		out = append(out, t)
	}
	if len(p.held) == 0 {
		p.maxDue = time.Time{}
	}
	return out
}

// hold adds a retry record to the held set. p.mu must be held.
func (p *partition) hold(t *tracked) {
	heap.Push(&p.held, t)
	if t.due.After(p.maxDue) {
		p.maxDue = t.due
	}
}
