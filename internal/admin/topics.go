// Package admin creates and checks the topic set with kadm. It never
// deletes a topic or lowers a partition count: drift is reported, not
// repaired destructively.
package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Spec says how topics are created.
type Spec struct {
	Partitions        int32
	ReplicationFactor int16         // -1 = broker default
	Retention         time.Duration // tier, retry, gone and outcome topics
	DLQRetention      time.Duration
}

// DefaultSpec: 12 partitions, broker-default replication, 7 days of
// retention and 30 days for the DLQ.
func DefaultSpec() Spec {
	return Spec{Partitions: 12, ReplicationFactor: -1, Retention: 7 * 24 * time.Hour, DLQRetention: 30 * 24 * time.Hour}
}

// Validate names the flag at fault.
func (s Spec) Validate() error {
	var errs []error
	if s.Partitions < 1 {
		errs = append(errs, fmt.Errorf("--partitions: %d, want at least 1", s.Partitions))
	}
	if s.ReplicationFactor == 0 || s.ReplicationFactor < -1 {
		errs = append(errs, fmt.Errorf("--replication-factor: %d, want -1 (broker default) or at least 1", s.ReplicationFactor))
	}
	if s.Retention < time.Hour {
		errs = append(errs, fmt.Errorf("--retention: %s, want at least 1h", s.Retention))
	}
	if s.DLQRetention < time.Hour {
		errs = append(errs, fmt.Errorf("--dlq-retention: %s, want at least 1h", s.DLQRetention))
	}
	return errors.Join(errs...)
}

// TopicState is what Ensure found or did for one topic.
type TopicState struct {
	Topic      string
	Created    bool
	Partitions int32
	Drift      string // non-empty when the topic differs from the spec
}

// Ensure creates every missing topic of the topology and reports drift of
// existing ones. It is idempotent.
func Ensure(ctx context.Context, adm *kadm.Client, names topology.Names, p *tiers.Policy, spec Spec) ([]TopicState, error) {
	all := names.All(p)
	details, err := adm.ListTopics(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var states []TopicState
	for _, t := range all {
		cfg := configsFor(t, names, spec)
		d, ok := details[t]
		if ok && d.Err == nil {
			st := TopicState{Topic: t, Partitions: int32(len(d.Partitions))}
			if st.Partitions < spec.Partitions {
				st.Drift = fmt.Sprintf("has %d partitions, spec asks %d (add partitions with kadm/kafka-topics; keys move)", st.Partitions, spec.Partitions)
			}
			states = append(states, st)
			continue
		}
		resp, err := adm.CreateTopic(ctx, spec.Partitions, spec.ReplicationFactor, cfg, t)
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return states, fmt.Errorf("create topic %s: %w", t, err)
		}
		if resp.Err != nil && !errors.Is(resp.Err, kerr.TopicAlreadyExists) {
			return states, fmt.Errorf("create topic %s: %w", t, resp.Err)
		}
		states = append(states, TopicState{Topic: t, Created: resp.Err == nil, Partitions: spec.Partitions})
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Topic < states[j].Topic })
	return states, nil
}

func configsFor(topic string, names topology.Names, spec Spec) map[string]*string {
	ret := spec.Retention
	if topic == names.DLQ() {
		ret = spec.DLQRetention
	}
	ms := strconv.FormatInt(ret.Milliseconds(), 10)
	cfg := map[string]*string{"retention.ms": &ms}
	if topic == names.Outcomes() {
		// Keyed by event id: compaction keeps the ledger's last word per id.
		policy := "compact,delete"
		cfg["cleanup.policy"] = &policy
	}
	return cfg
}
