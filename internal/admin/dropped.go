package admin

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// DroppedStep is the retry topic of a step no longer on its tier's ladder
// that still holds records the group has not consumed.
type DroppedStep struct {
	Topic  string
	Source topology.Source // Step is -1
	// Pending counts the records after the group's committed offsets, or
	// after the start of the log where the group committed none.
	Pending int64
}

// DroppedSteps finds the retry topics of steps that p's ladders no longer
// have (an earlier configuration's, topology.Names.ParseDropped) and that
// still hold records group has not consumed. The processor consumes them
// besides its ladders, so that nothing waiting in them is lost when a step
// is dropped from the config; an emptied one is left alone (this package
// never deletes a topic). Offsets are read fresh, not from a metadata cache.
func DroppedSteps(ctx context.Context, adm *kadm.Client, names topology.Names, p *tiers.Policy, group string) ([]DroppedStep, error) {
	ctx = fresh(ctx)
	all, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	srcs := make(map[string]topology.Source)
	var topics []string
	for topic, d := range all {
		if d.Err != nil {
			continue
		}
		if src, err := names.ParseDropped(topic, p); err == nil {
			srcs[topic] = src
			topics = append(topics, topic)
		}
	}
	if len(topics) == 0 {
		return nil, nil
	}
	sort.Strings(topics)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %v: %w", topics, err)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %v: %w", topics, err)
	}
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err == nil {
		err = committed.Error()
	}
	switch {
	case errors.Is(err, kerr.GroupIDNotFound):
		// A group that never committed (Kafka answers with no offsets,
		// some brokers with this error): everything is pending.
		committed = nil
	case err != nil:
		return nil, fmt.Errorf("fetch group %s's offsets: %w", group, err)
	}
	var out []DroppedStep
	for _, topic := range topics {
		var pending int64
		ends.Each(func(e kadm.ListedOffset) {
			if e.Topic != topic {
				return
			}
			from := int64(0)
			if s, ok := starts.Lookup(topic, e.Partition); ok {
				from = s.Offset
			}
			if c, ok := committed.Lookup(topic, e.Partition); ok && c.At > from {
				from = c.At
			}
			pending += max(e.Offset-from, 0)
		})
		if pending > 0 {
			out = append(out, DroppedStep{Topic: topic, Source: srcs[topic], Pending: pending})
		}
	}
	return out, nil
}
