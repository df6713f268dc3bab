package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// handle routes one record and produces what it leads to; the record counts
// as finished once every produced record is acknowledged.
func (p *Processor) handle(ps *partition, t *tracked) {
	ctx := context.Background()
	if p.kt != nil {
		// The process span continues the record's trace (upstream's, or
		// the retry hop's); every record produced below is its child.
		var span trace.Span
		ctx, span = p.kt.WithProcessSpan(t.rec)
		defer span.End()
	}
	outs := p.route(ctx, ps, t)
	if len(outs) == 0 {
		p.complete(ps, t, true)
		return
	}
	var left atomic.Int32
	var failed atomic.Bool
	left.Store(int32(len(outs)))
	for _, o := range outs {
		o.Context = ctx
		p.cl.Produce(ctx, o, func(r *kgo.Record, err error) {
			if err != nil {
				failed.Store(true)
				if !errors.Is(err, kgo.ErrClientClosed) {
					p.log.Error("produce failed; the source record stays uncommitted", "topic", r.Topic, "err", err)
				}
			}
			if left.Add(-1) == 0 {
				p.complete(ps, t, !failed.Load())
			}
		})
	}
}

// route decides where one consumed record goes and builds the records to
// produce. It never fails: whatever cannot be sent goes to the DLQ.
func (p *Processor) route(ctx context.Context, ps *partition, t *tracked) []*kgo.Record {
	r := t.rec
	now := p.cfg.Now()
	src := ps.src
	meta := topology.Meta{FirstSeen: now, Origin: topology.OriginOf(r)}
	if len(r.Key) > maxKeyLen {
		// Its retry records could not be produced; nobody keys by megabytes.
		meta.RedriveCount = redriveCount(r)
		return []*kgo.Record{p.deadLetter(r, meta, topology.ReasonInvalidEvent, "record key is "+strconv.Itoa(len(r.Key))+" bytes, limit "+strconv.Itoa(maxKeyLen))}
	}
	if src.Retry {
		if err := p.signer.Verify(r, now); err != nil {
			p.log.Warn("retry record refused", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			meta.RedriveCount = redriveCount(r) // a forger can only lower it
			// Not ours: no outcome, the event id in it cannot be trusted.
			return []*kgo.Record{p.deadLetter(r, meta, topology.ReasonBadSignature, err.Error())}
		}
		m, err := topology.DecodeMeta(r.Headers)
		if err != nil {
			// Signed by us, so this is a bug, not an attack; keep the record.
			meta.RedriveCount = redriveCount(r)
			return []*kgo.Record{p.deadLetter(r, meta, topology.ReasonInvalidEvent, err.Error())}
		}
		meta = m
		p.notePickup(t, now)
		p.holdSpan(ctx, t, src, meta.Due, now)
	} else {
		meta.RedriveCount = redriveCount(r)
	}

	ev, err := event.Decode(r.Value, r.Timestamp, p.cfg.Rules)
	if err != nil {
		reason, msg := topology.ReasonInvalidEvent, err.Error()
		var ee *event.Error
		if errors.As(err, &ee) {
			reason = topology.Reason(ee.Reason)
		}
		trace.SpanFromContext(ctx).SetStatus(codes.Error, string(reason))
		outs := []*kgo.Record{p.deadLetter(r, meta, reason, msg)}
		if id := idOf(r.Value); id != "" {
			outs = append(outs, p.outcome(r, meta, outcomeInfo{
				id: id, outcome: topology.OutcomeDead, reason: reason, tier: src.Tier.String(), now: now,
			}))
		}
		return outs
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.String("push.event_id", ev.ID), attribute.String("push.origin", ev.Origin()))

	in := topology.Input{Tier: src.Tier, Attempt: meta.Attempt, NotBefore: meta.NotBefore, Now: now}
	if ev.TTL > 0 {
		in.Deadline = ev.CreatedAt.Add(ev.TTL)
	}
	expired := topology.Decision{Action: topology.ActionDeadLetter, Outcome: topology.OutcomeExpired, Reason: topology.ReasonTTLExpired}
	var res push.Result
	var span trace.Span // the send's span, ended once the result is routed
	switch {
	case meta.NotBefore.After(now):
		// A hop through the last step: Retry-After is not honoured yet.
		res = push.Result{Class: push.Deferred, Status: meta.Status}
		trace.SpanFromContext(ctx).AddEvent("push.hop", trace.WithAttributes(attribute.String("push.not_before", meta.NotBefore.UTC().Format(time.RFC3339Nano))))
	case p.isGone(ev, now):
		res = push.Result{Class: push.Gone, Status: meta.Status}
		trace.SpanFromContext(ctx).AddEvent("push.tombstoned")
	default:
		ttl := time.Duration(0)
		if ev.TTL > 0 {
			ttl = in.Deadline.Sub(now).Truncate(time.Second)
			if ttl < time.Second {
				return p.terminal(r, ev, meta, expired, res, now)
			}
		} else if meta.Attempt > 0 {
			// TTL 0: deliver now or never; there is no retry.
			return p.terminal(r, ev, meta, expired, res, now)
		}
		lateness := time.Duration(0)
		if src.Retry {
			lateness = now.Sub(meta.Due)
		}
		slot, until := p.pacer.Acquire(ctx, pacing.Request{
			Origin: ev.Origin(), Sub: ev.EndpointHash(), Tier: src.Tier, Retry: meta.Attempt > 0,
			Failing: meta.Attempt > 0 && meta.Status != 429 && meta.Status != 406,
		})
		if slot == nil {
			// Halted, paused or over the origin's queue: back to the
			// ladder without spending an attempt.
			res = push.Result{Class: push.Deferred, Status: meta.Status}
			if until.After(in.NotBefore) {
				in.NotBefore = until
			}
			in.Now = p.cfg.Now()
			p.stats.deferred(ev.Origin())
			trace.SpanFromContext(ctx).AddEvent("push.deferred_by_pacing", trace.WithAttributes(attribute.String("push.not_before", until.UTC().Format(time.RFC3339Nano))))
			break
		}
		started := p.cfg.Now()
		var sctx context.Context
		sctx, span = p.tracer.Start(ctx, "push.send", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("push.event_id", ev.ID),
			attribute.Int("push.attempt", meta.Attempt+1),
			attribute.String("push.tier", src.Tier.String()),
			attribute.String("push.step", stepName(src)),
			attribute.String("push.origin", ev.Origin()),
			attribute.String("push.subscription", ev.EndpointHash()),
			attribute.Int64("push.ttl_s", int64(ttl/time.Second)),
			attribute.Float64("push.held_late_s", lateness.Seconds()),
		))
		res = p.sender.Send(sctx, ev, ttl)
		slot.Done(res)
		in.Attempt = meta.Attempt + 1
		in.Now = p.cfg.Now()
		span.SetAttributes(attribute.Int("http.response.status_code", res.Status), attribute.String("push.class", res.Class.String()))
		if res.RetryAfter > 0 {
			span.SetAttributes(attribute.Float64("push.retry_after_s", res.RetryAfter.Seconds()))
		}
		if res.Class != push.Delivered {
			span.SetStatus(codes.Error, res.Err)
		}
		p.stats.sent(ev.Origin(), res)
		p.hooks.Sent(SendInfo{Tier: src.Tier, Step: stepName(src), Origin: ev.Origin(), Attempt: in.Attempt, Result: res, Took: in.Now.Sub(started), Lateness: lateness})
		if ev.TTL == 0 && res.Class == push.Retryable {
			meta.Attempt, meta.Status = in.Attempt, res.Status
			endSend(span, expired)
			return p.terminal(r, ev, meta, expired, res, in.Now)
		}
	}
	in.Result = res
	d := topology.Decide(&p.cfg.Policy, in)
	endSend(span, d)
	// The last attempt's status; 0 after a transport error. A deferral
	// carries the previous one.
	meta.Attempt, meta.Status = in.Attempt, res.Status
	if d.Action == topology.ActionRetry {
		p.hooks.Retried(RetryInfo{Tier: src.Tier, Step: tiers.StepName(d.Delay), Deferred: res.Class == push.Deferred, RetryAfter: res.RetryAfter > 0})
		return []*kgo.Record{p.retry(r, src, meta, d, in.Now)}
	}
	if d.Reason == topology.ReasonGone {
		p.tombstones.Add(ev.EndpointHash(), in.Now.Add(p.cfg.TombstoneTTL))
	}
	return p.terminal(r, ev, meta, d, res, in.Now)
}

