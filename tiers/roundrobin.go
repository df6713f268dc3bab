package tiers

// RoundRobin is a smooth weighted round robin over the tiers (as nginx
// balances upstreams): among the tiers with work, each pick goes to the one
// whose credit is highest after every such tier earns its weight, and the
// pick costs it the weights of all. Over any stretch in which the same tiers
// wait, each gets picks in proportion to its weight, spread out rather than
// in runs; a tier alone takes every pick (work-conserving). The zero value
// is not usable: NewRoundRobin.
type RoundRobin struct {
	weights [3]int
	credit  [3]int
}

// NewRoundRobin returns a round robin with weights indexed by Tier.Index.
func NewRoundRobin(weights [3]int) RoundRobin { return RoundRobin{weights: weights} }

// Next returns the index of the tier whose turn it is among those for which
// waiting is true, or -1 when none waits.
func (r *RoundRobin) Next(waiting func(i int) bool) int {
	best, total := -1, 0
	for i := range r.credit {
		if !waiting(i) {
			continue
		}
		r.credit[i] += r.weights[i]
		total += r.weights[i]
		if best < 0 || r.credit[i] > r.credit[best] {
			best = i
		}
	}
	if best >= 0 {
		r.credit[best] -= total
	}
	return best
}
