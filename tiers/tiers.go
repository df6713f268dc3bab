// Package tiers owns the priority tiers and their retry ladders: which retry
// steps a tier has, how many attempts it gets and what share of dispatch
// slots it is guaranteed. It knows nothing of Kafka or HTTP; topic names are
// derived from it by package topology.
package tiers

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Tier is a priority class of notifications. The zero Tier is invalid.
type Tier uint8

// The three tiers of the public contract.
const (
	Tier1 Tier = 1 // transactional: 2FA, password reset, payment
	Tier2 Tier = 2 // promotional: campaigns
	Tier3 Tier = 3 // engagement: digests, nudges
)

// All lists every tier, highest priority first.
var All = []Tier{Tier1, Tier2, Tier3}

// String returns the tier's name as used in topic names: "tier1".
func (t Tier) String() string {
	if t < Tier1 || t > Tier3 {
		return fmt.Sprintf("tier(%d)", uint8(t))
	}
	return tierNames[t-Tier1] // a constant: this runs a few times per record
}

var tierNames = [...]string{"tier1", "tier2", "tier3"}

// Valid reports whether t is one of the contract's tiers.
func (t Tier) Valid() bool { return t >= Tier1 && t <= Tier3 }

// Index is t's position in All, for per-tier arrays; a tier outside the
// contract counts as the lowest.
func (t Tier) Index() int {
	if t.Valid() {
		return int(t) - 1
	}
	return len(All) - 1
}

