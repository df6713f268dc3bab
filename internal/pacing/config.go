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
	// Window is the rolling window of attempts the 429 share is taken over.
	Window time.Duration
	// CutRate: above this 429 share the limit is multiplied by CutFactor,
	// at most once per CutCooldown, judged on attempts since the last cut.
	CutRate     float64
	CutFactor   float64
	CutCooldown time.Duration
	// HaltRate: above this 429 share the breaker opens for OpenFor; then
	// up to Probes half-open requests decide whether it closes.
	HaltRate float64
	// ErrorHaltRate: above this share of 5xx answers and transport errors
	// the breaker opens too (an outage).
	ErrorHaltRate float64
	OpenFor       time.Duration
	Probes        int
	// MinSamples is how many attempts a share needs before it counts.
	MinSamples int
	// Confidence that a share is above a threshold before the pacer acts
	// on it (one-sided, Wilson score); 0.5 compares the plain share.
	Confidence float64
	// CalmRate, CalmFor, RaiseEvery, RaiseFactor: below CalmRate for
	// CalmFor, the limit grows by RaiseFactor every RaiseEvery.
	CalmRate    float64
	CalmFor     time.Duration
	RaiseEvery  time.Duration
	RaiseFactor float64
	// MaxLimit is the starting and highest concurrency per origin;
	// MinLimit the lowest.
	MaxLimit int
	MinLimit int
	// SenderWideSubs distinct subscriptions answering 429 within
	// SenderWideWindow pause the whole origin for the Retry-After.
	// SenderWideRate is the share of attempts over SenderWideWindow that
	// must be throttled too: below it 429s are taken as per-device limits
	// (APNs and FCM throttle each device) and left to the cuts.
	SenderWideSubs   int
	SenderWideWindow time.Duration
	SenderWideRate   float64
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

// DefaultConfig: 60 s window; cut by 25% above 5% 429s (at most every 5 s;
// every share is judged with 95% confidence over at least 30 attempts);
// halt above 20% 429s or 50% errors for 10 s, then 3 probes; +10% every
// 30 s after 120 s below 1%; concurrency 1..512 per origin; 5 distinct
// subscriptions throttled within 10 s, over 5% of attempts, pause the
// origin; weights 6:3:1;
// retries at most 20% of slots while first attempts wait.
func DefaultConfig() Config {
	return Config{
		Enabled:          true,
		Window:           60 * time.Second,
		CutRate:          0.05,
		CutFactor:        0.75,
		CutCooldown:      5 * time.Second,
		HaltRate:         0.20,
		ErrorHaltRate:    0.50,
		OpenFor:          10 * time.Second,
		Probes:           3,
		MinSamples:       30,
		Confidence:       0.95,
		CalmRate:         0.01,
		CalmFor:          120 * time.Second,
		RaiseEvery:       30 * time.Second,
		RaiseFactor:      1.10,
		MaxLimit:         512,
		MinLimit:         1,
		SenderWideSubs:   5,
		SenderWideWindow: 10 * time.Second,
		SenderWideRate:   0.05,
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

// zWide is the quantile the sender-wide rule judges with: it is checked at
// every 429, hundreds of times a second, and a false pause stops every
// tier of the origin, so each check gets a hundredth of the doubt
// Confidence allows (0.95 → 0.9995). 0.5 stays the plain share.
func (c Config) zWide() float64 {
	if c.Confidence <= 0.5 {
		return 0
	}
	return zOf(1 - (1-c.Confidence)/100)
}

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
	if c.RaiseFactor <= 1 || c.RaiseFactor > 4 {
		errs = append(errs, fmt.Errorf("--pacing-raise-factor: %g, want above 1 and at most 4", c.RaiseFactor))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"pacing-window", c.Window}, {"pacing-cut-cooldown", c.CutCooldown}, {"pacing-open-for", c.OpenFor},
		{"pacing-calm-for", c.CalmFor}, {"pacing-raise-every", c.RaiseEvery}, {"pacing-sender-wide-window", c.SenderWideWindow},
		{"pacing-default-pause", c.DefaultPause},
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
