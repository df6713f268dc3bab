// Package pacing decides how fast tierpush may send to each push service.
// Per origin it keeps an adaptive concurrency limit driven by the rolling
// share of 429 answers, a circuit breaker that halts the origin when the
// share is high, sender-wide and per-subscription pauses from Retry-After,
// and a weighted, work-conserving share of slots per tier with a budget for
// retries. It sends nothing and knows nothing of Kafka: the pipeline asks
// for a slot and reports each result.
package pacing

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Config tunes a Pacer. DefaultConfig holds the documented defaults.
type Config struct {
	// Enabled turns pacing on; off, every request gets a slot at once.
	Enabled bool
	// Window is the rolling window the reported 429 share is taken over.
	Window time.Duration
	// StartRate is the send rate a new origin starts at; it doubles every
	// round trip while sends wait for it and nothing is throttled (slow
	// start). Tier 1 is not held to it.
	StartRate float64
	// CutRate: a 429 share of the sends made since the last change above
	// the origin's background share plus CutRate cuts the rate to
	// CutFactor of what the origin accepted over the last second. Judged
	// on at least MinSamples answers, at most once per CutCooldown.
	CutRate     float64
	CutFactor   float64
	CutCooldown time.Duration
	// HaltRate: above this 429 share the origin is also paused (halted)
	// for its Retry-After, DefaultPause at least.
	HaltRate float64
	// ErrorHaltRate: above this share of 5xx answers and transport errors
	// the breaker opens for OpenFor (an outage); then up to Probes
	// half-open requests decide whether it closes.
	ErrorHaltRate float64
	OpenFor       time.Duration
	Probes        int
	// MinSamples is how many answers a share needs before it counts.
	MinSamples int
	// Confidence that the error share is above ErrorHaltRate before the
	// breaker opens (one-sided, Wilson score); 0.5 compares the plain share.
	Confidence float64
	// ProbeRate is how fast the rate grows, per second, once a cut has
	// been answered; the growth doubles every ProbeDouble without a cut,
	// up to ProbeMax per second.
	ProbeRate   float64
	ProbeDouble time.Duration
	ProbeMax    float64
	// Deprecated, read and ignored (the rate controller replaced the
	// concurrency raise): CalmRate, CalmFor, RaiseEvery, RaiseFactor,
	// SenderWideSubs, SenderWideWindow, SenderWideRate.
	CalmRate         float64
	CalmFor          time.Duration
	RaiseEvery       time.Duration
	RaiseFactor      float64
	SenderWideSubs   int
	SenderWideWindow time.Duration
	SenderWideRate   float64
	// MaxLimit is the highest concurrency per origin, MinLimit the lowest;
	// between them the limit follows the rate (Little's law: the rate
	// times twice the latency).
	MaxLimit int
	MinLimit int
	// DefaultPause is the pause after a 429 without Retry-After.
	DefaultPause time.Duration
	// SubPauses bounds the LRU of paused subscriptions.
	SubPauses int
	// Weights are the tiers' shares of slots (tier1, tier2, tier3).
	Weights [3]int
	// RetryShare is the most of an origin's slots retries may hold while
	// first attempts wait.
	RetryShare float64
	// QueueLimit bounds the requests waiting for one origin that has
	// throttled the sender, or whose oldest waiter has waited ShedAfter;
	// past it the lowest tier waiting is deferred to the retry ladder.
	QueueLimit int
	ShedAfter  time.Duration
}

// DefaultConfig: a new origin starts at 20 sends/s and doubles every round
// trip; a 429 share 5 points above the origin's background (on at least 10
// answers) cuts the rate to 90% of what the origin accepted over the last
// second, above 20% it also pauses the origin for its Retry-After (1 s at
// least); the rate then grows 5% a second, doubling every 2 s up to 50%;
// above 50% errors the breaker opens for 10 s, then 3 probes; concurrency
// 1..4096 per origin; weights 6:3:1; retries at most 20% of slots while
// first attempts wait.
func DefaultConfig() Config {
	return Config{
		Enabled:          true,
		Window:           60 * time.Second,
		StartRate:        20,
		CutRate:          0.05,
		CutFactor:        0.90,
		CutCooldown:      500 * time.Millisecond,
		HaltRate:         0.20,
		ErrorHaltRate:    0.50,
		OpenFor:          10 * time.Second,
		Probes:           3,
		MinSamples:       10,
		Confidence:       0.95,
		ProbeRate:        0.05,
		ProbeDouble:      2 * time.Second,
		ProbeMax:         0.50,
		CalmRate:         0.01,
		CalmFor:          120 * time.Second,
		RaiseEvery:       30 * time.Second,
		RaiseFactor:      1.10,
		SenderWideSubs:   5,
		SenderWideWindow: 10 * time.Second,
		SenderWideRate:   0.05,
		MaxLimit:         4096,
		MinLimit:         1,
		DefaultPause:     time.Second,
		SubPauses:        100_000,
		Weights:          [3]int{6, 3, 1},
		RetryShare:       0.20,
		QueueLimit:       256,
		ShedAfter:        time.Second,
	}
}

