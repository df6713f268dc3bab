// Package deliver decides what one consumed record leads to: it verifies a
// retry record's signature, decodes the event, admits it (a VAPID identity
// for its app, Retry-After hop, tombstone, TTL, the pacer), sends it,
// decides where the result goes
// (topology.Decide) and builds the records to produce. Handle is that chain
// of short steps, one record at a time, and returns the records with a
// report; hooks, stats and spans fire from the report only once the
// consumer has every record acknowledged (Delivery.Acked).
//
// It must not produce, commit, start goroutines or import a tracing
// library: producing and checkpointing are internal/consume's, spans are
// telemetry's (through Tracer).
package deliver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Config tunes a Handler. Zero fields take the documented defaults.
type Config struct {
	Names  topology.Names
	Policy tiers.Policy
	Rules  event.Rules
	// Jitter is the share of a step's delay added at random to a retry's
	// due time, so failures that happen together do not come back
	// together; at most MaxJitter.
	Jitter    float64
	MaxJitter time.Duration
	// SigLifetime is how long after its due time a signed retry record is
	// still accepted.
	SigLifetime time.Duration
	// TombstoneSize and TombstoneTTL bound the LRU of endpoints answered
	// 404/410.
	TombstoneSize int
	TombstoneTTL  time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// JitterSpan is the most jitter adds to a due time on a step of delay d.
func (c *Config) JitterSpan(d time.Duration) time.Duration {
	return max(min(time.Duration(float64(d)*c.Jitter), c.MaxJitter), 0)
}

// Pacer hands out send slots per push service (internal/pacing).
type Pacer interface {
	Acquire(ctx context.Context, req pacing.Request) (*pacing.Slot, time.Time)
}

var _ Pacer = (*pacing.Pacer)(nil)

// Handler handles one record at a time; it is safe for concurrent use.
type Handler struct {
	cfg        Config
	log        *slog.Logger
	sender     dispatch.Sender
	signer     *topology.Signer
	pacer      Pacer
	hooks      Hooks
	tracer     Tracer
	tombstones *lru.Cache[string, time.Time]
	// The topics of every event's end, named once: Names builds each
	// name per call.
	outcomes, dlq, gone string
}

// Option sets an optional dependency of a Handler.
type Option func(*Handler)

// WithHooks observes every handled record once its outputs are acknowledged.
func WithHooks(h Hooks) Option { return func(x *Handler) { x.hooks = h } }

// WithTracer follows every record in a trace.
func WithTracer(t Tracer) Option { return func(x *Handler) { x.tracer = t } }

// New returns a Handler. sender, signer and pacer are required.
func New(cfg Config, log *slog.Logger, sender dispatch.Sender, signer *topology.Signer, pacer Pacer, opts ...Option) (*Handler, error) {
	if sender == nil || signer == nil || pacer == nil {
		return nil, errors.New("deliver: sender, signer and pacer are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	tomb, err := lru.New[string, time.Time](max(cfg.TombstoneSize, 1))
	if err != nil {
		return nil, fmt.Errorf("tombstone cache: %w", err)
	}
	h := &Handler{cfg: cfg, log: log, sender: sender, signer: signer, pacer: pacer,
		hooks: NopHooks{}, tracer: nopTracer{}, tombstones: tomb,
		outcomes: cfg.Names.Outcomes(), dlq: cfg.Names.DLQ(), gone: cfg.Names.Gone()}
	for _, o := range opts {
		o(h)
	}
	return h, nil
}

// In is one consumed record and what the consumer knows of it.
type In struct {
	Record   *kgo.Record
	Source   topology.Source
	Received time.Time // when the poll returned it
	Due      time.Time // retry records: when it may be sent
}

// job is one record on its way through the chain, and the room for what
// it leads to: the Delivery, its FinishInfo and up to two records are
// allocated with it, not one by one (BenchmarkHandle).
type job struct {
	in   In
	now  time.Time
	meta topology.Meta
	ev   *event.Event
	dec  topology.Input
	slot *pacing.Slot // granted by admit: send now
	res  push.Result
	rep  *Report // &del.Report: written in place, not copied at the end

	del    Delivery
	finish FinishInfo
	out    [2]*kgo.Record
}

// Handle decides what in leads to. It returns nil when ctx ended before
// anything was sent: the record stays unfinished and its partition's next
// owner handles it. Whatever else cannot be sent goes to the DLQ.
func (h *Handler) Handle(ctx context.Context, in In) *Delivery {
	ctx = h.tracer.Start(ctx, in.Record)
	// The record's context without its cancellation, made once for the
	// send and the records produced (Delivery.Context).
	detached := context.WithoutCancel(ctx)
	j := &job{in: in, now: h.cfg.Now()}
	j.rep = &j.del.Report
	*j.rep = Report{Tier: in.Source.Tier, Step: StepName(in.Source), Received: in.Received, Due: in.Due, PickedUp: j.now}
	out, ok := h.verify(j)
	if ok {
		out, ok = h.decode(j)
	}
	if ok {
		if out, ok = h.admit(ctx, j); ok {
			h.send(detached, j)
			out = h.decide(j)
		}
	}
	if out == nil && j.rep.Abandoned {
		h.tracer.End(ctx, j.rep)
		return nil
	}
	j.del.Records, j.del.ctx, j.del.detached, j.del.h = out, ctx, detached, h
	return &j.del
}

// verify checks what the record is before anything is decoded: the key's
// size and, for a retry record, its signature and routing headers.
func (h *Handler) verify(j *job) ([]*kgo.Record, bool) {
	r := j.in.Record
	j.meta = topology.Meta{FirstSeen: j.now, Origin: topology.OriginOf(r), RedriveCount: redriveCount(r)}
	if len(r.Key) > maxKeyLen {
		// Its retry records could not be produced; nobody keys by megabytes.
		return h.dead(j, topology.ReasonInvalidEvent, fmt.Sprintf("record key is %d bytes, limit %d", len(r.Key), maxKeyLen)), false
	}
	if !j.in.Source.Retry {
		return nil, true
	}
	if err := h.signer.Verify(r, j.now); err != nil {
		h.log.Warn("retry record refused", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		// Not ours: no outcome, the event id in it cannot be trusted.
		return h.dead(j, topology.ReasonBadSignature, err.Error()), false
	}
	m, err := topology.DecodeMeta(r.Headers)
	if err != nil {
		// Signed by us, so this is a bug, not an attack; keep the record.
		return h.dead(j, topology.ReasonInvalidEvent, err.Error()), false
	}
	j.meta = m
	j.rep.Held = true
	return nil, true
}

// decode parses the event; a refused one goes to the DLQ, with an outcome
// when it has an id.
func (h *Handler) decode(j *job) ([]*kgo.Record, bool) {
	r := j.in.Record
	ev, err := event.Decode(r.Value, r.Timestamp, h.cfg.Rules)
	if err != nil {
		reason := topology.ReasonInvalidEvent
		if ee := (*event.Error)(nil); errors.As(err, &ee) {
			reason = topology.Reason(ee.Reason)
		}
		out := h.dead(j, reason, err.Error())
		if id := idOf(r.Value); id != "" {
			out = append(out, h.outcome(j, id, "", topology.Decision{Outcome: topology.OutcomeDead, Reason: reason}))
		}
		return out, false
	}
	j.ev = ev
	// The endpoint's hash names the subscription everywhere below: hashed
	// once.
	j.rep.EventID, j.rep.Origin, j.rep.Sub = ev.ID, ev.Origin(), ev.EndpointHash()
	j.rep.App = event.AppName(ev.App)
	j.dec = topology.Input{Tier: j.in.Source.Tier, Attempt: j.meta.Attempt, NotBefore: j.meta.NotBefore, Now: j.now}
	if ev.TTL > 0 {
		j.dec.Deadline = ev.CreatedAt.Add(ev.TTL)
	}
	return nil, true
}

// admit decides whether the event is sent now: not when its app has no
// VAPID identity, not during a Retry-After hop, not to a tombstoned
// endpoint, not past its TTL, and only with a slot from the pacer. ok is
// false when the event ends here (out) or ctx ended while it waited
// (rep.Abandoned).
func (h *Handler) admit(ctx context.Context, j *job) (out []*kgo.Record, ok bool) {
	switch {
	case !h.sender.Signs(j.ev.App):
		// No key could match its subscription: sending would only earn
		// a 403. Dead at once, whatever the attempt; the name is safe
		// to show (event.CheckApp).
		return h.unknownApp(j), false
	case j.meta.NotBefore.After(j.now):
		j.res, j.rep.Hop = push.Result{Class: push.Deferred, Status: j.meta.Status}, true
		return nil, true
	case h.isGone(j.rep.Sub, j.now):
		j.res, j.rep.Tombstoned = push.Result{Class: push.Gone, Status: j.meta.Status}, true
		return nil, true
	case j.ev.TTL > 0 && j.dec.Deadline.Sub(j.now) < time.Second, j.ev.TTL == 0 && j.meta.Attempt > 0:
		// TTL 0: deliver now or never; there is no retry.
		return h.expired(j), false
	}
	// A send that cannot go at once waits in memory for as long as the
	// ladder would hold it: the step a deferral goes to.
	l := h.cfg.Policy.Ladder(j.in.Source.Tier)
	slot, until := h.pacer.Acquire(ctx, pacing.Request{
		Origin: j.ev.Origin(), Sub: j.rep.Sub, Tier: j.in.Source.Tier, Retry: j.meta.Attempt > 0,
		Failing: j.meta.Attempt > 0 && j.meta.Status != 429 && j.meta.Status != 406,
		Hold:    l.Steps[l.StepFor(max(j.meta.Attempt, 1))],
	})
	if ctx.Err() != nil {
		// Handed back while it waited: the next owner sends it.
		if slot != nil {
			slot.Done(push.Result{Class: push.Deferred})
		}
		j.rep.Abandoned = true
		return nil, false
	}
	if slot == nil {
		// Halted, paused or over the origin's queue: back to the ladder
		// without spending an attempt.
		j.res = push.Result{Class: push.Deferred, Status: j.meta.Status}
		j.rep.Paced, j.rep.DeferredUntil = true, until
		j.dec.NotBefore = later(j.dec.NotBefore, until)
		j.dec.Now = h.cfg.Now()
		return nil, true
	}
	j.slot = slot
	return nil, true
}

// send sends the event on the slot admit got, if any. ctx is never
// cancelled: a send under way is finished even when the partition is
// handed back meanwhile, as its result must be routed, or the next owner
// would send it again.
func (h *Handler) send(ctx context.Context, j *job) {
	if j.slot == nil {
		return
	}
	// The TTL left when the send starts: the slot may have been waited
	// for. Too little left, the slot is handed back and decide ends it.
	start := h.cfg.Now()
	ttl := time.Duration(0)
	if j.ev.TTL > 0 {
		if ttl = j.dec.Deadline.Sub(start).Truncate(time.Second); ttl < time.Second {
			j.slot.Done(push.Result{Class: push.Deferred})
			j.res, j.dec.Now = push.Result{Class: push.Deferred, Status: j.meta.Status}, start
			return
		}
	}
	j.res = h.sender.Send(ctx, j.ev, ttl)
	j.slot.Done(j.res)
	j.dec.Attempt = j.meta.Attempt + 1
	j.dec.Now = h.cfg.Now()
	j.rep.Sent, j.rep.SendStart, j.rep.SendEnd = true, start, j.dec.Now
	j.rep.Result, j.rep.TTL, j.rep.Attempt = j.res, ttl, j.dec.Attempt
	if j.in.Source.Retry {
		j.rep.Lateness = j.now.Sub(j.meta.Due)
	}
}

// decide routes the result (topology.Decide) and builds its records.
func (h *Handler) decide(j *job) []*kgo.Record {
	if j.ev.TTL == 0 && j.res.Class == push.Retryable {
		j.meta.Attempt, j.meta.Status = j.dec.Attempt, j.res.Status
		return h.expired(j)
	}
	j.dec.Result = j.res
	d := topology.Decide(&h.cfg.Policy, j.dec)
	// The last attempt's status; 0 after a transport error. A deferral
	// carries the previous one.
	j.meta.Attempt, j.meta.Status = j.dec.Attempt, j.res.Status
	j.rep.Decision = d
	if d.Action == topology.ActionRetry {
		return []*kgo.Record{h.retry(j, d)}
	}
	if d.Reason == topology.ReasonGone {
		h.tombstones.Add(j.rep.Sub, j.dec.Now.Add(h.cfg.TombstoneTTL))
	}
	return h.terminal(j, d)
}

// unknownApp ends an event whose app has no VAPID identity.
func (h *Handler) unknownApp(j *job) []*kgo.Record {
	d := topology.Decision{Action: topology.ActionDeadLetter, Outcome: topology.OutcomeDead, Reason: topology.ReasonUnknownApp}
	j.rep.Decision = d
	j.res.Err = fmt.Sprintf("app %q has no VAPID identity (--vapid-keys)", j.ev.App)
	if j.ev.App == "" {
		j.res.Err = "no app given and no default VAPID identity (--vapid-*)"
	}
	return h.terminal(j, d)
}

// expired ends an event whose TTL cannot be met.
func (h *Handler) expired(j *job) []*kgo.Record {
	d := topology.Decision{Action: topology.ActionDeadLetter, Outcome: topology.OutcomeExpired, Reason: topology.ReasonTTLExpired}
	j.rep.Decision = d
	return h.terminal(j, d)
}

// isGone reports whether the endpoint of hash sub answered 404/410
// recently.
func (h *Handler) isGone(sub string, now time.Time) bool {
	until, ok := h.tombstones.Get(sub)
	if !ok {
		return false
	}
	if now.After(until) {
		h.tombstones.Remove(sub)
		return false
	}
	return true
}

// jitter returns the random extra delay of a retry on a step of delay d.
func (h *Handler) jitter(d time.Duration) time.Duration {
	if j := h.cfg.JitterSpan(d); j > 0 {
		return rand.N(j)
	}
	return 0
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