// Parse reads "tier1", "tier2" or "tier3".
func Parse(s string) (Tier, error) {
	for _, t := range All {
		if s == t.String() {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown tier %q (want tier1, tier2 or tier3)", s)
}

// Ladder is the sequence of fixed retry delays of one tier. The last step
// repeats until MaxAttempts is spent.
type Ladder struct {
	// Steps are the retry delays in order; each names a retry topic.
	Steps []time.Duration `yaml:"steps" json:"steps"`
	// MaxAttempts counts every send, the first included.
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// Weight is the tier's share of dispatch slots relative to the others.
	Weight int `yaml:"weight" json:"weight"`
}

// StepName is the topic suffix of a retry delay. Delays up to a minute are
// named in seconds ("retry-2s", "retry-60s"); longer ones in Go duration form
// without zero units ("retry-1m30s", "retry-5m", "retry-1h").
func StepName(d time.Duration) string {
	if d <= time.Minute && d%time.Second == 0 {
		return fmt.Sprintf("retry-%ds", d/time.Second)
	}
	s := d.String()
	s = strings.TrimSuffix(s, "m0s")
	if strings.HasSuffix(d.String(), "m0s") {
		s += "m"
	}
	s = strings.TrimSuffix(s, "h0m")
	if strings.HasSuffix(d.String(), "h0m0s") {
		s += "h"
	}
	return "retry-" + s
}

// StepFor returns the index of the step that follows attempt number attempt
// (1-based: after the first failed send, attempt is 1 and the step is 0).
// Attempts beyond the ladder stay on its last step.
func (l Ladder) StepFor(attempt int) int {
	i := attempt - 1
	if i < 0 {
		i = 0
	}
	if i >= len(l.Steps) {
		i = len(l.Steps) - 1
	}
	return i
}

// StepAtLeast returns the smallest step index whose delay is at least d, and
// false when d exceeds the last step.
func (l Ladder) StepAtLeast(d time.Duration) (int, bool) {
	for i, s := range l.Steps {
		if s >= d {
			return i, true
		}
	}
	return len(l.Steps) - 1, false
}

// Last is the longest, final step of the ladder.
func (l Ladder) Last() time.Duration { return l.Steps[len(l.Steps)-1] }

// Policy is the ladder of every tier.
type Policy struct {
	Tier1 Ladder `yaml:"tier1" json:"tier1"`
	Tier2 Ladder `yaml:"tier2" json:"tier2"`
	Tier3 Ladder `yaml:"tier3" json:"tier3"`
}

// DefaultPolicy is the contract's policy: tier1 and tier2 retry after 2s, 8s
// and 60s with 5 attempts; tier3 after 8s and 60s with 4 attempts; dispatch
// weights 6:3:1.
func DefaultPolicy() Policy {
	return Policy{
		Tier1: Ladder{Steps: []time.Duration{2 * time.Second, 8 * time.Second, time.Minute}, MaxAttempts: 5, Weight: 6},
		Tier2: Ladder{Steps: []time.Duration{2 * time.Second, 8 * time.Second, time.Minute}, MaxAttempts: 5, Weight: 3},
		Tier3: Ladder{Steps: []time.Duration{8 * time.Second, time.Minute}, MaxAttempts: 4, Weight: 1},
	}
}

// Ladder returns the ladder of t.
func (p *Policy) Ladder(t Tier) *Ladder {
	switch t {
	case Tier1:
		return &p.Tier1
	case Tier2:
		return &p.Tier2
	case Tier3:
		return &p.Tier3
	}
	return nil
}

// Limits of a configured ladder (the --config file's tiers:).
const (
	MinStep        = time.Second
	MaxStep        = 24 * time.Hour
	MaxSteps       = 10
	MaxMaxAttempts = 20
	MaxWeight      = 1000
)

// Validate reports every field out of range, each naming its key in the
// --config file: tiers.tier2.steps[1]. Steps are whole seconds from 1s to
// 24h, strictly ascending, at most 10 of them; max_attempts 1 to 20; weight
// 1 to 1000 (a share relative to the other tiers: more would only risk
// overflowing the round robin's sums).
func (p Policy) Validate() error {
	var errs []error
	for _, t := range All {
		errs = append(errs, p.Ladder(t).Validate("tiers."+t.String()))
	}
	return errors.Join(errs...)
}

// FieldError is a field of a ladder out of range; Policy.Validate and
// Ladder.Validate join them.
type FieldError struct {
	Key   string // the field's key in the --config file: tiers.tier2.steps[1]
	Field string // steps, max_attempts or weight
	Index int    // the step at fault; -1 for the field as a whole
	msg   string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.msg }

// Validate reports every field of l out of range (Policy.Validate), as
// *FieldError; key is the ladder's key in the --config file (tiers.tier2).
func (l Ladder) Validate(key string) error {
	var errs []error
	add := func(field string, index int, format string, args ...any) {
		k := key + "." + field
		if index >= 0 {
			k += "[" + strconv.Itoa(index) + "]"
		}
		errs = append(errs, &FieldError{Key: k, Field: field, Index: index, msg: fmt.Sprintf(format, args...)})
	}
	switch {
	case len(l.Steps) == 0:
		add("steps", -1, "empty, want 1 to %d retry delays like [2s, 8s, 60s]", MaxSteps)
	case len(l.Steps) > MaxSteps:
		add("steps", -1, "%d steps, want at most %d", len(l.Steps), MaxSteps)
	}
	for i, s := range l.Steps {
		switch {
		case s < MinStep:
			add("steps", i, "%s, want at least %s", s, MinStep)
		case s > MaxStep:
			add("steps", i, "%s, want at most 24h", s)
		case s%time.Second != 0:
			add("steps", i, "%s, want whole seconds (the step names its topic)", s)
		case i > 0 && s <= l.Steps[i-1]:
			add("steps", i, "%s, want longer than steps[%d] (%s): steps ascend", s, i-1, l.Steps[i-1])
		}
	}
	if l.MaxAttempts < 1 || l.MaxAttempts > MaxMaxAttempts {
		add("max_attempts", -1, "%d, want 1..%d (the first send included)", l.MaxAttempts, MaxMaxAttempts)
	}
	if l.Weight < 1 || l.Weight > MaxWeight {
		add("weight", -1, "%d, want 1..%d", l.Weight, MaxWeight)
	}
	return errors.Join(errs...)
}
