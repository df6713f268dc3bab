package deliver

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// sender answers every send with res and counts the sends. It signs for
// the default identity (unless noDefault) and the apps "shop" and "news".
type sender struct {
	res       push.Result
	sends     int
	noDefault bool
}

func (s *sender) Send(context.Context, *event.Event, time.Duration) push.Result {
	s.sends++
	return s.res
}

func (s *sender) Signs(app string) bool {
	return app == "" && !s.noDefault || app == "shop" || app == "news"
}

var t0 = time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)

func newHandler(t testing.TB, res push.Result) (*Handler, *sender, *topology.Signer) {
	t.Helper()
	signer, err := topology.NewSigner([]byte("deliver-test-key-0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	pacer, err := pacing.New(pacing.DefaultConfig(), pacing.WithClock(func() time.Time { return t0 }))
	if err != nil {
		t.Fatal(err)
	}
	s := &sender{res: res}
	h, err := New(Config{Names: topology.Names{Prefix: topology.DefaultPrefix}, Policy: tiers.DefaultPolicy(), Rules: event.DefaultRules(),
		SigLifetime: time.Hour, TombstoneSize: 10, TombstoneTTL: time.Hour, Now: func() time.Time { return t0 }},
		slog.New(slog.NewTextHandler(io.Discard, nil)), s, signer, pacer)
	if err != nil {
		t.Fatal(err)
	}
	return h, s, signer
}

// eventValue is a valid event of id with extra fields.
func eventValue(id string, extra map[string]any) []byte {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	m := map[string]any{"id": id, "payload": "hello",
		"subscription": map[string]any{"endpoint": "https://fcm.googleapis.com/fcm/send/" + id,
			"keys": map[string]any{"p256dh": base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()), "auth": base64.RawURLEncoding.EncodeToString(auth)}}}
	for k, v := range extra {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return b
}

func tierIn(value []byte) In {
	return In{Record: &kgo.Record{Topic: "push.tier1", Value: value, Timestamp: t0}, Source: topology.Source{Tier: tiers.Tier1}, Received: t0}
}

func topics(d *Delivery) []string {
	var out []string
	for _, r := range d.Records {
		out = append(out, r.Topic)
	}
	return out
}

func TestHandleRoutes(t *testing.T) {
	tests := []struct {
		name    string
		res     push.Result
		value   []byte
		want    []string
		reasons []topology.Reason
		sends   int
	}{
		{"delivered", push.Result{Class: push.Delivered, Status: 201}, eventValue("a", nil), []string{"push.outcomes"}, nil, 1},
		{"retryable", push.Result{Class: push.Retryable, Status: 503}, eventValue("b", nil), []string{"push.tier1.retry-2s"}, nil, 1},
		{"gone", push.Result{Class: push.Gone, Status: 410}, eventValue("c", nil), []string{"push.gone", "push.outcomes"}, nil, 1},
		{"rejected", push.Result{Class: push.Rejected, Status: 400}, eventValue("d", nil), []string{"push.dlq", "push.outcomes"}, []topology.Reason{topology.ReasonRejected}, 1},
		{"invalid event with an id", push.Result{}, []byte(`{"id":"e"}`), []string{"push.dlq", "push.outcomes"}, []topology.Reason{topology.ReasonInvalidEvent}, 0},
		{"not json", push.Result{}, []byte(`}{`), []string{"push.dlq"}, []topology.Reason{topology.ReasonInvalidEvent}, 0},
		{"ttl 0 retryable expires", push.Result{Class: push.Retryable, Status: 503}, eventValue("f", map[string]any{"ttl": 0}), []string{"push.dlq", "push.outcomes"}, []topology.Reason{topology.ReasonTTLExpired}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, s, _ := newHandler(t, tt.res)
			d := h.Handle(context.Background(), tierIn(tt.value))
			if d == nil {
				t.Fatal("nil delivery")
			}
			if got := topics(d); !slices.Equal(got, tt.want) {
				t.Errorf("produces %v, want %v", got, tt.want)
			}
			if !slices.Equal(d.Report.Dead, tt.reasons) {
				t.Errorf("dead reasons %v, want %v", d.Report.Dead, tt.reasons)
			}
			if s.sends != tt.sends {
				t.Errorf("%d sends, want %d", s.sends, tt.sends)
			}
		})
	}
}

// A record whose partition is handed back while it waits for the pacer is
// abandoned: nothing sent, nothing produced, so the next owner sends it.
func TestHandleAbandoned(t *testing.T) {
	h, s, _ := newHandler(t, push.Result{Class: push.Delivered, Status: 201})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := h.Handle(ctx, tierIn(eventValue("a", nil))); d != nil {
		t.Fatalf("handed back: produces %v, want nothing", topics(d))
	}
	if s.sends != 0 {
		t.Fatalf("handed back: %d sends", s.sends)
	}
}

// A retry record is verified before anything else: a forged one goes to
// the DLQ unsent, with no outcome (its id cannot be trusted); a signed one
// carries its attempts on.
func TestHandleRetryRecords(t *testing.T) {
	h, s, signer := newHandler(t, push.Result{Class: push.Delivered, Status: 201})
	topic := "push.tier1.retry-2s"
	v := eventValue("r", nil)
	meta := topology.Meta{Attempt: 1, Due: t0, FirstSeen: t0.Add(-2 * time.Second), Origin: "push.tier1/0/7", Status: 503}
	hs := meta.Headers(nil)
	hs = append(hs, kgo.RecordHeader{Key: topology.HeaderSig, Value: []byte(signer.Sign(topic, hs, v, t0.Add(time.Hour)))})
	in := In{Record: &kgo.Record{Topic: topic, Value: v, Headers: hs, Timestamp: t0}, Source: topology.Source{Tier: tiers.Tier1, Retry: true, Delay: 2 * time.Second}, Received: t0, Due: t0}

	d := h.Handle(context.Background(), in)
	if got := topics(d); !slices.Equal(got, []string{"push.outcomes"}) || s.sends != 1 {
		t.Fatalf("signed retry: produces %v after %d sends", got, s.sends)
	}
	var o topology.OutcomeRecord
	if err := json.Unmarshal(d.Records[0].Value, &o); err != nil || o.Attempts != 2 || o.FirstSeen != meta.FirstSeen.UnixMilli() {
		t.Fatalf("outcome %+v (%v), want attempts 2 and the first send's time", o, err)
	}

	forged := *in.Record
	forged.Value = eventValue("other", nil)
	in.Record = &forged
	d = h.Handle(context.Background(), in)
	if got := topics(d); !slices.Equal(got, []string{"push.dlq"}) || d.Report.Dead[0] != topology.ReasonBadSignature || s.sends != 1 {
		t.Fatalf("forged retry: produces %v, dead %v, %d sends", got, d.Report.Dead, s.sends)
	}
}

// A retry record says in push-error what its last attempt met, as
// push-status does: a status, a timeout, a refused dial. A deferral made no
// attempt and carries the previous cause on. The header is signed with the
// others.
func TestRetryRecordSaysWhy(t *testing.T) {
	errorOf := func(r *kgo.Record) string {
		for _, h := range r.Headers {
			if h.Key == topology.HeaderError {
				return string(h.Value)
			}
		}
		return ""
	}
	for _, res := range []push.Result{
		{Class: push.Retryable, Status: 503, Err: "push service answered 503"},
		{Class: push.Retryable, Err: "timeout"},
		{Class: push.Retryable, Err: "connection error: dial"},
	} {
		h, _, signer := newHandler(t, res)
		d := h.Handle(context.Background(), tierIn(eventValue("why", nil)))
		if got := topics(d); !slices.Equal(got, []string{"push.tier1.retry-2s"}) {
			t.Fatalf("%+v: produces %v", res, got)
		}
		r := d.Records[0]
		if got := errorOf(r); got != res.Err {
			t.Errorf("%+v: push-error %q, want %q", res, got, res.Err)
		}
		if err := signer.Verify(r, t0); err != nil {
			t.Errorf("%+v: %v", res, err)
		}
	}

	// A Retry-After hop: no send, the cause of the attempt before it.
	h, s, signer := newHandler(t, push.Result{Class: push.Delivered, Status: 201})
	topic := "push.tier1.retry-60s"
	v := eventValue("hop", nil)
	meta := topology.Meta{Attempt: 1, Due: t0, NotBefore: t0.Add(5 * time.Minute), FirstSeen: t0.Add(-time.Minute),
		Origin: "push.tier1/0/9", Status: 0, Error: "timeout"}
	hs := meta.Headers(nil)
	hs = append(hs, kgo.RecordHeader{Key: topology.HeaderSig, Value: []byte(signer.Sign(topic, hs, v, t0.Add(time.Hour)))})
	in := In{Record: &kgo.Record{Topic: topic, Value: v, Headers: hs, Timestamp: t0.Add(-time.Minute)},
		Source: topology.Source{Tier: tiers.Tier1, Retry: true, Delay: time.Minute}, Received: t0, Due: t0}
	d := h.Handle(context.Background(), in)
	if got := topics(d); !slices.Equal(got, []string{topic}) || s.sends != 0 {
		t.Fatalf("hop: produces %v after %d sends", got, s.sends)
	}
	if got := errorOf(d.Records[0]); got != "timeout" {
		t.Errorf("hop: push-error %q, want the last attempt's %q", got, "timeout")
	}
}

// The hooks see a record only when Acked is called.
func TestHooksAfterAck(t *testing.T) {
	h, _, _ := newHandler(t, push.Result{Class: push.Delivered, Status: 201})
	var stats Stats
	h.hooks = &stats
	d := h.Handle(context.Background(), tierIn(eventValue("a", nil)))
	if got := stats.Snapshot(); got.Delivered != 0 || len(got.Origins) != 0 {
		t.Fatalf("counted before the ack: %+v", got)
	}
	d.Acked()
	if got := stats.Snapshot(); got.Delivered != 1 || got.Origins["https://fcm.googleapis.com"].Sends != 1 {
		t.Fatalf("after the ack: %+v", got)
	}
}

func TestDeadRecordDropsOversize(t *testing.T) {
	r := &kgo.Record{Key: make([]byte, maxKeyLen+1), Value: make([]byte, event.MaxEventSize+1)}
	d := deadRecord("push.dlq", r, topology.Meta{FirstSeen: t0}, topology.ReasonInvalidEvent, "too big")
	if d.Key != nil || d.Value != nil {
		t.Fatalf("an oversized key or value was copied to the DLQ: key %d value %d bytes", len(d.Key), len(d.Value))
	}
	m, err := topology.DecodeMeta(d.Headers)
	if err != nil || m.Reason != topology.ReasonInvalidEvent || m.Error != "too big" {
		t.Fatalf("headers %+v (%v)", m, err)
	}
}

// An event's app picks its identity: one the sender has none for ends at
// once as unknown_app, unsent, on a first send or a retry; a 401/403 ends
// as vapid_rejected and is counted for its app; the outcome names the app.
func TestHandleApps(t *testing.T) {
	tests := []struct {
		name     string
		res      push.Result
		app      any // the event's app field; nil leaves it out
		want     []string
		reason   topology.Reason
		wantApp  string // the outcome's app
		sends    int
		rejected map[string]int64 // Stats' VAPIDRejected by app after the ack
		errHas   string           // in push-error
	}{
		{"default identity", push.Result{Class: push.Delivered, Status: 201}, nil, []string{"push.outcomes"}, topology.ReasonDelivered, "", 1, nil, ""},
		{"named default", push.Result{Class: push.Delivered, Status: 201}, "default", []string{"push.outcomes"}, topology.ReasonDelivered, "", 1, nil, ""},
		{"known app", push.Result{Class: push.Delivered, Status: 201}, "shop", []string{"push.outcomes"}, topology.ReasonDelivered, "shop", 1, nil, ""},
		{"unknown app", push.Result{Class: push.Delivered, Status: 201}, "blog", []string{"push.dlq", "push.outcomes"}, topology.ReasonUnknownApp, "blog", 0, nil, `app "blog" has no VAPID identity`},
		{"bad app name", push.Result{Class: push.Delivered, Status: 201}, "blog/x", []string{"push.dlq", "push.outcomes"}, topology.ReasonInvalidEvent, "", 0, nil, "app:"},
		{"403 for an app", push.Result{Class: push.VAPIDRejected, Status: 403, Err: "push service answered 403"}, "news", []string{"push.dlq", "push.outcomes"}, topology.ReasonVAPIDRejected, "news", 1, map[string]int64{"news": 1}, "403"},
		{"401 for the default", push.Result{Class: push.VAPIDRejected, Status: 401, Err: "push service answered 401"}, nil, []string{"push.dlq", "push.outcomes"}, topology.ReasonVAPIDRejected, "", 1, map[string]int64{"default": 1}, "401"},
		{"400 is no key mismatch", push.Result{Class: push.Rejected, Status: 400, Err: "push service answered 400"}, "shop", []string{"push.dlq", "push.outcomes"}, topology.ReasonRejected, "shop", 1, nil, "400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, s, _ := newHandler(t, tt.res)
			var stats Stats
			h.hooks = &stats
			extra := map[string]any{}
			if tt.app != nil {
				extra["app"] = tt.app
			}
			d := h.Handle(context.Background(), tierIn(eventValue("e", extra)))
			if got := topics(d); !slices.Equal(got, tt.want) {
				t.Fatalf("produces %v, want %v", got, tt.want)
			}
			if s.sends != tt.sends {
				t.Errorf("%d sends, want %d", s.sends, tt.sends)
			}
			var o topology.OutcomeRecord
			if err := json.Unmarshal(d.Records[len(d.Records)-1].Value, &o); err != nil {
				t.Fatal(err)
			}
			if o.Reason != string(tt.reason) || o.App != tt.wantApp {
				t.Errorf("outcome reason %q app %q, want %q and %q", o.Reason, o.App, tt.reason, tt.wantApp)
			}
			if tt.want[0] == "push.dlq" {
				m, err := topology.DecodeMeta(d.Records[0].Headers)
				if err != nil || m.Reason != tt.reason || !strings.Contains(m.Error, tt.errHas) {
					t.Errorf("DLQ headers %+v (%v), want reason %q and an error holding %q", m, err, tt.reason, tt.errHas)
				}
			}
			d.Acked()
			snap := stats.Snapshot()
			for app, a := range snap.Apps {
				if a.VAPIDRejected != tt.rejected[app] {
					t.Errorf("app %q counted %d VAPID refusals, want %d", app, a.VAPIDRejected, tt.rejected[app])
				}
			}
			for app, n := range tt.rejected {
				if snap.Apps[app].VAPIDRejected != n {
					t.Errorf("app %q counted %d VAPID refusals, want %d", app, snap.Apps[app].VAPIDRejected, n)
				}
			}
		})
	}
}