// endSend records where the send's result was routed and ends its span.
func endSend(span trace.Span, d topology.Decision) {
	if span == nil {
		return
	}
	next := string(d.Outcome)
	if d.Action == topology.ActionRetry {
		next = "retry " + tiers.StepName(d.Delay)
	}
	span.SetAttributes(attribute.String("push.outcome", next))
	if d.Reason != "" {
		span.SetAttributes(attribute.String("push.reason", string(d.Reason)))
	}
	span.End()
}

// holdSpan records how long a retry record was held before its send.
func (p *Processor) holdSpan(ctx context.Context, t *tracked, src topology.Source, due, now time.Time) {
	_, s := p.tracer.Start(ctx, "push.hold", trace.WithTimestamp(t.received), trace.WithAttributes(
		attribute.String("push.step", stepName(src)),
		attribute.String("push.due", due.UTC().Format(time.RFC3339Nano)),
		attribute.Float64("push.lateness_s", now.Sub(due).Seconds()),
	))
	s.End(trace.WithTimestamp(now))
}

// redriveCount reads push-redrive-count alone, so a malformed neighbour
// header cannot reset the DLQ loop guard.
func redriveCount(r *kgo.Record) int {
	for _, h := range r.Headers {
		if h.Key == topology.HeaderRedriveCount {
			m, err := topology.DecodeMeta([]kgo.RecordHeader{h})
			if err == nil {
				return m.RedriveCount
			}
		}
	}
	return 0
}

