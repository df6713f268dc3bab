package consume

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/deliver"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Handler decides what one record leads to (internal/deliver). It returns
// nil when ctx ended before anything was sent.
type Handler interface {
	Handle(ctx context.Context, in deliver.In) *deliver.Delivery
}

var _ Handler = (*deliver.Handler)(nil)

// Hooks observe the consumer. They must be cheap and must not block.
type Hooks interface {
	// Skipped counts records this member did not handle because they were
	// finished before it consumed them; why says how that is known:
	// "committed" (the previous owner's commit listed them), "outcome"
	// (their event's outcome is in the ledger) or "retry" (a later step
	// of their event is on a retry topic). See resume.go.
	Skipped(why string, n int)
	// CommitFailed counts partitions whose commit failed (a request
	// error, or the partition's error code, named by reason); they are
	// committed again.
	CommitFailed(reason string, partitions int)
	// Resumed observes how long a partition taken over with records
	// waiting went unconsumed: from its previous owner's last commit to
	// this member's being ready to send them.
	Resumed(waited time.Duration)
}

// Config tunes a Consumer; see pipeline.Config for the meaning and
// defaults of each.
type Config struct {
	Group string
	// InstanceID makes the member static (group.instance.id); empty is a
	// dynamic member.
	InstanceID string
	// Protocol is ProtocolAuto (the default), ProtocolClassic or
	// ProtocolConsumer.
	Protocol string
	// SessionTimeout and HeartbeatInterval are the classic protocol's
	// session: how long the group waits for a member that stopped
	// heartbeating before it gives its partitions to others. 0 keeps
	// kgo's defaults (45 s and 3 s). KIP-848 takes them from the broker.
	SessionTimeout, HeartbeatInterval time.Duration
	Names                             topology.Names
	Policy                            tiers.Policy
	// ExtraInputs are retry topics of steps dropped from the ladder
	// (topology.Names.ParseDropped): consumed as retry topics of their
	// tier, held until due, counted in its budget; their records continue
	// on the current ladder. Any other topic is refused.
	ExtraInputs []string
	MaxInFlight int
	MaxHeld     int
	// RetryLateness: see adapt.go. 0 keeps the window at MaxInFlight.
	RetryLateness  time.Duration
	Prefetch       time.Duration
	CommitInterval time.Duration
	// DrainTimeout: how long a hand-off keeps trying a produce the broker
	// refuses, and the least it waits for the records in flight and for
	// its commit (handOff).
	DrainTimeout time.Duration
	// StuckAfter: a partition whose produce has failed this long makes
	// the consumer unready (Ready).
	StuckAfter time.Duration
	// JitterSpan is the most a retry's due time may run ahead of the
	// order of its step's partition (deliver.Config.JitterSpan).
	JitterSpan func(time.Duration) time.Duration
	// Verify checks a retry record's signature (topology.Signer); a
	// partition's new owner counts only retry records it passes as
	// evidence of what was done (resume.go). nil trusts every one.
	Verify func(*kgo.Record) error
	// ReaderOpts are the options of the client that reads, for a
	// partition taken over, what was produced since its last commit
	// (resume.go): seed brokers, TLS, SASL, dialer, without the
	// consumer client's hooks.
	ReaderOpts []kgo.Opt
	Now        func() time.Time
}
