package dlq

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

var names = topology.Names{Prefix: topology.DefaultPrefix}

var t0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// dead is a DLQ record as the pipeline writes it: the event intact, the
// routing headers and a traceparent.
type dead struct {
	id, endpoint string
	source       string // push-origin
	reason       topology.Reason
	status       int
	attempt      int
	redrives     int
	at           time.Time
	app          any // the event's app field; nil leaves it out
}

func (d dead) record() *kgo.Record {
	ev := map[string]any{
		"id": d.id,
		"subscription": map[string]any{"endpoint": d.endpoint, "keys": map[string]string{
			"p256dh": "BNcRdreALRFXTkOOUHK1EtK2wtaz5Ry4YfYCA_0QTpQtUbVlUls0VJXg7A8u-Ts1XbjhazAkj7I99e8QcYP7DkM",
			"auth":   "tBHItJI5svbpez7KI4CCXg",
		}},
		"payload": "hello",
	}
	if d.app != nil {
		ev["app"] = d.app
	}
	v, err := json.Marshal(ev)
	if err != nil {
		panic(err)
	}
	m := topology.Meta{Attempt: d.attempt, FirstSeen: d.at.Add(-time.Minute), Origin: d.source,
		Status: d.status, Reason: d.reason, Error: "HTTP " + strconv.Itoa(d.status), RedriveCount: d.redrives}
	hs := m.Headers(nil)
	hs = append(hs, kgo.RecordHeader{Key: topology.HeaderTraceparent, Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
	return &kgo.Record{Topic: names.DLQ(), Key: []byte("key-" + d.id), Value: v, Headers: hs, Timestamp: d.at}
}

func TestInspect(t *testing.T) {
	tests := []struct {
		name       string
		rec        *kgo.Record
		wantID     string
		wantOrigin string
		wantTier   tiers.Tier
		wantSource string
		wantApp    string
		wantErr    bool
	}{
		{
			name:       "an app's event",
			rec:        dead{id: "s", endpoint: "https://fcm.googleapis.com/fcm/send/x", source: "push.tier1/0/1", reason: "vapid_rejected", status: 403, at: t0, app: "shop-2027"}.record(),
			wantID:     "s",
			wantOrigin: "https://fcm.googleapis.com",
			wantTier:   tiers.Tier1,
			wantSource: "push.tier1/0/1",
			wantApp:    "shop-2027",
		},
		{
			name:       "the default identity named",
			rec:        dead{id: "s", endpoint: "https://fcm.googleapis.com/fcm/send/x", source: "push.tier1/0/1", at: t0, app: "default"}.record(),
			wantID:     "s",
			wantOrigin: "https://fcm.googleapis.com",
			wantTier:   tiers.Tier1,
			wantSource: "push.tier1/0/1",
		},
		{
			name:       "refused event keeps a valid app",
			rec:        &kgo.Record{Value: []byte(`{"id":"u","app":"blog","subscription":{"endpoint":"https://fcm.googleapis.com/x"}}`), Headers: []kgo.RecordHeader{{Key: "push-origin", Value: []byte("push.tier2/0/1")}}},
			wantID:     "u",
			wantOrigin: "https://fcm.googleapis.com",
			wantTier:   tiers.Tier2,
			wantSource: "push.tier2/0/1",
			wantApp:    "blog",
		},
		{
			name:       "refused event drops an invalid app",
			rec:        &kgo.Record{Value: []byte(`{"id":"u","app":"\u001b[31m","subscription":{"endpoint":"https://fcm.googleapis.com/x"}}`), Headers: []kgo.RecordHeader{{Key: "push-origin", Value: []byte("push.tier2/0/1")}}},
			wantID:     "u",
			wantOrigin: "https://fcm.googleapis.com",
			wantTier:   tiers.Tier2,
			wantSource: "push.tier2/0/1",
		},
		{
			name:       "tier topic",
			rec:        dead{id: "a", endpoint: "https://FCM.googleapis.com:443/fcm/send/x", source: "push.tier2/3/17", reason: "rejected", status: 400, at: t0}.record(),
			wantID:     "a",
			wantOrigin: "https://fcm.googleapis.com",
			wantTier:   tiers.Tier2,
			wantSource: "push.tier2/3/17",
		},
		{
			name:       "retry topic maps to its tier",
			rec:        dead{id: "b", endpoint: "https://updates.push.services.mozilla.com/wpush/v2/x", source: "push.tier3.retry-60s/0/5", reason: "max_attempts", at: t0}.record(),
			wantID:     "b",
			wantOrigin: "https://updates.push.services.mozilla.com",
			wantTier:   tiers.Tier3,
			wantSource: "push.tier3.retry-60s/0/5",
		},
		{
			name:       "custom ladder step still names its tier",
			rec:        dead{id: "c", endpoint: "https://web.push.apple.com/x", source: "push.tier1.retry-1m30s/0/5", at: t0}.record(),
			wantID:     "c",
			wantOrigin: "https://web.push.apple.com",
			wantTier:   tiers.Tier1,
			wantSource: "push.tier1.retry-1m30s/0/5",
		},
		{
			name:       "garbled push-origin: no tier",
			rec:        dead{id: "d", endpoint: "https://web.push.apple.com/x", source: "push.tier1", at: t0}.record(),
			wantID:     "d",
			wantOrigin: "https://web.push.apple.com",
		},
		{
			name:       "refused event still gives id and origin",
			rec:        &kgo.Record{Value: []byte(`{"id":42,"subscription":{"endpoint":"http://10.0.0.1:8080/x"}}`), Headers: []kgo.RecordHeader{{Key: "push-origin", Value: []byte("push.tier1/0/1")}}},
			wantID:     "42",
			wantOrigin: "http://10.0.0.1:8080",
			wantTier:   tiers.Tier1,
			wantSource: "push.tier1/0/1",
		},
		{
			name:    "not JSON, bad header",
			rec:     &kgo.Record{Value: []byte("\x00garbage"), Headers: []kgo.RecordHeader{{Key: "push-attempt", Value: []byte("many")}}},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Inspect(tt.rec, names)
			if got.EventID != tt.wantID || got.Origin != tt.wantOrigin || got.Tier != tt.wantTier || got.Source.String() != tt.wantSource || got.App != tt.wantApp {
				t.Errorf("got id %q origin %q tier %v source %q app %q, want %q %q %v %q %q",
					got.EventID, got.Origin, got.Tier, got.Source, got.App, tt.wantID, tt.wantOrigin, tt.wantTier, tt.wantSource, tt.wantApp)
			}
			if (got.HeaderErr != nil) != tt.wantErr {
				t.Errorf("HeaderErr = %v, want error: %v", got.HeaderErr, tt.wantErr)
			}
		})
	}
}

func TestFilterMatch(t *testing.T) {
	fcm := Inspect(dead{id: "fcm", endpoint: "https://fcm.googleapis.com/fcm/send/x", source: "push.tier1.retry-8s/0/1",
		reason: topology.ReasonMaxAttempts, status: 503, at: t0}.record(), names)
	moz := Inspect(dead{id: "moz", endpoint: "https://updates.push.services.mozilla.com:8443/wpush/x", source: "push.tier3/1/2",
		reason: topology.ReasonRejected, status: 400, at: t0.Add(time.Hour), app: "shop"}.record(), names)
	tests := []struct {
		name    string
		f       Filter
		wantFCM bool
		wantMoz bool
	}{
		{"zero filter matches all", Filter{}, true, true},
		{"reason", Filter{Reasons: []topology.Reason{topology.ReasonRejected}}, false, true},
		{"reasons or", Filter{Reasons: []topology.Reason{topology.ReasonRejected, topology.ReasonMaxAttempts}}, true, true},
		{"reason none", Filter{Reasons: []topology.Reason{topology.ReasonTTLExpired}}, false, false},
		{"status", Filter{Statuses: []int{503}}, true, false},
		{"status 0 means none", Filter{Statuses: []int{0}}, false, false},
		{"tier from retry topic", Filter{Tiers: []tiers.Tier{tiers.Tier1}}, true, false},
		{"tier3", Filter{Tiers: []tiers.Tier{tiers.Tier3}}, false, true},
		{"origin exact", Filter{Origins: []string{"https://fcm.googleapis.com"}}, true, false},
		{"origin with port", Filter{Origins: []string{"https://updates.push.services.mozilla.com:8443"}}, false, true},
		{"origin wrong port", Filter{Origins: []string{"https://updates.push.services.mozilla.com"}}, false, false},
		{"bare host any port", Filter{Origins: []string{"updates.push.services.mozilla.com"}}, false, true},
		{"bare host", Filter{Origins: []string{"fcm.googleapis.com"}}, true, false},
		{"since inclusive", Filter{Since: t0.Add(time.Hour)}, false, true},
		{"until exclusive", Filter{Until: t0.Add(time.Hour)}, true, false},
		{"range", Filter{Since: t0.Add(-time.Minute), Until: t0.Add(time.Minute)}, true, false},
		{"empty range", Filter{Since: t0.Add(time.Minute), Until: t0.Add(2 * time.Minute)}, false, false},
		{"combined and", Filter{Reasons: []topology.Reason{topology.ReasonRejected}, Statuses: []int{400}, Tiers: []tiers.Tier{tiers.Tier3}}, false, true},
		{"combined one field fails", Filter{Reasons: []topology.Reason{topology.ReasonRejected}, Statuses: []int{503}}, false, false},
		{"app", Filter{Apps: []string{"shop"}}, false, true},
		{"default app is no app", Filter{Apps: []string{"default"}}, true, false},
		{"apps or", Filter{Apps: []string{"news", "default", "shop"}}, true, true},
		{"app none", Filter{Apps: []string{"news"}}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.f.Match(fcm); got != tt.wantFCM {
				t.Errorf("Match(fcm) = %v, want %v", got, tt.wantFCM)
			}
			if got := tt.f.Match(moz); got != tt.wantMoz {
				t.Errorf("Match(moz) = %v, want %v", got, tt.wantMoz)
			}
		})
	}
	noOrigin := Inspect(&kgo.Record{Value: []byte("{}")}, names)
	if f := (Filter{Origins: []string{"fcm.googleapis.com"}}); f.Match(noOrigin) {
		t.Error("an origin filter matched a record without an origin")
	}
}

