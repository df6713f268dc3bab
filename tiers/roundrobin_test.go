package tiers

import "testing"

func TestRoundRobin(t *testing.T) {
	tests := []struct {
		name    string
		waiting [3]bool
		want    [3]int // picks of each tier in 100
	}{
		{"all wait: 6:3:1", [3]bool{true, true, true}, [3]int{60, 30, 10}},
		{"tier 1 idle: 3:1", [3]bool{false, true, true}, [3]int{0, 75, 25}},
		{"one tier alone takes all", [3]bool{false, false, true}, [3]int{0, 0, 100}},
		{"none waits", [3]bool{}, [3]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRoundRobin([3]int{6, 3, 1})
			var got [3]int
			for range 100 {
				if i := r.Next(func(i int) bool { return tt.waiting[i] }); i >= 0 {
					got[i]++
				}
			}
			if got != tt.want {
				t.Errorf("picks %v, want %v", got, tt.want)
			}
		})
	}
}

// Picks are spread, not in runs: tier 3 never waits more than its share.
func TestRoundRobinSpread(t *testing.T) {
	r := NewRoundRobin([3]int{6, 3, 1})
	last := -1
	for n := range 40 {
		if r.Next(func(int) bool { return true }) == 2 {
			if last >= 0 && n-last != 10 {
				t.Fatalf("tier 3 picked at %d after %d: want every 10th", n, last)
			}
			last = n
		}
	}
}