func stepName(src topology.Source) string {
	if !src.Retry {
		return "first"
	}
	return src.Delay.String()
}

// isGone reports whether e's endpoint answered 404/410 recently.
func (p *Processor) isGone(e *event.Event, now time.Time) bool {
	until, ok := p.tombstones.Get(e.EndpointHash())
	if !ok {
		return false
	}
	if now.After(until) {
		p.tombstones.Remove(e.EndpointHash())
		return false
	}
	return true
}

// retry builds the signed record for the next step of the ladder.
func (p *Processor) retry(r *kgo.Record, src topology.Source, meta topology.Meta, d topology.Decision, now time.Time) *kgo.Record {
	meta.Due = d.Due.Add(p.jitter(d.Delay))
	meta.NotBefore = d.NotBefore
	meta.Reason, meta.Error = "", ""
	topic := p.cfg.Names.Retry(src.Tier, d.Delay)
	hs := meta.Headers(make([]kgo.RecordHeader, 0, 8))
	sig := p.signer.Sign(topic, hs, r.Value, meta.Due.Add(p.cfg.SigLifetime))
	hs = append(hs, kgo.RecordHeader{Key: topology.HeaderSig, Value: []byte(sig)})
	hs = appendTrace(hs, r)
	p.stats.retried(topic)
	// The timestamp of the event's first record travels with it: it is
	// created_at when the event has none, so the TTL and latency_ms count
	// from production, not from the last hop.
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp}
}

// terminal builds the records of an event's end: DLQ and outcome, or the
// unsubscribe event and outcome, or the outcome alone.
func (p *Processor) terminal(r *kgo.Record, e *event.Event, meta topology.Meta, d topology.Decision, res push.Result, now time.Time) []*kgo.Record {
	info := outcomeInfo{
		id: e.ID, outcome: d.Outcome, reason: d.Reason, tier: p.tierOf(r),
		endpointHash: e.EndpointHash(), latency: now.Sub(e.CreatedAt), now: now,
	}
	out := make([]*kgo.Record, 0, 2)
	switch d.Outcome {
	case topology.OutcomeDelivered:
		p.stats.delivered.Add(1)
	case topology.OutcomeGone:
		p.stats.gone.Add(1)
		if res.Class == push.Gone && res.Status != 0 {
			out = append(out, p.goneEvent(r, e, meta.Status, now))
		}
	default:
		out = append(out, p.deadLetter(r, meta, d.Reason, res.Err))
	}
	return append(out, p.outcome(r, meta, info))
}

