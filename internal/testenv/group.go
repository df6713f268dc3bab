package testenv

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Group is a consumer group as the broker describes it, whichever
// protocol its members speak.
type Group struct {
	State    string // "Stable" once every member has its assignment
	Protocol string // "consumer" (KIP-848) or "classic"
	Members  []Member
}

// Member is one member of a Group.
type Member struct {
	ID       string
	Instance string             // group.instance.id; empty for a dynamic member
	Assigned map[string][]int32 // topic → partitions
}

// Partitions counts the partitions assigned to m.
func (m Member) Partitions() int {
	n := 0
	for _, ps := range m.Assigned {
		n += len(ps)
	}
	return n
}

// DescribeGroup describes group: as a KIP-848 consumer group
// (ConsumerGroupDescribe) when it is one, else as a classic group. A
// consumer group's assignment is named by topic IDs (kfake gives no
// names): the topics are named from the metadata.
func DescribeGroup(ctx context.Context, cl *kgo.Client, group string) (Group, error) {
	req := kmsg.NewPtrConsumerGroupDescribeRequest()
	req.Groups = []string{group}
	if resp, err := req.RequestWith(ctx, cl); err == nil && len(resp.Groups) == 1 && resp.Groups[0].ErrorCode == 0 {
		md, err := kadm.NewClient(cl).Metadata(ctx)
		if err != nil {
			return Group{}, err
		}
		names := make(map[[16]byte]string)
		for _, td := range md.Topics {
			names[td.ID] = td.Topic
		}
		rg := resp.Groups[0]
		out := Group{State: rg.State, Protocol: "consumer"}
		for _, m := range rg.Members {
			gm := Member{ID: m.MemberID, Assigned: make(map[string][]int32)}
			if m.InstanceID != nil {
				gm.Instance = *m.InstanceID
			}
			for _, tp := range m.Assignment.TopicPartitions {
				name := tp.Topic
				if n, ok := names[tp.TopicID]; ok {
					name = n
				}
				gm.Assigned[name] = append(gm.Assigned[name], tp.Partitions...)
			}
			out.Members = append(out.Members, gm)
		}
		return out, nil
	}
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return Group{}, err
	}
	g, ok := gs[group]
	if !ok {
		return Group{}, errors.New("group not described")
	}
	if g.Err != nil {
		return Group{}, g.Err
	}
	out := Group{State: g.State, Protocol: "classic"}
	for _, m := range g.Members {
		gm := Member{ID: m.MemberID, Assigned: make(map[string][]int32)}
		if m.InstanceID != nil {
			gm.Instance = *m.InstanceID
		}
		if a, ok := m.Assigned.AsConsumer(); ok {
			for _, t := range a.Topics {
				gm.Assigned[t.Topic] = append(gm.Assigned[t.Topic], t.Partitions...)
			}
		}
		out.Members = append(out.Members, gm)
	}
	return out, nil
}