// z is the one-sided normal quantile of Confidence.
func (c Config) z() float64 { return zOf(c.Confidence) }

func zOf(confidence float64) float64 { return math.Sqrt2 * math.Erfinv(2*confidence-1) }

// Validate names the first setting out of range by its flag.
func (c Config) Validate() error {
	var errs []error
	rate := func(name string, v float64) {
		if v <= 0 || v >= 1 {
			errs = append(errs, fmt.Errorf("--%s: %g, want a share between 0 and 1", name, v))
		}
	}
	rate("pacing-cut-rate", c.CutRate)
	rate("pacing-halt-rate", c.HaltRate)
	rate("pacing-error-halt-rate", c.ErrorHaltRate)
	rate("pacing-cut-factor", c.CutFactor)
	rate("pacing-calm-rate", c.CalmRate)
	rate("pacing-retry-share", c.RetryShare)
	rate("pacing-sender-wide-rate", c.SenderWideRate)
	if c.CutRate >= c.HaltRate {
		errs = append(errs, fmt.Errorf("--pacing-cut-rate: %g must be below --pacing-halt-rate %g", c.CutRate, c.HaltRate))
	}
	if c.StartRate < 1 || c.StartRate > 1e6 {
		errs = append(errs, fmt.Errorf("--pacing-start-rate: %g, want 1..1000000 sends per second", c.StartRate))
	}
	if c.ProbeRate <= 0 || c.ProbeRate > 1 {
		errs = append(errs, fmt.Errorf("--pacing-probe-rate: %g, want above 0 and at most 1 (a share per second)", c.ProbeRate))
	}
	if c.ProbeMax < c.ProbeRate || c.ProbeMax > 4 {
		errs = append(errs, fmt.Errorf("--pacing-probe-max: %g, want %g..4 (a share per second)", c.ProbeMax, c.ProbeRate))
	}
	if c.RaiseFactor <= 1 || c.RaiseFactor > 4 {
		errs = append(errs, fmt.Errorf("--pacing-raise-factor: %g, want above 1 and at most 4", c.RaiseFactor))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"pacing-window", c.Window}, {"pacing-cut-cooldown", c.CutCooldown}, {"pacing-open-for", c.OpenFor},
		{"pacing-calm-for", c.CalmFor}, {"pacing-raise-every", c.RaiseEvery}, {"pacing-sender-wide-window", c.SenderWideWindow},
		{"pacing-default-pause", c.DefaultPause}, {"pacing-probe-double", c.ProbeDouble},
	} {
		if f.d < 100*time.Millisecond {
			errs = append(errs, fmt.Errorf("--%s: %s, want at least 100ms", f.name, f.d))
		}
	}
	if c.MinLimit < 1 {
		errs = append(errs, fmt.Errorf("--pacing-min-concurrency: %d, want at least 1", c.MinLimit))
	} else if c.MaxLimit < c.MinLimit || c.MaxLimit > 100_000 {
		errs = append(errs, fmt.Errorf("--pacing-max-concurrency: %d, want %d..100000", c.MaxLimit, max(c.MinLimit, 1)))
	}
	if c.Probes < 1 {
		errs = append(errs, fmt.Errorf("--pacing-probes: %d, want at least 1", c.Probes))
	}
	if c.Confidence < 0.5 || c.Confidence >= 1 {
		errs = append(errs, fmt.Errorf("--pacing-confidence: %g, want at least 0.5 and below 1", c.Confidence))
	}
	if c.MinSamples < 1 {
		errs = append(errs, fmt.Errorf("--pacing-min-samples: %d, want at least 1", c.MinSamples))
	}
	if c.SenderWideSubs < 1 {
		errs = append(errs, fmt.Errorf("--pacing-sender-wide-subs: %d, want at least 1", c.SenderWideSubs))
	}
	if c.ShedAfter < 0 {
		errs = append(errs, fmt.Errorf("--pacing-shed-after: %s, want 0 or more", c.ShedAfter))
	}
	if c.QueueLimit < 1 {
		errs = append(errs, fmt.Errorf("--pacing-queue: %d, want at least 1", c.QueueLimit))
	}
	if c.SubPauses < 1 {
		errs = append(errs, fmt.Errorf("--pacing-sub-pauses: %d, want at least 1", c.SubPauses))
	}
	for i, w := range c.Weights {
		if w < 1 {
			errs = append(errs, fmt.Errorf("tiers.tier%d.weight: %d, want at least 1", i+1, w))
		}
	}
	return errors.Join(errs...)
}
