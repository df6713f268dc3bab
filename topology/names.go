// Package topology owns everything about where a record goes: topic names,
// the header codec of the records the processor writes, their signature, and
// the routing decision after a send, as a pure function of record, result,
// policy and clock. It performs no I/O.
package topology

import (
	"fmt"
	"strings"
	"time"

	"github.com/tierpush/tierpush/tiers"
)

// DefaultPrefix is the topic prefix of the public contract.
const DefaultPrefix = "push."

// Names derives topic names from a prefix.
type Names struct {
	Prefix string
}

// Tier is the topic upstream services produce events of tier t to.
func (n Names) Tier(t tiers.Tier) string { return n.Prefix + t.String() }

// Retry is the retry topic of tier t for a step delay.
func (n Names) Retry(t tiers.Tier, delay time.Duration) string {
	return n.Tier(t) + "." + tiers.StepName(delay)
}

// DLQ is the dead-letter topic.
func (n Names) DLQ() string { return n.Prefix + "dlq" }

// Gone is the topic of unsubscribe events for 404/410 endpoints.
func (n Names) Gone() string { return n.Prefix + "gone" }

// Outcomes is the ledger topic: one terminal record per event id.
func (n Names) Outcomes() string { return n.Prefix + "outcomes" }

// Source tells what a consumed topic is.
type Source struct {
	Tier  tiers.Tier
	Retry bool          // a retry step topic
	Step  int           // index in the tier's ladder when Retry; -1 for a dropped step
	Delay time.Duration // the step's delay when Retry
}

// Dropped reports whether s is the retry topic of a step no longer on its
// tier's ladder: consumed until empty, its records continuing on the
// current ladder (docs/design.md, "Topics").
func (s Source) Dropped() bool { return s.Retry && s.Step < 0 }

// Inputs lists the topics the processor consumes: every tier topic and every
// retry step of every tier.
func (n Names) Inputs(p *tiers.Policy) []string {
	var ts []string
	for _, t := range tiers.All {
		ts = append(ts, n.Tier(t))
		for _, d := range p.Ladder(t).Steps {
			ts = append(ts, n.Retry(t, d))
		}
	}
	return ts
}

// Outputs lists the topics the processor only produces to.
func (n Names) Outputs() []string { return []string{n.DLQ(), n.Gone(), n.Outcomes()} }

// Pacing is the compacted topic, keyed by push service origin, through
// which processors share their pacing (internal/share).
func (n Names) Pacing() string { return n.Prefix + "pacing" }

// Members is the topic on which the processors of a group beat, keyed
// by group, so that a killed one is removed from the group within seconds
// (internal/members).
func (n Names) Members() string { return n.Prefix + "members" }

// All lists every topic of the topology.
func (n Names) All(p *tiers.Policy) []string {
	return append(append(n.Inputs(p), n.Outputs()...), n.Pacing(), n.Members())
}

// Parse maps a consumed topic back to its tier and step.
func (n Names) Parse(topic string, p *tiers.Policy) (Source, error) {
	rest, ok := strings.CutPrefix(topic, n.Prefix)
	if !ok {
		return Source{}, fmt.Errorf("topic %q lacks prefix %q", topic, n.Prefix)
	}
	name, step, isRetry := strings.Cut(rest, ".")
	t, err := tiers.Parse(name)
	if err != nil {
		return Source{}, fmt.Errorf("topic %q: %w", topic, err)
	}
	if !isRetry {
		return Source{Tier: t}, nil
	}
	for i, d := range p.Ladder(t).Steps {
		if tiers.StepName(d) == step {
			return Source{Tier: t, Retry: true, Step: i, Delay: d}, nil
		}
	}
	return Source{}, fmt.Errorf("topic %q is not a step of the %s ladder", topic, t)
}

// ParseDropped maps the retry topic of a step that p's ladder no longer has
// (an earlier configuration's) to its tier and delay, with Step -1. It
// refuses a topic that is on p's ladder, that is no retry topic, or whose
// step name is not the canonical name of a whole-second delay
// (tiers.StepName): only topics a processor could have created.
func (n Names) ParseDropped(topic string, p *tiers.Policy) (Source, error) {
	rest, ok := strings.CutPrefix(topic, n.Prefix)
	if !ok {
		return Source{}, fmt.Errorf("topic %q lacks prefix %q", topic, n.Prefix)
	}
	name, step, _ := strings.Cut(rest, ".")
	t, err := tiers.Parse(name)
	if err != nil {
		return Source{}, fmt.Errorf("topic %q: %w", topic, err)
	}
	d, err := time.ParseDuration(strings.TrimPrefix(step, "retry-"))
	if err != nil || !strings.HasPrefix(step, "retry-") || d < time.Second || d%time.Second != 0 || tiers.StepName(d) != step {
		return Source{}, fmt.Errorf("topic %q is not a retry step topic", topic)
	}
	for _, s := range p.Ladder(t).Steps {
		if s == d {
			return Source{}, fmt.Errorf("topic %q is a step of the %s ladder", topic, t)
		}
	}
	return Source{Tier: t, Retry: true, Step: -1, Delay: d}, nil
}