// A retry record of an app whose identity was dropped meanwhile ends as
// unknown_app, unsent, its attempts kept.
func TestHandleRetryOfUnknownApp(t *testing.T) {
	h, s, signer := newHandler(t, push.Result{Class: push.Delivered, Status: 201})
	topic := "push.tier2.retry-8s"
	v := eventValue("r", map[string]any{"app": "shop-2025"})
	meta := topology.Meta{Attempt: 2, Due: t0, FirstSeen: t0.Add(-10 * time.Second), Origin: "push.tier2/0/7", Status: 503}
	hs := meta.Headers(nil)
	hs = append(hs, kgo.RecordHeader{Key: topology.HeaderSig, Value: []byte(signer.Sign(topic, hs, v, t0.Add(time.Hour)))})
	in := In{Record: &kgo.Record{Topic: topic, Value: v, Headers: hs, Timestamp: t0},
		Source: topology.Source{Tier: tiers.Tier2, Retry: true, Delay: 8 * time.Second}, Received: t0, Due: t0}
	d := h.Handle(context.Background(), in)
	if got := topics(d); !slices.Equal(got, []string{"push.dlq", "push.outcomes"}) || s.sends != 0 {
		t.Fatalf("produces %v after %d sends, want DLQ and outcome unsent", got, s.sends)
	}
	if !bytes.Equal(d.Records[0].Value, v) {
		t.Error("the DLQ record does not hold the event intact (its app with it)")
	}
	var o topology.OutcomeRecord
	if err := json.Unmarshal(d.Records[1].Value, &o); err != nil || o.Reason != string(topology.ReasonUnknownApp) || o.Attempts != 2 || o.App != "shop-2025" || o.Status != 503 {
		t.Fatalf("outcome %+v (%v), want unknown_app after 2 attempts, app shop-2025, last status 503", o, err)
	}
}

