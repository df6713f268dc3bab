package deliver

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Delivery is what one record leads to: the records to produce and the
// report of what happened, which the hooks and the tracer see only once
// every record is acknowledged (Acked).
type Delivery struct {
	Records  []*kgo.Record
	Report   Report
	ctx      context.Context
	detached context.Context // ctx without its cancellation
	h        *Handler
}

// Context carries the record's trace; the records produced for it are its
// children. It is never cancelled.
func (d *Delivery) Context() context.Context { return d.detached }

// Acked is called once every record of d is acknowledged: the hooks count
// what happened and the tracer ends the record's trace.
func (d *Delivery) Acked() {
	r, hooks := &d.Report, d.h.hooks
	if r.Sent {
		hooks.Sent(SendInfo{Tier: r.Tier, Step: r.Step, Origin: r.Origin, App: r.App, Attempt: r.Attempt, Result: r.Result,
			Took: r.SendEnd.Sub(r.SendStart), Lateness: r.Lateness})
	}
	if r.Sent && r.Decision.Reason == topology.ReasonVAPIDRejected {
		hooks.VAPIDRejected(r.App)
	}
	if r.Retry != nil {
		hooks.Retried(*r.Retry)
	}
	for _, reason := range r.Dead {
		hooks.DeadLettered(reason)
	}
	if r.Finish != nil {
		hooks.Finished(*r.Finish)
	}
	d.h.tracer.End(d.ctx, r)
}

// Report is what happened to one record, for hooks and traces. It holds
// hashes and names, never an endpoint, key or payload.
type Report struct {
	Tier    tiers.Tier
	Step    string // "first", or the retry step's topic suffix ("retry-8s")
	EventID string
	Origin  string // push service origin
	Sub     string // endpoint hash
	// App names the event's VAPID identity: its app, or event.DefaultApp.
	// Never a key.
	App      string
	Received time.Time
	// Retry records: held until Due, picked up (handled) at PickedUp.
	Held          bool
	Due, PickedUp time.Time
	Hop           bool      // a Retry-After hop through the last step: no send
	Tombstoned    bool      // the endpoint answered 404/410 recently: no send
	Paced         bool      // the pacer deferred it to the ladder: no send
	DeferredUntil time.Time // not before this, as the pacer said (zero: no floor)
	Abandoned     bool      // the partition was handed back before the send

	Sent               bool
	SendStart, SendEnd time.Time
	Result             push.Result
	TTL                time.Duration
	Attempt            int           // sends made, this one included
	Lateness           time.Duration // retries: how long after its due time it was handled

	Decision topology.Decision
	Retry    *RetryInfo
	Dead     []topology.Reason
	Finish   *FinishInfo
}

// Tracer follows each record in a trace (telemetry implements it).
type Tracer interface {
	// Start begins the processing of r; the records produced for it
	// continue the returned context's trace.
	Start(ctx context.Context, r *kgo.Record) context.Context
	// End ends it, once its records are acknowledged or it was abandoned.
	End(ctx context.Context, rep *Report)
}

type nopTracer struct{}

func (nopTracer) Start(ctx context.Context, _ *kgo.Record) context.Context { return ctx }
func (nopTracer) End(context.Context, *Report)                             {}

// Hooks observe handled records (metrics, the status table). They run once
// the record's outputs are acknowledged; they must be cheap and must not
// block.
type Hooks interface {
	// Sent is called for every send to a push service.
	Sent(SendInfo)
	// Retried is called for a record routed to a retry step.
	Retried(RetryInfo)
	// DeadLettered is called for a record routed to the DLQ.
	DeadLettered(topology.Reason)
	// Finished is called when an event reaches its terminal outcome.
	Finished(FinishInfo)
	// VAPIDRejected is called when a push service refused the VAPID
	// authorization of app (event.DefaultApp for the default identity):
	// 401 or 403, most likely a subscription made with another key.
	VAPIDRejected(app string)
}

// SendInfo describes one send.
type SendInfo struct {
	Tier     tiers.Tier
	Step     string // "first" or the retry step's topic suffix ("retry-8s")
	Origin   string // push service origin, never the endpoint
	App      string // the VAPID identity's name (event.DefaultApp for the default)
	Attempt  int
	Result   push.Result
	Took     time.Duration
	Lateness time.Duration // retries: how long after its due time it was handled
}

// RetryInfo describes a record routed to a retry step.
type RetryInfo struct {
	Tier       tiers.Tier
	Step       string // the step's topic suffix: "retry-8s"
	Topic      string
	Origin     string
	Deferred   bool // no send was made (pacing, a Retry-After hop)
	Paced      bool // the pacer held it back (no slot for its origin)
	RetryAfter bool // the push service's Retry-After chose the step
}

// FinishInfo describes an event's terminal outcome.
type FinishInfo struct {
	Outcome topology.Outcome
	Reason  topology.Reason
	Tier    string
	App     string // the event's app, or event.DefaultApp; "" when it did not decode
	Latency time.Duration
}

// NopHooks observes nothing; embed it to implement only some Hooks.
type NopHooks struct{}

func (NopHooks) Sent(SendInfo)                {}
func (NopHooks) Retried(RetryInfo)            {}
func (NopHooks) DeadLettered(topology.Reason) {}
func (NopHooks) Finished(FinishInfo)          {}
func (NopHooks) VAPIDRejected(string)         {}

// MultiHooks calls each of hs in turn.
type MultiHooks []Hooks

func (m MultiHooks) Sent(s SendInfo) {
	for _, h := range m {
		h.Sent(s)
	}
}

func (m MultiHooks) Retried(r RetryInfo) {
	for _, h := range m {
		h.Retried(r)
	}
}

func (m MultiHooks) DeadLettered(r topology.Reason) {
	for _, h := range m {
		h.DeadLettered(r)
	}
}

func (m MultiHooks) Finished(f FinishInfo) {
	for _, h := range m {
		h.Finished(f)
	}
}

func (m MultiHooks) VAPIDRejected(app string) {
	for _, h := range m {
		h.VAPIDRejected(app)
	}
}

// StepName is the step of a record consumed from src: "first" on a tier
// topic, the topic suffix on a retry topic ("retry-8s").
func StepName(src topology.Source) string {
	if !src.Retry {
		return "first"
	}
	return tiers.StepName(src.Delay)
}
