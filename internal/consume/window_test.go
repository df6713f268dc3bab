package consume

import (
	"slices"
	"testing"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

type windowWaiter struct{ retry, tier int }

// fakeStarts stands in for Processor.startOne: each partition has a count
// of ready records, and every start is logged in order.
type fakeStarts struct {
	ready   map[*worker]int
	started []*worker
}

func (f *fakeStarts) start(ps *worker) (started, more bool) {
	if ps.closing || f.ready[ps] == 0 {
		return false, false
	}
	f.ready[ps]--
	f.started = append(f.started, ps)
	return true, f.ready[ps] > 0
}

func (f *fakeStarts) partition(c windowWaiter, ready int) *worker {
	ps := &worker{src: topology.Source{Tier: tiers.All[c.tier], Retry: c.retry == 1}}
	f.ready[ps] = ready
	return ps
}

func newFakeWindow(size int, weights [3]int) (*window, *fakeStarts) {
	f := &fakeStarts{ready: make(map[*worker]int)}
	return newWindow(size, weights, f.start), f
}

// grantOrder fills a window of one slot, offers one partition per entry of
// ws with a record ready, in that order, then frees the slot len(ws) times
// and returns the order in which their records started.
func grantOrder(t *testing.T, weights [3]int, ws []windowWaiter) []windowWaiter {
	t.Helper()
	w, f := newFakeWindow(1, weights)
	w.offer(f.partition(windowWaiter{0, 0}, 1))
	class := make(map[*worker]windowWaiter)
	for _, c := range ws {
		ps := f.partition(c, 1)
		class[ps] = c
		w.offer(ps)
	}
	if len(f.started) != 1 {
		t.Fatalf("%d records started on a window of one slot, want 1", len(f.started))
	}
	for range ws {
		w.release(f.started[len(f.started)-1].src.Tier.Index()) // the releasing goroutine starts the next record
	}
	var got []windowWaiter
	for _, ps := range f.started[1:] {
		got = append(got, class[ps])
	}
	if n := w.inUse(); n != 1 {
		t.Errorf("inUse = %d after handing the slot on, want 1", n)
	}
	return got
}

// TestWindowRetriesFirst: a freed slot goes to a retry partition before any
// tier partition that waited longer, then to the tiers by weight.
func TestWindowRetriesFirst(t *testing.T) {
	ws := []windowWaiter{{0, 2}, {0, 0}, {1, 2}, {0, 1}, {1, 0}}
	got := grantOrder(t, [3]int{6, 3, 1}, ws)
	want := []windowWaiter{{1, 0}, {1, 2}, {0, 0}, {0, 1}, {0, 2}}
	if !slices.Equal(got, want) {
		t.Errorf("grant order %v, want %v (retries, then tier 1, 2, 3)", got, want)
	}
}

// TestWindowShares: tiers that all wait share the slots by their weights,
// and a tier alone takes them all.
func TestWindowShares(t *testing.T) {
	var ws []windowWaiter
	for range 10 {
		for tier := range 3 {
			ws = append(ws, windowWaiter{0, tier})
		}
	}
	got := grantOrder(t, [3]int{6, 3, 1}, ws)
	if len(got) != len(ws) {
		t.Fatalf("%d records started, want %d", len(got), len(ws))
	}
	var first10 [3]int
	for _, g := range got[:10] {
		first10[g.tier]++
	}
	if first10 != [3]int{6, 3, 1} {
		t.Errorf("first 10 grants by tier %v, want [6 3 1]", first10)
	}
	var all [3]int
	for _, g := range got {
		all[g.tier]++
	}
	if all != [3]int{10, 10, 10} {
		t.Errorf("grants by tier %v, want every waiter served", all)
	}
}

// TestWindowTurns: an offer starts records while slots are free and queues
// the partition for the rest; partitions of one class then take turns, a
// record each.
func TestWindowTurns(t *testing.T) {
	w, f := newFakeWindow(2, [3]int{1, 1, 1})
	a := f.partition(windowWaiter{1, 0}, 4)
	b := f.partition(windowWaiter{1, 0}, 3)
	w.offer(a) // two started, two left
	w.offer(b)
	w.offer(a) // queued already: no second place in the queue
	if !slices.Equal(f.started, []*worker{a, a}) {
		t.Fatalf("started %d records before any release, want a's two", len(f.started))
	}
	for range 5 {
		w.release(0)
	}
	want := []*worker{a, a, a, b, a, b, b}
	if !slices.Equal(f.started, want) {
		t.Errorf("start order is not a, a, then turns a, b, a, b, b")
	}
	w.release(0)
	w.release(0)
	if n := w.inUse(); n != 0 {
		t.Errorf("inUse = %d with nothing started, want 0", n)
	}
}

// TestWindowHandedBack: a queued partition that has nothing to start when
// its turn comes (handed back) passes the slot on, and with nobody else
// waiting the slot is free, not lost.
func TestWindowHandedBack(t *testing.T) {
	w, f := newFakeWindow(1, [3]int{1, 1, 1})
	w.offer(f.partition(windowWaiter{0, 0}, 1))
	gone := f.partition(windowWaiter{1, 0}, 5)
	next := f.partition(windowWaiter{0, 2}, 1)
	w.offer(gone)
	w.offer(next)
	gone.closing = true
	w.release(0)
	if got := f.started[len(f.started)-1]; got != next {
		t.Fatal("the slot did not pass to the next partition")
	}
	w.release(2)
	if n := w.inUse(); n != 0 {
		t.Fatalf("inUse = %d with nothing held, want 0", n)
	}
	w.offer(f.partition(windowWaiter{0, 0}, 1))
	if n := w.inUse(); n != 1 {
		t.Errorf("inUse = %d after an offer on a free window, want 1 (the slot was lost)", n)
	}
}

// TestWindowReservesForTier1: a flood of tier 3 takes no more than half
// the slots; a tier-1 record arriving then starts at once, and the lower
// tiers take the reserved slots back only as tier 1 leaves them.
func TestWindowReservesForTier1(t *testing.T) {
	w, f := newFakeWindow(8, [3]int{6, 3, 1})
	flood := f.partition(windowWaiter{0, 2}, 100)
	w.offer(flood)
	if got := len(f.started); got != 4 {
		t.Fatalf("a tier-3 flood started %d records on a window of 8, want 4", got)
	}
	retry3 := f.partition(windowWaiter{1, 2}, 5)
	w.offer(retry3)
	if got := len(f.started); got != 4 {
		t.Fatalf("a tier-3 retry took a reserved slot: %d started, want 4", got)
	}
	urgent := f.partition(windowWaiter{0, 0}, 5)
	w.offer(urgent)
	if got := f.started[4:]; len(got) != 4 || got[0] != urgent || got[3] != urgent {
		t.Fatalf("tier 1 did not start at once on the reserved slots: %d more started", len(got))
	}
	// A tier-3 slot frees: tier 1's fifth record goes first.
	w.release(2)
	if got := f.started[len(f.started)-1]; got != urgent {
		t.Errorf("the freed slot went to %v, want tier 1", got.src)
	}
	// Tier 1 is done: its slots go back to the lower tiers, retries first.
	for range 5 {
		w.release(0)
	}
	if got := w.inUse(); got != 4 {
		t.Errorf("%d slots in use after tier 1 left, want the 4 of the lower tiers", got)
	}
	if got := f.started[len(f.started)-1]; got != retry3 {
		t.Errorf("tier 1's freed slot went to %v, want the tier-3 retry", got.src)
	}
}

// TestWindowKeepsLowerTiersGoing: tier-1 records held in flight (a push
// service throttling them) fill the window; a lower tier that waits still
// gets a quarter of it as slots free, and tier 1 takes the rest again.
func TestWindowKeepsLowerTiersGoing(t *testing.T) {
	w, f := newFakeWindow(8, [3]int{6, 3, 1})
	stuck := f.partition(windowWaiter{1, 0}, 100) // tier-1 retries, always ready
	w.offer(stuck)
	if got := w.inUse(); got != 8 {
		t.Fatalf("tier 1 alone took %d of 8 slots, want all", got)
	}
	healthy := f.partition(windowWaiter{0, 1}, 100)
	w.offer(healthy)
	for range 8 {
		w.release(0)
	}
	var got [3]int
	for _, ps := range f.started[8:] {
		got[ps.src.Tier.Index()]++
	}
	if got[1] != 2 || got[0] != 6 {
		t.Errorf("eight tier-1 slots freed went %v by tier, want tier 2 its quarter (2) and tier 1 the rest", got)
	}
}