func (p *Processor) tierOf(r *kgo.Record) string {
	src, _ := p.cfg.Names.Parse(r.Topic, &p.cfg.Policy)
	return src.Tier.String()
}

// deadLetter builds the DLQ record: the event intact, the reason in headers.
func (p *Processor) deadLetter(r *kgo.Record, meta topology.Meta, reason topology.Reason, cause string) *kgo.Record {
	p.stats.dead(reason)
	p.hooks.DeadLettered(reason)
	meta.Due, meta.NotBefore = time.Time{}, time.Time{}
	meta.Reason = reason
	meta.Error = truncate(cause, 200)
	hs := appendTrace(meta.Headers(make([]kgo.RecordHeader, 0, 8)), r)
	// A value too large to be an event, or an oversized key, is left out
	// (push-error says why): it could never be redriven, and it may not fit
	// the DLQ topic, where a refused produce would hold back the
	// partition's commits for good.
	key, value := r.Key, r.Value
	if len(value) > event.MaxEventSize {
		value = nil
	}
	if len(key) > maxKeyLen {
		key = nil
	}
	return &kgo.Record{Topic: p.cfg.Names.DLQ(), Key: key, Value: value, Headers: hs}
}

type outcomeInfo struct {
	id           string
	outcome      topology.Outcome
	reason       topology.Reason
	tier         string
	endpointHash string
	latency      time.Duration
	now          time.Time
}

func (p *Processor) outcome(r *kgo.Record, meta topology.Meta, o outcomeInfo) *kgo.Record {
	v, _ := json.Marshal(topology.OutcomeRecord{
		ID: o.id, Outcome: string(o.outcome), Reason: string(o.reason), Status: meta.Status,
		Attempts: meta.Attempt, Tier: o.tier, EndpointHash: o.endpointHash,
		LatencyMS: o.latency.Milliseconds(), FirstSeen: meta.FirstSeen.UnixMilli(), At: o.now.UnixMilli(),
	})
	meta.Due, meta.NotBefore, meta.Error = time.Time{}, time.Time{}, ""
	meta.Reason = o.reason
	hs := appendTrace(meta.Headers(make([]kgo.RecordHeader, 0, 8)), r)
	p.hooks.Finished(FinishInfo{Outcome: o.outcome, Reason: o.reason, Tier: o.tier, Latency: o.latency})
	return &kgo.Record{Topic: p.cfg.Names.Outcomes(), Key: []byte(o.id), Value: v, Headers: hs}
}

func (p *Processor) goneEvent(r *kgo.Record, e *event.Event, status int, now time.Time) *kgo.Record {
	v, _ := json.Marshal(topology.GoneRecord{
		Endpoint: e.Endpoint, EndpointHash: e.EndpointHash(), EventID: e.ID,
		Status: status, At: now.UTC().Format(time.RFC3339Nano),
	})
	hs := appendTrace(nil, r)
	return &kgo.Record{Topic: p.cfg.Names.Gone(), Key: []byte(e.EndpointHash()), Value: v, Headers: hs}
}

// maxKeyLen bounds the record key the processor accepts and copies.
const maxKeyLen = 4096

// appendTrace carries the W3C trace context of the source record forward:
// the first traceparent and tracestate only, and only of a sane size (W3C:
// 55 and at most 512 bytes), so hostile headers are never copied.
func appendTrace(hs []kgo.RecordHeader, r *kgo.Record) []kgo.RecordHeader {
	var parent, state bool
	for _, h := range r.Headers {
		switch {
		case h.Key == topology.HeaderTraceparent && !parent && len(h.Value) <= 128:
			parent = true
		case h.Key == "tracestate" && !state && len(h.Value) <= 512:
			state = true
		default:
			continue
		}
		hs = append(hs, h)
	}
	return hs
}

// idOf extracts the event id of a value that failed validation, so its
// outcome can still be written; "" when there is none.
func idOf(v []byte) string {
	var x struct {
		ID any `json:"id"`
	}
	if len(v) > 1<<16 || json.Unmarshal(v, &x) != nil {
		return ""
	}
	switch id := x.ID.(type) {
	case string:
		return truncate(id, 256)
	case float64:
		return strconv.FormatFloat(id, 'f', -1, 64)
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
