// Package pacing decides how fast tierpush may send to each push service
// origin, and how much at once. Per origin a lane composes four parts that
// each own their state: the rate law (what the origin accepts per second,
// learnt from its 429s and shared by the group), the concurrency law (how
// many sends in flight its base round trip carries, learnt from its
// latency), a breaker (halts on a high 429 or error share) and the tiers'
// queue (who goes next). It sends nothing and knows nothing of Kafka: the
// pipeline asks for a slot and reports each result. docs/pacing.md is the
// card: the laws, the order in which the rules win, and every tunable.
package pacing

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes a Pacer. DefaultConfig holds the documented defaults.
type Config struct {
	// Enabled turns pacing on; off, every request gets a slot at once.
	Enabled bool
	// CutRate: a 429 share this far above the origin's background (the
	// share of devices throttled one by one) cuts the rate to CutFactor
	// of what the origin was seen to accept.
	CutRate   float64
	CutFactor float64
	// HaltRate: when a cut finds the 429 share above it, the origin is
	// also halted (the breaker opens) for its Retry-After, DefaultPause
	// at least, twice as long each time in a row.
	HaltRate     float64
	DefaultPause time.Duration
	// ErrorHaltRate: above this share of 5xx answers and transport
	// errors the breaker opens for OpenFor (an outage), twice as long
	// each time in a row; then Probes half-open sends decide whether it
	// closes. MinSamples answers at least are judged, and the share must
	// be above the threshold with 95% confidence.
	ErrorHaltRate float64
	OpenFor       time.Duration
	Probes        int
	MinSamples    int
	// MinLimit and MaxLimit bound the sends in flight per origin.
	MinLimit, MaxLimit int
	// Weights are the tiers' shares of slots (tier1, tier2, tier3).
	Weights [3]int
	// MaxWaiting is the pipeline's window (--max-in-flight): the records
	// in flight, and so the requests that may wait in memory. An origin
	// alone may hold it all; origins asked for within the same second
	// split the half of it a class of tiers is sure of (the window keeps
	// half for tier 1 and the lower tiers may take the other), counting
	// tier 1 and the lower tiers apart. Past its share an origin's
	// requests go to the retry ladder, so one slow origin never holds
	// the window from the others.
	MaxWaiting int
	// SubPauses bounds the LRU of subscriptions paused by a 429.
	SubPauses int
}

// DefaultConfig: a 429 share 5 points above the background cuts the rate
// to 90% of what the origin accepted; at 20% the origin also halts for
// its Retry-After (1 s at least); 50% errors open the breaker for 10 s,
// then 3 probes; judged on 10 answers at least; 1..4096 sends in flight;
// weights 6:3:1; a window of 1024 (the default --max-in-flight).
func DefaultConfig() Config {
	return Config{
		Enabled:       true,
		CutRate:       0.05,
		CutFactor:     0.90,
		HaltRate:      0.20,
		DefaultPause:  time.Second,
		ErrorHaltRate: 0.50,
		OpenFor:       10 * time.Second,
		Probes:        3,
		MinSamples:    10,
		MinLimit:      1,
		MaxLimit:      4096,
		Weights:       [3]int{6, 3, 1},
		MaxWaiting:    1024,
		SubPauses:     100_000,
	}
}

// Validate names every setting out of range by its flag.
func (c Config) Validate() error {
	var errs []error
	share := func(name string, v float64) {
		if !(v > 0 && v < 1) {
			errs = append(errs, fmt.Errorf("--%s: %g, want a share between 0 and 1", name, v))
		}
	}
	share("pacing-cut-rate", c.CutRate)
	share("pacing-cut-factor", c.CutFactor)
	share("pacing-halt-rate", c.HaltRate)
	share("pacing-error-halt-rate", c.ErrorHaltRate)
	if c.CutRate >= c.HaltRate {
		errs = append(errs, fmt.Errorf("--pacing-cut-rate: %g must be below --pacing-halt-rate %g", c.CutRate, c.HaltRate))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"pacing-default-pause", c.DefaultPause}, {"pacing-open-for", c.OpenFor}} {
		if f.d < 100*time.Millisecond {
			errs = append(errs, fmt.Errorf("--%s: %s, want at least 100ms", f.name, f.d))
		}
	}
	if c.MinLimit < 1 {
		errs = append(errs, fmt.Errorf("--pacing-min-concurrency: %d, want at least 1", c.MinLimit))
	} else if c.MaxLimit < c.MinLimit || c.MaxLimit > 100_000 {
		errs = append(errs, fmt.Errorf("--pacing-max-concurrency: %d, want %d..100000", c.MaxLimit, c.MinLimit))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"pacing-probes", c.Probes}, {"pacing-min-samples", c.MinSamples}, {"pacing-sub-pauses", c.SubPauses}, {"max-in-flight", c.MaxWaiting}} {
		if f.v < 1 {
			errs = append(errs, fmt.Errorf("--%s: %d, want at least 1", f.name, f.v))
		}
	}
	for i, w := range c.Weights {
		if w < 1 {
			errs = append(errs, fmt.Errorf("tiers.tier%d.weight: %d, want at least 1", i+1, w))
		}
	}
	return errors.Join(errs...)
}
