package main

import (
	"fmt"
	"time"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
)

// scenario is one workload against one simulated push service.
type scenario struct {
	Name  string
	Title string
	// Events produced.
	Events int
	// Sim shapes the push service: latency, failures, rate limit.
	Sim func(*pushsim.Config)
	// Script, when set, scripts event i's subscription; malformed events
	// carry a 12-byte auth secret.
	Script func(i int) (script []pushsim.Response, malformed bool)
	// Offered is the produce rate in events/s; 0 produces as fast as the
	// broker takes them.
	Offered float64
	// Ceiling also runs the webpush-go-only loop over the same events.
	Ceiling bool
	// HoldRSS waits until every event sits in a retry step, samples the
	// processor's RSS for the hold time, and stops without outcomes.
	HoldRSS bool
	// Processors in the group (default 1); CPU and memory are the first's.
	Processors int
	// Tier, when set, gives event i's tier (default tierOf).
	Tier func(i int) tiers.Tier
	// The last Later events are produced After the others start (the
	// others still at Offered, or at once), by a producer of their own.
	Later int
	After time.Duration
}

// tierOfEvent is event i's tier in sc.
func (sc scenario) tierOfEvent(i int) tiers.Tier {
	if sc.Tier != nil {
		return sc.Tier(i)
	}
	return tierOf(i)
}

func scenarioNamed(name string, cfg config) scenario {
	switch name {
	case "a":
		return scenario{Name: "a", Title: "all succeed, no latency", Events: cfg.Events, Ceiling: true}
	case "b":
		return scenario{Name: "b", Title: "all succeed, 50 ms per push", Events: cfg.Events, Ceiling: true,
			Sim: func(c *pushsim.Config) { c.Latency = 50 * time.Millisecond }}
	case "c":
		return scenario{Name: "c", Title: "ledger failure mix", Events: cfg.Events, Script: ledgerMix}
	case "d":
		// The pacing issue's origin: 500 requests/s with one second of
		// burst, 429 + Retry-After: 1 above it, 15-25 ms per push, offered
		// 2,000 events/s.
		return scenario{Name: "d", Title: "rate-limited origin (500 req/s, Retry-After 1), 2,000 events/s offered", Events: cfg.DEvents, Offered: 2000,
			Sim: func(c *pushsim.Config) {
				c.RateLimit, c.Burst, c.RetryAfter = 500, 500, 1
				c.Latency, c.LatencyJitter = 15*time.Millisecond, 10*time.Millisecond
			}}
	case "d100":
		// The pacing issue's tighter origin: 100 requests/s, 20 ms.
		return scenario{Name: "d100", Title: "rate-limited origin (100 req/s, 20 ms), 400 events/s offered", Events: cfg.DEvents / 5, Offered: 400,
			Sim: func(c *pushsim.Config) {
				c.RateLimit, c.Burst, c.RetryAfter = 100, 100, 1
				c.Latency, c.LatencyJitter = 20*time.Millisecond, 5*time.Millisecond
			}}
	case "d3":
		// Three processors in one group sharing one 300 requests/s origin
		// through push.pacing.
		return scenario{Name: "d3", Title: "3 processors, one rate-limited origin (300 req/s, 50 ms), 1,200 events/s offered", Events: cfg.DEvents * 3 / 5, Offered: 1200, Processors: 3,
			Sim: func(c *pushsim.Config) {
				c.RateLimit, c.Burst, c.RetryAfter = 300, 300, 1
				c.Latency, c.LatencyJitter = 50*time.Millisecond, 10*time.Millisecond
			}}
	case "dx":
		// A rate-limited origin of the user's own, offered four times its
		// limit for 30 s, judged like d from 10 s.
		o := cfg.DX
		burst := "a second of burst"
		switch {
		case o.PerSecond:
			burst = "counted per whole second"
		case o.Burst > 0:
			burst = fmt.Sprintf("a burst of %d", o.Burst)
		}
		return scenario{Name: "dx", Title: fmt.Sprintf("%d processor(s), one rate-limited origin (%g req/s, %s, %s), %g events/s offered", o.Processors, o.Limit, burst, o.Latency, 4*o.Limit),
			Events: int(4 * o.Limit * 30), Offered: 4 * o.Limit, Processors: o.Processors,
			Sim: func(c *pushsim.Config) {
				c.RateLimit, c.Burst, c.PerSecond, c.RetryAfter = o.Limit, o.Burst, o.PerSecond, 1
				c.Latency, c.LatencyJitter = o.Latency, o.Latency/5
			}}
	case "f0", "f3":
		// The pacing issue's priority case: 12,000 tier-3 events produced
		// at once to one push service allowing 400 requests/s (a second of
		// burst), 20 ms per push, and 300 tier-1 events at the same
		// moment (f0) or 3 s later (f3), from a producer of their own, as
		// from a service of their own; tier 1's p99 from production to
		// delivery is judged.
		const flood, urgent = 12_000, 300
		when := "with them"
		if name == "f3" {
			when = "3 s after them"
		}
		sc := scenario{Name: name, Title: "tier 1 behind a flood: 12,000 tier-3 events to a 400 req/s origin, 300 tier-1 events " + when,
			Events: flood + urgent,
			Tier: func(i int) tiers.Tier {
				if i >= flood {
					return tiers.Tier1
				}
				return tiers.Tier3
			},
			Sim: func(c *pushsim.Config) {
				c.RateLimit, c.Burst, c.RetryAfter = 400, 0, 1 // a second of burst
				c.Latency, c.LatencyJitter = 20*time.Millisecond, 5*time.Millisecond
			}}
		sc.Later = urgent
		if name == "f3" {
			sc.After = 3 * time.Second
		}
		return sc
	case "e":
		return scenario{Name: "e", Title: fmt.Sprintf("RSS with %d events waiting in retry steps (every push answers 503)", cfg.RSSEvents),
			Events: cfg.RSSEvents, HoldRSS: true,
			Sim: func(c *pushsim.Config) { c.Fail503 = 1 }}
	}
	panic("unknown scenario " + name) // Validate lets none through
}

// originShape is scenario dx's push service and group.
type originShape struct {
	Limit      float64 // requests/s
	Latency    time.Duration
	Processors int
	// Burst is the limit's token bucket, in sends; 0 holds a second of it.
	Burst int
	// PerSecond counts the limit per whole second instead (a fixed window).
	PerSecond bool
}

// ledgerMix is the failure mix of the ledger test (pushsim.LedgerMix): the
// simulator's script for event i and whether the event is malformed.
func ledgerMix(i int) ([]pushsim.Response, bool) {
	k := pushsim.LedgerMix(i)
	return k.Script, k.Malformed
}

// tierOf spreads events like the dev workload: 20% tier1, 30% tier2, 50%
// tier3. It reads the hundreds digit, so the tier is independent of the
// ledger mix (which reads i % 100, permuted): each tier gets the same failure mix.
func tierOf(i int) tiers.Tier {
	switch r := i / 100 % 10; {
	case r < 2:
		return tiers.Tier1
	case r < 5:
		return tiers.Tier2
	}
	return tiers.Tier3
}
