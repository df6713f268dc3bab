package pipeline_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// TestVAPIDApps: two apps and the default identity, interleaved on every
// tier, some through a retry step (503 once, 429 with Retry-After once):
// every push is signed with its own app's key, its JWT verifies under that
// key and under no other, and the retry records carry the app on. An event
// of an app without an identity goes to the DLQ as unknown_app with
// nothing sent; an event naming another app than its subscription's key
// ends vapid_rejected after the push service's 403, counted for that app.
func TestVAPIDApps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 2, Apps: []string{"shop", "news"}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()

		// The identities by app name, "" for the default one.
		keys := map[string]string{"": env.VAPID.PublicKey, "shop": env.Apps["shop"].PublicKey, "news": env.Apps["news"].PublicKey}
		scripts := map[string][]pushsim.Response{
			"at once":   nil,
			"503 once":  {{Status: 503}},
			"429 once":  {{Status: 429, RetryAfter: "1"}},
			"503 twice": {{Status: 503}, {Status: 503}},
		}
		type sent struct {
			app      string // "" for the default identity
			sub      pushsim.Subscription
			attempts int
		}
		events := make(map[string]sent)
		subApp := make(map[string]string) // subscription id → the app whose key it was made with
		var recs []*kgo.Record
		// Interleaved: each tier in turn, each identity in turn.
		for _, script := range []string{"at once", "503 once", "429 once", "503 twice"} {
			for _, tier := range tiers.All {
				for _, app := range []string{"", "shop", "news"} {
					sub := env.Sim.SubscribeWithKey(keys[app], scripts[script]...)
					subApp[sub.ID] = app
					id := fmt.Sprintf("%s/%s/%s", event.AppName(app), tier, strings.ReplaceAll(script, " ", "-"))
					var extra map[string]any
					if app != "" {
						extra = map[string]any{"app": app}
					}
					events[id] = sent{app: app, sub: sub, attempts: len(scripts[script]) + 1}
					recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tier), Key: []byte(sub.ID), Value: testenv.Event(id, sub, "to "+id, extra)})
				}
			}
		}
		// The default identity named, which is the same as none.
		named := env.Sim.SubscribeWithKey(keys[""])
		subApp[named.ID] = ""
		events["named-default"] = sent{app: "", sub: named, attempts: 1}
		recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.Tier2), Key: []byte(named.ID),
			Value: testenv.Event("named-default", named, "x", map[string]any{"app": event.DefaultApp})})
		// An app nobody configured, and an app whose key is not the one
		// the subscription was made with.
		unknownSub := env.Sim.SubscribeWithKey(keys["shop"])
		mismatchSub := env.Sim.SubscribeWithKey(keys["shop"], pushsim.Response{Status: 503})
		recs = append(recs,
			&kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte("unknown"), Value: testenv.Event("unknown", unknownSub, "x", map[string]any{"app": "blog"})},
			&kgo.Record{Topic: env.Names.Tier(tiers.Tier3), Key: []byte("mismatch"), Value: testenv.Event("mismatch", mismatchSub, "x", map[string]any{"app": "news"})},
		)
		env.Produce(ctx, recs...)

		got, err := env.ReadOutcomes(ctx, len(events)+2)
		if err != nil {
			t.Fatal(err)
		}
		for id, s := range events {
			o := got[id]
			if len(o) != 1 || o[0].Outcome != "delivered" || o[0].Attempts != s.attempts || o[0].App != s.app {
				t.Errorf("%s: outcomes %+v, want one delivered after %d attempts naming app %q", id, o, s.attempts, s.app)
			}
		}
		if o := got["unknown"]; len(o) != 1 || o[0].Outcome != "dead" || o[0].Reason != string(topology.ReasonUnknownApp) || o[0].App != "blog" || o[0].Attempts != 0 {
			t.Errorf("unknown app: outcomes %+v, want one dead unknown_app, app blog, no attempt", o)
		}
		if o := got["mismatch"]; len(o) != 1 || o[0].Outcome != "dead" || o[0].Reason != string(topology.ReasonVAPIDRejected) || o[0].App != "news" || o[0].Status != 403 || o[0].Attempts != 1 {
			t.Errorf("mismatched key: outcomes %+v, want one dead vapid_rejected, app news, status 403 after 1 attempt", o)
		}

		// Every push: its own app's key, a JWT that verifies under it and
		// under no other identity's key.
		pubs := make(map[string]*ecdsa.PublicKey)
		for app, k := range keys {
			pubs[app] = parsePub(t, k)
		}
		perApp := make(map[string]int)
		for _, d := range env.Sim.Deliveries() {
			switch d.SubID {
			case unknownSub.ID:
				t.Errorf("the event of an app without an identity was sent")
				continue
			case mismatchSub.ID:
				if d.Status != 403 || d.VAPIDKey != keys["news"] {
					t.Errorf("mismatched push: status %d, key %.8s…, want 403 to news' key", d.Status, d.VAPIDKey)
				}
				continue
			}
			app, ok := subApp[d.SubID]
			if !ok {
				t.Errorf("push to an unknown subscription %s", d.SubID)
				continue
			}
			perApp[app]++
			if d.VAPIDKey != keys[app] || !d.Verified || d.Status == 403 {
				t.Errorf("push for app %q: key %.8s… verified %v status %d, want its own key %.8s…, verified", app, d.VAPIDKey, d.Verified, d.Status, keys[app])
			}
			for other, pub := range pubs {
				_, err := jwt.Parse(d.JWT, func(*jwt.Token) (any, error) { return pub, nil },
					jwt.WithValidMethods([]string{"ES256"}), jwt.WithoutClaimsValidation())
				if verifies := err == nil; verifies != (other == app) {
					t.Errorf("push for app %q: JWT verifies under %q's key: %v", app, event.AppName(other), verifies)
				}
			}
		}
		// Per identity and tier: 1 + 2 + 2 + 3 pushes (at once, 503 once,
		// 429 once, 503 twice), 24 over the three tiers; the default has
		// the named-default event's too.
		for app, want := range map[string]int{"": 24 + 1, "shop": 24, "news": 24} {
			if perApp[app] != want {
				t.Errorf("app %q: %d pushes, want %d", app, perApp[app], want)
			}
		}

		dlq, err := env.ReadRecords(ctx, env.Names.DLQ(), 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range dlq {
			m, err := topology.DecodeMeta(r.Headers)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := event.Decode(r.Value, r.Timestamp, event.DefaultRules())
			if err != nil {
				t.Fatalf("DLQ record %q: the event is not intact: %v", r.Key, err)
			}
			switch string(r.Key) {
			case "unknown":
				if m.Reason != topology.ReasonUnknownApp || m.Attempt != 0 || !strings.Contains(m.Error, `"blog"`) || ev.App != "blog" {
					t.Errorf("unknown app DLQ record: %+v, app %q", m, ev.App)
				}
			case "mismatch":
				if m.Reason != topology.ReasonVAPIDRejected || m.Status != 403 || m.Attempt != 1 || ev.App != "news" {
					t.Errorf("mismatched key DLQ record: %+v, app %q", m, ev.App)
				}
			default:
				t.Errorf("unexpected DLQ record %q", r.Key)
			}
			for _, k := range []string{env.VAPID.PrivateKey, env.Apps["shop"].PrivateKey, env.Apps["news"].PrivateKey} {
				if strings.Contains(m.Error, k) {
					t.Errorf("push-error holds a private key")
				}
			}
		}
		apps := env.Processor().Stats().Snapshot().Apps
		if apps["news"].VAPIDRejected != 1 || apps["shop"].VAPIDRejected != 0 || apps[event.DefaultApp].VAPIDRejected != 0 {
			t.Errorf("VAPID refusals by app %+v, want news 1", apps)
		}

		// A retry record holds the event as produced: its app travels on.
		// The mismatched event may pass through a step too, without a
		// send, when the pacer pauses the origin on the 429s.
		appOf := map[string]string{"mismatch": "news"}
		for id, s := range events {
			appOf[id] = s.app
		}
		retried, err := env.ReadRecords(ctx, env.Names.Retry(tiers.Tier3, 8*time.Second), 1)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range retried {
			ev, err := event.Decode(r.Value, r.Timestamp, event.DefaultRules())
			if err != nil {
				t.Fatal(err)
			}
			if app, ok := appOf[ev.ID]; !ok || ev.App != app {
				t.Errorf("retry record of %s names app %q, want %q", ev.ID, ev.App, app)
			}
		}
	})
}

// parsePub reads a base64url uncompressed P-256 point.
func parsePub(t *testing.T, k string) *ecdsa.PublicKey {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(k, "="))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), b)
	if err != nil {
		t.Fatal(err)
	}
	return pub
}
