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
	"strings"
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
	// ReplicationFactor is the replica count the broker reports for an
	// existing topic, or the one asked for a created topic (-1 when that was
	// the broker default).
	ReplicationFactor int16
	Drift             string // non-empty when the topic differs from the spec
}

// Ensure creates every missing topic of the topology and reports drift of
// existing ones: fewer partitions than the spec asks, or fewer replicas when
// the spec names a replication factor. It never deletes, shrinks or
// reconfigures an existing topic. It is idempotent.
func Ensure(ctx context.Context, adm *kadm.Client, names topology.Names, p *tiers.Policy, spec Spec) ([]TopicState, error) {
	ctx = fresh(ctx)
	all := names.All(p)
	details, err := adm.ListTopics(ctx, all...)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var states []TopicState
	for _, t := range all {
		if d, ok := details[t]; ok && d.Err == nil {
			states = append(states, existing(d, spec))
			continue
		}
		st, err := create(ctx, adm, t, spec, configsFor(t, names, spec))
		if err != nil {
			return states, err
		}
		states = append(states, st)
	}
	sort.Slice(states, func(i, j int) bool { return states[i].Topic < states[j].Topic })
	return states, nil
}

// fresh makes kadm answer ListTopics with a new metadata request. Without it
// kadm answers from the client's metadata cache (kgo.MetadataMinAge, 5s by
// default), which still says "unknown topic" for a topic created moments
// ago: a second Ensure on the same client, or the re-list after losing a
// create race, would see stale metadata. Asking for authorized operations is
// what bypasses the cache; the operations themselves are unused.
func fresh(ctx context.Context) context.Context { return kadm.WithAuthorizedOps(ctx) }

// create creates topic t. When another client created it first (several
// replicas starting at once), it reports the topic as it exists.
func create(ctx context.Context, adm *kadm.Client, t string, spec Spec, cfg map[string]*string) (TopicState, error) {
	resp, err := adm.CreateTopic(ctx, spec.Partitions, spec.ReplicationFactor, cfg, t)
	if err == nil {
		err = resp.Err
	}
	switch {
	case err == nil:
		return TopicState{Topic: t, Created: true, Partitions: spec.Partitions, ReplicationFactor: spec.ReplicationFactor}, nil
	case errors.Is(err, kerr.TopicAlreadyExists):
		details, err := adm.ListTopics(ctx, t)
		if err != nil {
			return TopicState{}, fmt.Errorf("list topic %s: %w", t, err)
		}
		d := details[t]
		if d.Err != nil {
			return TopicState{}, fmt.Errorf("describe topic %s: %w", t, d.Err)
		}
		return existing(d, spec), nil
	default:
		return TopicState{}, fmt.Errorf("create topic %s: %w", t, err)
	}
}

// existing compares a topic the broker already has with the spec.
func existing(d kadm.TopicDetail, spec Spec) TopicState {
	st := TopicState{
		Topic:             d.Topic,
		Partitions:        int32(len(d.Partitions)),
		ReplicationFactor: int16(d.Partitions.NumReplicas()),
	}
	var drift []string
	if st.Partitions < spec.Partitions {
		drift = append(drift, fmt.Sprintf("has %d partitions, spec asks %d (add partitions with kadm/kafka-topics; keys move)", st.Partitions, spec.Partitions))
	}
	if spec.ReplicationFactor > 0 && st.ReplicationFactor < spec.ReplicationFactor {
		drift = append(drift, fmt.Sprintf("has %d replicas, spec asks %d (reassign partitions with kafka-reassign-partitions)", st.ReplicationFactor, spec.ReplicationFactor))
	}
	st.Drift = strings.Join(drift, "; ")
	return st
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
	if topic == names.Pacing() {
		// Keyed by origin; a processor reads the last minute of it when
		// it starts, so an hour is plenty.
		policy, hour := "compact,delete", strconv.FormatInt(time.Hour.Milliseconds(), 10)
		cfg["cleanup.policy"], cfg["retention.ms"] = &policy, &hour
	}
	if topic == names.Members() {
		// Beats are read from the end only: ten minutes is plenty.
		ten := strconv.FormatInt((10 * time.Minute).Milliseconds(), 10)
		cfg["retention.ms"] = &ten
	}
	return cfg
}
