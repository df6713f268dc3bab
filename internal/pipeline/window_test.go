package pipeline

import (
	"slices"
	"testing"
	"testing/synctest"
)

type windowWaiter struct{ retry, tier int }

// grantOrder queues one waiter per entry of ws on a full window of one
// slot, in that order, then frees the slot len(ws) times and returns the
// order in which they got it.
func grantOrder(t *testing.T, weights [3]int, ws []windowWaiter) []windowWaiter {
	var got []windowWaiter
	synctest.Test(t, func(t *testing.T) {
		w := newWindow(1, weights)
		if !w.acquire(0, 0, nil) {
			t.Fatal("a free slot was refused")
		}
		granted := make(chan windowWaiter)
		for _, c := range ws {
			go func() {
				if w.acquire(c.retry, c.tier, nil) {
					granted <- c
				}
			}()
			synctest.Wait() // queued in this order
		}
		for range ws {
			w.release()
			got = append(got, <-granted)
		}
		if n := w.inUse(); n != 1 {
			t.Errorf("inUse = %d after handing the slot on, want 1", n)
		}
	})
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

// TestWindowStop: a dispatcher handed back while it waits leaves the
// queue, and one whose slot arrives as it stops passes the slot on.
func TestWindowStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWindow(1, [3]int{1, 1, 1})
		w.acquire(0, 0, nil)
		stop := make(chan struct{})
		res := make(chan bool)
		go func() { res <- w.acquire(0, 2, stop) }()
		synctest.Wait()
		close(stop)
		if <-res {
			t.Fatal("acquire took a slot after stop")
		}
		w.release()
		if n := w.inUse(); n != 0 {
			t.Fatalf("inUse = %d with nothing held, want 0", n)
		}

		// Granted and stopped at once: whichever select case wins, the
		// slot is held or passed on, never lost.
		w.acquire(0, 0, nil)
		stop = make(chan struct{})
		go func() { res <- w.acquire(1, 1, stop) }()
		synctest.Wait()
		close(stop)
		w.release()
		if <-res {
			w.release()
		}
		if n := w.inUse(); n != 0 {
			t.Errorf("inUse = %d with nothing held, want 0", n)
		}
		if !w.acquire(0, 0, nil) {
			t.Error("the slot was lost")
		}
	})
}