func TestPlan(t *testing.T) {
	base := dead{id: "e", endpoint: "https://fcm.googleapis.com/x", source: "push.tier2.retry-2s/0/9", reason: topology.ReasonMaxAttempts, status: 503, at: t0}
	with := func(f func(*dead)) *Record {
		d := base
		f(&d)
		return Inspect(d.record(), names)
	}
	badCount := Inspect(base.record(), names)
	badCount.Raw.Headers = append(badCount.Raw.Headers, kgo.RecordHeader{Key: topology.HeaderRedriveCount, Value: []byte("-1")})
	badCount = Inspect(badCount.Raw, names)
	tests := []struct {
		name  string
		r     *Record
		f     Filter
		o     Options
		want  Decision
		wantN string
	}{
		{"redriven", with(func(*dead) {}), Filter{}, Options{}, Decision{Topic: "push.tier2", Count: 1}, ""},
		{"count increments", with(func(d *dead) { d.redrives = 2 }), Filter{}, Options{}, Decision{Topic: "push.tier2", Count: 3}, ""},
		{"loop guard at max", with(func(d *dead) { d.redrives = 3 }), Filter{}, Options{}, Decision{Skip: SkipLoopGuard}, ""},
		{"loop guard custom max", with(func(d *dead) { d.redrives = 1 }), Filter{}, Options{MaxRedrives: 1}, Decision{Skip: SkipLoopGuard}, ""},
		{"filtered", with(func(*dead) {}), Filter{Statuses: []int{429}}, Options{}, Decision{Skip: SkipFiltered}, ""},
		{"bad signature refused", with(func(d *dead) { d.reason = topology.ReasonBadSignature }), Filter{}, Options{}, Decision{Skip: SkipBadSignature}, ""},
		{"bad signature allowed", with(func(d *dead) { d.reason = topology.ReasonBadSignature }), Filter{}, Options{IncludeBadSignature: true}, Decision{Topic: "push.tier2", Count: 1}, ""},
		{"no tier", with(func(d *dead) { d.source = "" }), Filter{}, Options{}, Decision{Skip: SkipNoTier}, ""},
		{"unreadable count", badCount, Filter{}, Options{}, Decision{Skip: SkipBadCount}, ""},
		{"invalid event would fail", with(func(d *dead) { d.reason = topology.ReasonInvalidEvent }), Filter{}, Options{}, Decision{Skip: SkipWouldFail}, ""},
		{"blocked endpoint would fail", with(func(d *dead) { d.reason = topology.ReasonEndpointBlocked }), Filter{}, Options{}, Decision{Skip: SkipWouldFail}, ""},
		{"too large would fail", with(func(d *dead) { d.reason = topology.ReasonPayloadTooLarge }), Filter{}, Options{}, Decision{Skip: SkipWouldFail}, ""},
		{"rejected would fail", with(func(d *dead) { d.reason = topology.ReasonRejected }), Filter{}, Options{}, Decision{Skip: SkipWouldFail}, ""},
		{"would fail, another reason named", with(func(d *dead) { d.reason = topology.ReasonRejected }), Filter{Reasons: []topology.Reason{topology.ReasonRejected, topology.ReasonMaxAttempts}}, Options{}, Decision{Topic: "push.tier2", Count: 1}, ""},
		{"would fail, its reason not named", with(func(d *dead) { d.reason = topology.ReasonRejected }), Filter{Reasons: []topology.Reason{topology.ReasonInvalidEvent}}, Options{}, Decision{Skip: SkipFiltered}, ""},
		{"ttl expired may succeed", with(func(d *dead) { d.reason = topology.ReasonTTLExpired }), Filter{}, Options{}, Decision{Topic: "push.tier2", Count: 1}, ""},
		{"unknown app may succeed", with(func(d *dead) { d.reason = topology.ReasonUnknownApp }), Filter{}, Options{}, Decision{Topic: "push.tier2", Count: 1}, ""},
		{"vapid rejected may succeed", with(func(d *dead) { d.reason = topology.ReasonVAPIDRejected }), Filter{}, Options{}, Decision{Topic: "push.tier2", Count: 1}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.o.withDefaults()
			if got := Plan(tt.r, &tt.f, names, &o); got != tt.want {
				t.Errorf("Plan = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReplay(t *testing.T) {
	d := dead{id: "r", endpoint: "https://fcm.googleapis.com/x", source: "push.tier1/0/3", reason: topology.ReasonTTLExpired, status: 503, attempt: 4, redrives: 1, at: t0}
	raw := d.record()
	raw.Headers = append(raw.Headers, kgo.RecordHeader{Key: topology.HeaderSig, Value: []byte("sig")}, kgo.RecordHeader{Key: "tracestate", Value: []byte("k=v")})
	rec := Inspect(raw, names)
	got := Replay(rec, Decision{Topic: "push.tier1", Count: 2})
	if got.Topic != "push.tier1" || string(got.Key) != string(raw.Key) || string(got.Value) != string(raw.Value) {
		t.Errorf("Replay changed topic, key or value: %s %q", got.Topic, got.Key)
	}
	want := map[string]string{
		topology.HeaderTraceparent:  "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tracestate":                "k=v",
		topology.HeaderRedriveCount: "2",
	}
	gotHs := make(map[string]string)
	for _, h := range got.Headers {
		if _, dup := gotHs[h.Key]; dup {
			t.Errorf("header %s twice", h.Key)
		}
		gotHs[h.Key] = string(h.Value)
	}
	if len(gotHs) != len(want) {
		t.Errorf("headers %v, want %v", gotHs, want)
	}
	for k, v := range want {
		if gotHs[k] != v {
			t.Errorf("header %s = %q, want %q", k, gotHs[k], v)
		}
	}
	if !got.Timestamp.IsZero() {
		t.Error("Replay kept the DLQ timestamp; the tier topic record must be stamped when produced")
	}
}

func TestParse(t *testing.T) {
	now := t0
	tests := []struct {
		name    string
		parse   func(string) (any, error)
		in      string
		want    any
		wantErr bool
	}{
		{"reason", func(s string) (any, error) { return ParseReason(s) }, "ttl_expired", topology.ReasonTTLExpired, false},
		{"reason not of the dlq", func(s string) (any, error) { return ParseReason(s) }, "delivered", topology.Reason(""), true},
		{"reason typo", func(s string) (any, error) { return ParseReason(s) }, "max_attempt", topology.Reason(""), true},
		{"reason vapid_rejected", func(s string) (any, error) { return ParseReason(s) }, "vapid_rejected", topology.ReasonVAPIDRejected, false},
		{"reason unknown_app", func(s string) (any, error) { return ParseReason(s) }, "unknown_app", topology.ReasonUnknownApp, false},
		{"app", func(s string) (any, error) { return ParseApp(s) }, "shop-2027", "shop-2027", false},
		{"app default", func(s string) (any, error) { return ParseApp(s) }, "default", "default", false},
		{"app with a slash", func(s string) (any, error) { return ParseApp(s) }, "shop/eu", "", true},
		{"app empty", func(s string) (any, error) { return ParseApp(s) }, "", "", true},
		{"status", func(s string) (any, error) { return ParseStatus(s) }, "429", 429, false},
		{"status none", func(s string) (any, error) { return ParseStatus(s) }, "0", 0, false},
		{"status out of range", func(s string) (any, error) { return ParseStatus(s) }, "42", 0, true},
		{"status word", func(s string) (any, error) { return ParseStatus(s) }, "5xx", 0, true},
		{"origin url", func(s string) (any, error) { return ParseServiceOrigin(s) }, "https://FCM.googleapis.com:443/fcm/send", "https://fcm.googleapis.com", false},
		{"origin host", func(s string) (any, error) { return ParseServiceOrigin(s) }, "Web.Push.Apple.com", "web.push.apple.com", false},
		{"origin ftp", func(s string) (any, error) { return ParseServiceOrigin(s) }, "ftp://x", "", true},
		{"origin path only", func(s string) (any, error) { return ParseServiceOrigin(s) }, "a/b", "", true},
		{"time rfc3339", func(s string) (any, error) { return ParseTime(s, now) }, "2026-11-20T12:00:00Z", t0.Add(-24 * time.Hour), false},
		{"time ago", func(s string) (any, error) { return ParseTime(s, now) }, "90m", t0.Add(-90 * time.Minute), false},
		{"time negative", func(s string) (any, error) { return ParseTime(s, now) }, "-1h", time.Time{}, true},
		{"time word", func(s string) (any, error) { return ParseTime(s, now) }, "yesterday", time.Time{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error: %v", err, tt.wantErr)
			}
			if gt, ok := got.(time.Time); ok {
				if !gt.Equal(tt.want.(time.Time)) {
					t.Errorf("got %v, want %v", got, tt.want)
				}
				return
			}
			if got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Options{{Limit: -1}, {Rate: -1}, {MaxRedrives: -1}} {
		if err := o.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", o)
		}
	}
	if err := (&Options{}).Validate(); err != nil {
		t.Errorf("zero Options: %v", err)
	}
}
