package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestDeadLetters: what cannot be sent lands in push.dlq intact, with a
// reason and a readable cause, and nothing is sent for it.
func TestDeadLetters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		sub := env.Sim.Subscribe()
		short := sub
		short.Auth = short.Auth[:16]
		blocked := sub
		blocked.Endpoint = "https://169.254.169.254/latest/meta-data"
		rejected := env.Sim.Subscribe(pushsim.Response{Status: 400})
		tooLarge := env.Sim.Subscribe(pushsim.Response{Status: 413})
		tier := env.Names.Tier(tiers.Tier2)
		forged := &kgo.Record{Topic: env.Names.Retry(tiers.Tier1, 2*time.Second), Value: testenv.Event("forged", sub, "x", nil),
			Headers: []kgo.RecordHeader{{Key: topology.HeaderAttempt, Value: []byte("1")}, {Key: topology.HeaderDue, Value: []byte("0")}}}
		values := map[string][]byte{
			"bad-auth":  testenv.Event("bad-auth", short, "x", nil),
			"blocked":   testenv.Event("blocked", blocked, "x", nil),
			"not-json":  []byte("{not json"),
			"rejected":  testenv.Event("rejected", rejected, "x", nil),
			"too-large": testenv.Event("too-large", tooLarge, "x", nil),
		}
		for _, k := range []string{"bad-auth", "blocked", "not-json", "rejected", "too-large"} {
			env.Produce(ctx, &kgo.Record{Topic: tier, Key: []byte(k), Value: values[k]})
		}
		env.Produce(ctx, forged)
		recs, err := env.ReadRecords(ctx, env.Names.DLQ(), 6)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]struct {
			reason topology.Reason
			cause  string
		}{
			"bad-auth":  {topology.ReasonInvalidEvent, "auth"},
			"blocked":   {topology.ReasonEndpointBlocked, "not public"},
			"not-json":  {topology.ReasonInvalidEvent, ""},
			"rejected":  {topology.ReasonRejected, "400"},
			"too-large": {topology.ReasonPayloadTooLarge, "413"},
			"":          {topology.ReasonBadSignature, "push-sig"},
		}
		for _, r := range recs {
			w, ok := want[string(r.Key)]
			if !ok {
				t.Errorf("unexpected DLQ record key %q", r.Key)
				continue
			}
			if got := topology.Reason(header(r, topology.HeaderReason)); got != w.reason {
				t.Errorf("%q: push-reason %q, want %q", r.Key, got, w.reason)
			}
			if cause := header(r, topology.HeaderError); !strings.Contains(cause, w.cause) || cause == "" {
				t.Errorf("%q: push-error %q, want a cause mentioning %q", r.Key, cause, w.cause)
			}
			if v, ok := values[string(r.Key)]; ok && !bytes.Equal(r.Value, v) {
				t.Errorf("%q: DLQ value %q, want the event intact", r.Key, r.Value)
			}
			// The host may be named; the path is the subscription's secret.
			if strings.Contains(header(r, topology.HeaderError), "meta-data") {
				t.Errorf("%q: push-error leaks the endpoint path", r.Key)
			}
		}
		for _, d := range env.Sim.Deliveries() {
			if d.SubID == sub.ID {
				t.Errorf("sent to %s although every event for it was refused", sub.ID)
			}
		}
	})
}

// TestGone: a 410 publishes one unsubscribe event and tombstones the
// endpoint, so the next event to it ends gone without a send.
func TestGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		sub := env.Sim.Subscribe(pushsim.Response{Status: 410, Repeat: true})
		tier := env.Names.Tier(tiers.Tier1)
		env.Produce(ctx, &kgo.Record{Topic: tier, Value: testenv.Event("first", sub, "x", nil)})
		if _, err := env.ReadOutcomes(ctx, 1); err != nil {
			t.Fatal(err)
		}
		env.Produce(ctx, &kgo.Record{Topic: tier, Value: testenv.Event("second", sub, "x", nil)})
		got, err := env.ReadOutcomes(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"first", "second"} {
			if o := got[id]; len(o) != 1 || o[0].Outcome != "gone" {
				t.Errorf("%s: outcomes %+v, want one gone", id, o)
			}
		}
		if n := env.Sim.Stats().Requests; n != 1 {
			t.Errorf("simulator saw %d requests, want 1: the tombstone must spare the second", n)
		}
		recs, err := env.ReadRecords(ctx, env.Names.Gone(), 1)
		if err != nil {
			t.Fatal(err)
		}
		var g topology.GoneRecord
		if err := json.Unmarshal(recs[0].Value, &g); err != nil {
			t.Fatal(err)
		}
		if g.Endpoint != sub.Endpoint || g.EventID != "first" || g.Status != 410 || g.EndpointHash == "" || g.At == "" {
			t.Errorf("unsubscribe event %+v, want endpoint, hash, event id first, status 410 and a time", g)
		}
	})
}
