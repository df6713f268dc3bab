package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/topology"
)

// handle routes one record and produces what it leads to; the record counts
// as finished once every produced record is acknowledged.
func (p *Processor) handle(ps *partition, t *tracked) {
	outs := p.route(ps, t.rec)
	if len(outs) == 0 {
		p.complete(ps, t, true)
		return
	}
	var left atomic.Int32
	var failed atomic.Bool
	left.Store(int32(len(outs)))
	for _, o := range outs {
		p.cl.Produce(context.Background(), o, func(r *kgo.Record, err error) {
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
func (p *Processor) route(ps *partition, r *kgo.Record) []*kgo.Record {
	now := p.cfg.Now()
	src := ps.src
	meta := topology.Meta{FirstSeen: now, Origin: topology.OriginOf(r)}
	if src.Retry {
		if err := p.signer.Verify(r, now); err != nil {
			p.stats.dead(topology.ReasonBadSignature)
			p.log.Warn("retry record refused", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			// Not ours: no outcome, the event id in it cannot be trusted.
			return []*kgo.Record{p.deadLetter(r, meta, topology.ReasonBadSignature, err.Error())}
		}
		m, err := topology.DecodeMeta(r.Headers)
		if err != nil {
			// Signed by us, so this is a bug, not an attack; keep the record.
			return []*kgo.Record{p.deadLetter(r, meta, topology.ReasonInvalidEvent, err.Error())}
		}
		meta = m
	} else if m, err := topology.DecodeMeta(r.Headers); err == nil {
		meta.RedriveCount = m.RedriveCount
	}

	ev, err := event.Decode(r.Value, r.Timestamp, p.cfg.Rules)
	if err != nil {
		reason, msg := topology.ReasonInvalidEvent, err.Error()
		var ee *event.Error
		if errors.As(err, &ee) {
			reason = topology.Reason(ee.Reason)
		}
		p.stats.dead(reason)
		outs := []*kgo.Record{p.deadLetter(r, meta, reason, msg)}
		if id := idOf(r.Value); id != "" {
			outs = append(outs, p.outcome(r, meta, outcomeInfo{
				id: id, outcome: topology.OutcomeDead, reason: reason, tier: src.Tier.String(), now: now,
			}))
		}
		return outs
	}

	in := topology.Input{Tier: src.Tier, Attempt: meta.Attempt, NotBefore: meta.NotBefore, Now: now}
	if ev.TTL > 0 {
		in.Deadline = ev.CreatedAt.Add(ev.TTL)
	}
	var res topology.Result
	switch {
	case meta.NotBefore.After(now):
		// A hop through the last step: Retry-After is not honoured yet.
		res = topology.Result{Class: topology.ClassDeferred, Status: meta.Status}
	case p.isGone(ev, now):
		res = topology.Result{Class: topology.ClassGone, Status: meta.Status}
	default:
		ttl := time.Duration(0)
		if ev.TTL > 0 {
			ttl = in.Deadline.Sub(now).Truncate(time.Second)
			if ttl < time.Second {
				p.stats.dead(topology.ReasonTTLExpired)
				return p.terminal(r, ev, meta, topology.Decision{Action: topology.ActionDeadLetter, Outcome: topology.OutcomeExpired, Reason: topology.ReasonTTLExpired}, res, now)
			}
		} else if meta.Attempt > 0 {
			// TTL 0: deliver now or never; there is no retry.
			return p.terminal(r, ev, meta, topology.Decision{Action: topology.ActionDeadLetter, Outcome: topology.OutcomeExpired, Reason: topology.ReasonTTLExpired}, res, now)
		}
		lateness := time.Duration(0)
		if src.Retry {
			lateness = now.Sub(meta.Due)
		}
		slot, until := p.pacer.Acquire(context.Background(), pacing.Request{
			Origin: ev.Origin(), Sub: ev.EndpointHash(), Tier: src.Tier, Retry: meta.Attempt > 0,
		})
		if slot == nil {
			// Halted, paused or over the origin's queue: back to the
			// ladder without spending an attempt.
			res = topology.Result{Class: topology.ClassDeferred, Status: meta.Status}
			if until.After(in.NotBefore) {
				in.NotBefore = until
			}
			in.Now = p.cfg.Now()
			p.stats.deferred(ev.Origin())
			break
		}
		started := p.cfg.Now()
		res = p.sender.Send(context.Background(), ev, ttl)
		slot.Done(res)
		in.Attempt = meta.Attempt + 1
		in.Now = p.cfg.Now()
		p.stats.sent(ev.Origin(), res)
		p.hooks.Sent(SendInfo{Tier: src.Tier, Step: stepName(src), Origin: ev.Origin(), Attempt: in.Attempt, Result: res, Took: in.Now.Sub(started), Lateness: lateness})
		if ev.TTL == 0 && res.Class == topology.ClassRetryable {
			meta.Attempt, meta.Status = in.Attempt, res.Status
			return p.terminal(r, ev, meta, topology.Decision{Action: topology.ActionDeadLetter, Outcome: topology.OutcomeExpired, Reason: topology.ReasonTTLExpired}, res, in.Now)
		}
	}
	in.Result = res
	d := topology.Decide(&p.cfg.Policy, in)
	meta.Attempt = in.Attempt
	if res.Status != 0 {
		meta.Status = res.Status
	}
	if d.Action == topology.ActionRetry {
		return []*kgo.Record{p.retry(r, src, meta, d, in.Now)}
	}
	switch d.Reason {
	case topology.ReasonGone:
		p.tombstones.Add(ev.EndpointHash(), in.Now.Add(p.cfg.TombstoneTTL))
	}
	return p.terminal(r, ev, meta, d, res, in.Now)
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
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: hs}
}

// terminal builds the records of an event's end: DLQ and outcome, or the
// unsubscribe event and outcome, or the outcome alone.
func (p *Processor) terminal(r *kgo.Record, e *event.Event, meta topology.Meta, d topology.Decision, res topology.Result, now time.Time) []*kgo.Record {
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
		if res.Class == topology.ClassGone && res.Status != 0 {
			out = append(out, p.goneEvent(r, e, meta.Status, now))
		}
	default:
		p.stats.dead(d.Reason)
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
	meta.Due, meta.NotBefore = time.Time{}, time.Time{}
	meta.Reason = reason
	meta.Error = truncate(cause, 200)
	hs := appendTrace(meta.Headers(make([]kgo.RecordHeader, 0, 8)), r)
	return &kgo.Record{Topic: p.cfg.Names.DLQ(), Key: r.Key, Value: r.Value, Headers: hs}
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

// OutcomeRecord is the JSON value of a push.outcomes record.
type OutcomeRecord struct {
	ID           string `json:"id"`
	Outcome      string `json:"outcome"`
	Reason       string `json:"reason"`
	Status       int    `json:"status"`
	Attempts     int    `json:"attempts"`
	Tier         string `json:"tier,omitempty"`
	EndpointHash string `json:"endpoint_hash,omitempty"`
	LatencyMS    int64  `json:"latency_ms"`
	FirstSeen    int64  `json:"first_seen"`
	At           int64  `json:"at"`
}

func (p *Processor) outcome(r *kgo.Record, meta topology.Meta, o outcomeInfo) *kgo.Record {
	v, _ := json.Marshal(OutcomeRecord{
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

// GoneRecord is the JSON value of a push.gone unsubscribe event.
type GoneRecord struct {
	Endpoint     string `json:"endpoint"`
	EndpointHash string `json:"endpoint_hash"`
	EventID      string `json:"event_id"`
	Status       int    `json:"status"`
	At           string `json:"at"`
}

func (p *Processor) goneEvent(r *kgo.Record, e *event.Event, status int, now time.Time) *kgo.Record {
	v, _ := json.Marshal(GoneRecord{
		Endpoint: e.Endpoint, EndpointHash: e.EndpointHash(), EventID: e.ID,
		Status: status, At: now.UTC().Format(time.RFC3339Nano),
	})
	hs := appendTrace(nil, r)
	return &kgo.Record{Topic: p.cfg.Names.Gone(), Key: []byte(e.EndpointHash()), Value: v, Headers: hs}
}

// appendTrace carries the W3C trace context of the source record forward.
func appendTrace(hs []kgo.RecordHeader, r *kgo.Record) []kgo.RecordHeader {
	for _, h := range r.Headers {
		if h.Key == topology.HeaderTraceparent || h.Key == "tracestate" {
			hs = append(hs, h)
		}
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
