package deliver

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// The records an event leads to. The builders at the bottom are pure: the
// record they return depends on their arguments alone. The Handler methods
// above them pick the arguments and note in the report what was built.

// retry builds the signed record for the next step of the ladder.
func (h *Handler) retry(j *job, d topology.Decision) *kgo.Record {
	topic := h.cfg.Names.Retry(j.in.Source.Tier, d.Delay)
	due := d.Due.Add(h.jitter(d.Delay))
	j.rep.Retry = &RetryInfo{Tier: j.in.Source.Tier, Step: tiers.StepName(d.Delay), Topic: topic, Origin: j.rep.Origin,
		Deferred: j.res.Class == push.Deferred, Paced: j.rep.Paced, RetryAfter: j.res.RetryAfter > 0}
	// push-error, like push-status, tells what the last attempt met
	// ("timeout", "push service answered 503"); a deferral made none and
	// carries the previous one on.
	cause := j.meta.Error
	if j.res.Class != push.Deferred {
		cause = j.res.Err
	}
	return retryRecord(h.signer, topic, j.in.Record, j.meta, due, d.NotBefore, cause, h.cfg.SigLifetime)
}

// terminal builds the records of an event's end: DLQ and outcome, or the
// unsubscribe event and outcome, or the outcome alone.
func (h *Handler) terminal(j *job, d topology.Decision) []*kgo.Record {
	out := j.out[:0]
	switch {
	case d.Outcome == topology.OutcomeGone && j.res.Class == push.Gone && j.res.Status != 0:
		out = append(out, goneRecord(h.gone, j.in.Record, j.ev, j.rep.Sub, j.meta.Status, j.dec.Now))
	case d.Outcome != topology.OutcomeDelivered && d.Outcome != topology.OutcomeGone:
		out = append(out, h.dead(j, d.Reason, j.res.Err)...)
	}
	return append(out, h.outcome(j, j.ev.ID, j.rep.Sub, d))
}

// dead builds the DLQ record of j.
func (h *Handler) dead(j *job, reason topology.Reason, cause string) []*kgo.Record {
	j.rep.Dead = append(j.rep.Dead, reason)
	return []*kgo.Record{deadRecord(h.dlq, j.in.Record, j.meta, reason, cause)}
}

// outcome builds the ledger record of j's end.
func (h *Handler) outcome(j *job, id, endpointHash string, d topology.Decision) *kgo.Record {
	now := later(j.now, j.dec.Now)
	var latency time.Duration
	var app string
	if j.ev != nil {
		latency, app = now.Sub(j.ev.CreatedAt), j.ev.App
	}
	tier := j.in.Source.Tier.String()
	j.finish = FinishInfo{Outcome: d.Outcome, Reason: d.Reason, Tier: tier, App: j.rep.App, Latency: latency}
	j.rep.Finish = &j.finish
	return outcomeRecord(h.outcomes, j.in.Record, j.meta, topology.OutcomeRecord{
		ID: id, Outcome: string(d.Outcome), Reason: string(d.Reason), Status: j.meta.Status,
		Attempts: j.meta.Attempt, Tier: tier, App: app, EndpointHash: endpointHash,
		LatencyMS: latency.Milliseconds(), FirstSeen: j.meta.FirstSeen.UnixMilli(), At: now.UnixMilli(),
	})
}

// retryRecord is the record of r on retry topic, due at due, signed until
// SigLifetime after it, with cause, the last attempt's failure, in
// push-error. The timestamp of the event's first record travels
// with it: it is created_at when the event has none, so the TTL and
// latency_ms count from production, not from the last hop.
func retryRecord(signer *topology.Signer, topic string, r *kgo.Record, meta topology.Meta, due, notBefore time.Time, cause string, sigLifetime time.Duration) *kgo.Record {
	meta.Due, meta.NotBefore = due, notBefore
	meta.Reason, meta.Error = "", truncate(cause, 200)
	rec := newRecord()
	hs := meta.Headers(rec.hs[:0])
	sig := signer.Sign(topic, hs, r.Value, due.Add(sigLifetime))
	hs = append(hs, kgo.RecordHeader{Key: topology.HeaderSig, Value: []byte(sig)})
	hs = appendTrace(hs, r)
	rec.Record = kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Headers: hs, Timestamp: r.Timestamp}
	return &rec.Record
}

// deadRecord is the DLQ record of r: the event intact, the reason in
// headers. A value too large to be an event, or an oversized key, is left
// out (push-error says why): it could never be redriven, and it may not fit
// the DLQ topic, where a refused produce would hold back the partition.
func deadRecord(topic string, r *kgo.Record, meta topology.Meta, reason topology.Reason, cause string) *kgo.Record {
	meta.Due, meta.NotBefore = time.Time{}, time.Time{}
	meta.Reason, meta.Error = reason, truncate(cause, 200)
	rec := newRecord()
	hs := appendTrace(meta.Headers(rec.hs[:0]), r)
	key, value := r.Key, r.Value
	if len(value) > event.MaxEventSize {
		value = nil
	}
	if len(key) > maxKeyLen {
		key = nil
	}
	rec.Record = kgo.Record{Topic: topic, Key: key, Value: value, Headers: hs}
	return &rec.Record
}

// outcomeRecord is the ledger record o of r, keyed by the event id.
// The key and the value share one buffer.
func outcomeRecord(topic string, r *kgo.Record, meta topology.Meta, o topology.OutcomeRecord) *kgo.Record {
	buf := append(make([]byte, 0, len(o.ID)+256), o.ID...)
	key := buf[:len(o.ID):len(o.ID)]
	v := o.AppendJSON(buf[len(o.ID):])
	meta.Due, meta.NotBefore, meta.Error = time.Time{}, time.Time{}, ""
	meta.Reason = topology.Reason(o.Reason)
	rec := newRecord()
	hs := appendTrace(meta.Headers(rec.hs[:0]), r)
	rec.Record = kgo.Record{Topic: topic, Key: key, Value: v, Headers: hs}
	return &rec.Record
}

// recordWithHeaders is a record built here and room for its headers,
// allocated together: routing headers, push-sig and the trace context fit.
type recordWithHeaders struct {
	kgo.Record
	hs [12]kgo.RecordHeader
}

func newRecord() *recordWithHeaders { return new(recordWithHeaders) }

// goneRecord is the unsubscribe event of e's endpoint, whose hash is sub.
func goneRecord(topic string, r *kgo.Record, e *event.Event, sub string, status int, now time.Time) *kgo.Record {
	v, _ := json.Marshal(topology.GoneRecord{
		Endpoint: e.Endpoint, EndpointHash: sub, EventID: e.ID,
		Status: status, At: now.UTC().Format(time.RFC3339Nano),
	})
	return &kgo.Record{Topic: topic, Key: []byte(sub), Value: v, Headers: appendTrace(nil, r)}
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

// redriveCount reads push-redrive-count alone, so a malformed neighbour
// header cannot reset the DLQ loop guard (a forger can only lower it).
func redriveCount(r *kgo.Record) int {
	for _, h := range r.Headers {
		if h.Key == topology.HeaderRedriveCount {
			if m, err := topology.DecodeMeta([]kgo.RecordHeader{h}); err == nil {
				return m.RedriveCount
			}
		}
	}
	return 0
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