// Without a default identity, an event without app ends unknown_app,
// unsent, and push-error says what is missing.
func TestHandleNoDefaultIdentity(t *testing.T) {
	h, s, _ := newHandler(t, push.Result{Class: push.Delivered, Status: 201})
	s.noDefault = true
	d := h.Handle(context.Background(), tierIn(eventValue("n", nil)))
	if got := topics(d); !slices.Equal(got, []string{"push.dlq", "push.outcomes"}) || s.sends != 0 {
		t.Fatalf("produces %v after %d sends, want DLQ and outcome unsent", got, s.sends)
	}
	m, err := topology.DecodeMeta(d.Records[0].Headers)
	if err != nil || m.Reason != topology.ReasonUnknownApp || !strings.Contains(m.Error, "no default VAPID identity") {
		t.Errorf("DLQ headers %+v (%v), want unknown_app saying there is no default identity", m, err)
	}
	d = h.Handle(context.Background(), tierIn(eventValue("s", map[string]any{"app": "shop"})))
	if got := topics(d); !slices.Equal(got, []string{"push.outcomes"}) || s.sends != 1 {
		t.Errorf("an app's event: produces %v after %d sends, want delivered", got, s.sends)
	}
}

// BenchmarkHandle is one event through the chain, decode to the outcome
// record, with a sender that answers 201 at once.
func BenchmarkHandle(b *testing.B) {
	h, _, _ := newHandler(b, push.Result{Class: push.Delivered, Status: 201})
	in := tierIn(eventValue("evt-1", nil))
	b.ReportAllocs()
	for b.Loop() {
		d := h.Handle(context.Background(), in)
		if len(d.Records) != 1 {
			b.Fatalf("records %v", topics(d))
		}
	}
}
