// Package members lets the processors of a group hear each other beat, and
// removes from the group a member that has stopped, long before the
// broker's session would.
//
// A processor killed (SIGKILL, OOM, a node lost) leaves nothing behind but
// its membership: the broker keeps its partitions, and on the classic
// protocol holds every rebalance, until its session ends; killed while a
// rebalance waits for it, it is even given partitions again and kept for a
// second session. Every processor produces a beat to the members topic every
// Every, keyed by group so that the group's beats share one partition; a
// member whose beats stop while this processor's own keep coming back is
// removed after After: LeaveGroup naming its member id on the classic
// protocol (what Kafka's "remove members" does for static members), a
// leaving ConsumerGroupHeartbeat for it under KIP-848. A member that was
// only slow is fenced, rejoins and loses its partitions, as after a
// session timeout. A static member is never removed: it asked the group to
// hold its place until its session ends.
package members

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The group protocols a beat names.
const (
	Classic  = "classic"
	Consumer = "consumer"
)

// Self tells the member this processor is in the group now ("" before it
// has joined) and the protocol it joined with (Classic or Consumer).
type Self func() (member, protocol string)

// Config says where beats go and when a member is silent.
type Config struct {
	// Topic carries the beats; Group is the consumer group they are of.
	Topic, Group string
	// From names this process; it must differ between processes, also
	// between a process and its restart (host, pid and a random part).
	From string
	// Every is the beat period. Default 500 ms.
	Every time.Duration
	// After is how long a member's beats stop, while this processor's
	// come back, before it is removed from the group. 0 never removes.
	After time.Duration
	// Static says this processor is a static member (group.instance.id):
	// it asked the group to hold its place until its session ends, so the
	// others never remove it.
	Static bool
	// Removed, if set, is told of each member removed, by its protocol.
	Removed func(protocol string)
}

// beat is one processor's word that it is alive, as JSON.
type beat struct {
	From     string `json:"from"`
	Group    string `json:"group"`
	Member   string `json:"member,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	At       int64  `json:"at_ms"`
	Static   bool   `json:"static,omitempty"` // never removed: its session holds its place
	Left     bool   `json:"left,omitempty"`   // the processor stopped cleanly
}

// Watch beats for this processor and removes the silent members.
type Watch struct {
	cfg     Config
	log     *slog.Logger
	self    Self
	cl      *kgo.Client
	roster  *roster // the poll loop's
	removed atomic.Int64
}

// New returns a Watch whose client is made of kopts (seed brokers, TLS,
// SASL) and reads the topic from its end: only beats from now on count.
func New(cfg Config, log *slog.Logger, self Self, kopts []kgo.Opt) (*Watch, error) {
	if cfg.Topic == "" || cfg.Group == "" || cfg.From == "" {
		return nil, errors.New("members: topic, group and from are required")
	}
	if cfg.Every <= 0 {
		cfg.Every = 500 * time.Millisecond
	}
	opts := append(kopts[:len(kopts):len(kopts)],
		kgo.ConsumeTopics(cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(cfg.Every),
		kgo.ProducerLinger(0),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("members: client: %w", err)
	}
	return &Watch{cfg: cfg, log: log, self: self, cl: cl, roster: newRoster(cfg.Group, cfg.From, cfg.Every, cfg.After)}, nil
}

// Removed counts the members this processor removed from the group.
func (w *Watch) Removed() int64 { return w.removed.Load() }

// Run beats every Every and reads the group's beats until ctx ends; then
// it says this processor left, so that nobody removes it, and closes the
// client.
func (w *Watch) Run(ctx context.Context) {
	defer w.cl.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(w.cfg.Every)
		defer t.Stop()
		for {
			w.beat(ctx, false)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	for {
		fs := w.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachError(func(topic string, p int32, err error) {
			w.log.Warn("member beats: fetch", "topic", topic, "partition", p, "err", err)
		})
		fs.EachRecord(func(rec *kgo.Record) {
			var b beat
			if json.Unmarshal(rec.Value, &b) == nil {
				w.roster.read(b)
			}
		})
		if w.cfg.After > 0 {
			for id, p := range w.roster.silent() {
				w.remove(ctx, id, p)
			}
		}
	}
	<-done
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	w.beat(lctx, true)
}

// beat produces this processor's beat; with left, it waits for it.
func (w *Watch) beat(ctx context.Context, left bool) {
	member, protocol := w.self()
	v, err := json.Marshal(beat{From: w.cfg.From, Group: w.cfg.Group, Member: member, Protocol: protocol, At: time.Now().UnixMilli(), Static: w.cfg.Static, Left: left})
	if err != nil {
		return
	}
	rec := &kgo.Record{Topic: w.cfg.Topic, Key: []byte(w.cfg.Group), Value: v}
	done := make(chan struct{})
	w.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		if err != nil && (left || ctx.Err() == nil) {
			w.log.Warn("member beats: produce", "left", left, "err", err)
		}
		close(done)
	})
	if left { // until it is out or ctx ends: Close fails it then
		select {
		case <-done:
		case <-ctx.Done():
		}
	}
}

// remove takes member id out of the group.
func (w *Watch) remove(ctx context.Context, id string, p peer) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	reason := fmt.Sprintf("tierpush: no beat on %s for %s", w.cfg.Topic, w.cfg.After)
	var code int16
	var err error
	switch p.protocol {
	case Classic:
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Group, req.MemberID = w.cfg.Group, id // MemberID: before v3
		m := kmsg.NewLeaveGroupRequestMember()
		m.MemberID, m.Reason = id, &reason
		req.Members = append(req.Members, m)
		var resp *kmsg.LeaveGroupResponse
		if resp, err = req.RequestWith(rctx, w.cl); err == nil {
			code = resp.ErrorCode
			for _, m := range resp.Members {
				if code == 0 {
					code = m.ErrorCode
				}
			}
		}
	case Consumer:
		req := kmsg.NewPtrConsumerGroupHeartbeatRequest()
		req.Group, req.MemberID, req.MemberEpoch = w.cfg.Group, id, -1 // -1: leaves
		var resp *kmsg.ConsumerGroupHeartbeatResponse
		if resp, err = req.RequestWith(rctx, w.cl); err == nil {
			code = resp.ErrorCode
		}
	default:
		return
	}
	if err == nil {
		err = kerr.ErrorForCode(code)
	}
	switch {
	case err == nil:
		w.removed.Add(1)
		if w.cfg.Removed != nil {
			w.cfg.Removed(p.protocol)
		}
		w.log.Warn("removed a silent member from the group", "member", id, "from", p.from, "protocol", p.protocol, "silent_for", w.cfg.After)
	case errors.Is(err, kerr.UnknownMemberID):
		w.log.Info("a silent member had already left the group", "member", id, "from", p.from)
	default:
		w.log.Warn("could not remove a silent member from the group", "member", id, "from", p.from, "err", err)
	}
}
