package consume

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestNextLimit(t *testing.T) {
	for _, tt := range []struct {
		name         string
		cur, n, late int64
		want         int
	}{
		{"over 1% late: a quarter less", 768, 200, 3, 576},
		{"exactly 1% late: hold", 768, 200, 2, 768},
		{"few pick-ups, some late: hold", 768, 10, 5, 768},
		{"none late: an eighth more", 512, 200, 0, 576},
		{"no retries: grow", 512, 0, 0, 576},
		{"never past the ceiling", 760, 0, 0, 768},
		{"never under the floor", 40, 200, 100, 32},
		{"a small window still grows", 4, 0, 0, 5},
	} {
		if got := nextLimit(int(tt.cur), 32, 768, tt.n, tt.late); got != tt.want {
			t.Errorf("%s: nextLimit(%d, n=%d, late=%d) = %d, want %d", tt.name, tt.cur, tt.n, tt.late, got, tt.want)
		}
	}
}

// TestAdaptWindow: retries that wait for a CPU shrink the window down to
// the floor; once they are on time it grows back to MaxInFlight. A retry
// that waited for a window slot, or came overdue, is not late for the CPU.
func TestAdaptWindow(t *testing.T) {
	cfg := Config{MaxInFlight: 256, RetryLateness: 10 * time.Millisecond}
	p := &Consumer{cfg: cfg}
	p.window = newWindow(cfg.MaxInFlight, [3]int{6, 3, 1}, func(*worker) (bool, bool) { return false, false })
	due := time.Unix(1_800_000_000, 0)
	pickup := func(arrived, ready, slot, run time.Duration) {
		p.notePickup(&task{received: due.Add(arrived), due: due, readyAt: due.Add(ready), startAt: due.Add(slot)}, due.Add(run))
	}
	step := func(n int, arrived, ready, slot, run time.Duration) int {
		for range n {
			pickup(arrived, ready, slot, run)
		}
		p.adaptStep()
		return p.window.limit()
	}

	// Found due 1 ms late, waited 2 s for a slot, ran 1 ms after it: on
	// time for the CPU. So did one that arrived a minute overdue.
	if got := step(100, 0, time.Millisecond, 2*time.Second, 2*time.Second+time.Millisecond); got != 256 {
		t.Fatalf("window %d after retries that waited for slots, want 256", got)
	}
	if got := step(100, time.Minute, time.Minute, time.Minute, time.Minute+time.Millisecond); got != 256 {
		t.Fatalf("window %d after overdue arrivals, want 256", got)
	}
	// Ran 40 ms after getting a slot: late.
	if got := step(100, 0, 0, 0, 40*time.Millisecond); got != 192 {
		t.Fatalf("window %d after late pick-ups, want 192", got)
	}
	for range 20 {
		step(100, 0, 30*time.Millisecond, 30*time.Millisecond, 30*time.Millisecond)
	}
	if got := p.window.limit(); got != adaptFloor {
		t.Fatalf("window %d after 20 late intervals, want the floor %d", got, adaptFloor)
	}
	for range 30 {
		step(0, 0, 0, 0, 0)
	}
	if got := p.window.limit(); got != 256 {
		t.Errorf("window %d after 30 quiet intervals, want MaxInFlight 256", got)
	}
}

// TestWindowResize: a window shrunk below the slots in use hands no slot on
// until the records in flight are under the new size; growing starts the
// waiting records at once.
func TestWindowResize(t *testing.T) {
	w, f := newFakeWindow(4, [3]int{1, 1, 1})
	ps := f.partition(windowWaiter{0, 0}, 10)
	w.offer(ps)
	if len(f.started) != 4 {
		t.Fatalf("%d started on 4 slots, want 4", len(f.started))
	}
	w.resize(2)
	w.release(0)
	w.release(0)
	if len(f.started) != 4 || w.inUse() != 2 {
		t.Fatalf("after shrinking to 2 and two releases: %d started, %d in use; want 4 and 2", len(f.started), w.inUse())
	}
	w.release(0)
	if len(f.started) != 5 || w.inUse() != 2 {
		t.Fatalf("a release at the new size: %d started, %d in use; want 5 and 2", len(f.started), w.inUse())
	}
	w.resize(5)
	if len(f.started) != 8 || w.inUse() != 5 {
		t.Errorf("after growing to 5: %d started, %d in use; want 8 and 5", len(f.started), w.inUse())
	}
}

// detach leaves nothing of the fetch behind: the copy shares no bytes
// with the record it came from.
func TestDetach(t *testing.T) {
	buf := []byte("keyvaluehdr")
	r := &kgo.Record{Topic: "push.tier1.retry-2s", Partition: 3, Offset: 7, Key: buf[0:3], Value: buf[3:8],
		Headers: []kgo.RecordHeader{{Key: "push-due", Value: buf[8:11]}, {Key: "empty"}}}
	c := detach(r)
	for i := range buf {
		buf[i] = 'x'
	}
	if string(c.Key) != "key" || string(c.Value) != "value" || string(c.Headers[0].Value) != "hdr" || c.Headers[1].Value != nil {
		t.Fatalf("copy changed with the fetch buffer: key %q value %q headers %v", c.Key, c.Value, c.Headers)
	}
	if c.Topic != r.Topic || c.Partition != r.Partition || c.Offset != r.Offset {
		t.Fatalf("copy lost its position: %s/%d@%d", c.Topic, c.Partition, c.Offset)
	}
	c.Key = append(c.Key, '!')
	if string(c.Value) != "value" {
		t.Fatalf("appending to the key overwrote the value: %q", c.Value)
	}
}
