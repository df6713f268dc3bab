package faults_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// poison is one malformed record and the DLQ reason it must end with.
type poison struct {
	name   string
	rec    *kgo.Record
	reason topology.Reason
	// payload, when set, must never reach the push service.
	payload string
}

// poisons returns one record of every malformed kind; each is keyed
// "poison-<name>" so its DLQ record can be found.
func (c *cluster) poisons() []poison {
	sub := func() map[string]any {
		s := c.sim.Subscribe()
		return map[string]any{"endpoint": s.Endpoint, "keys": map[string]any{"p256dh": s.P256dh, "auth": s.Auth}}
	}
	event := func(id string, mod func(ev, sub, keys map[string]any)) []byte {
		s := sub()
		ev := map[string]any{"id": id, "subscription": s, "payload": id, "ttl": 3600}
		if mod != nil {
			mod(ev, s, s["keys"].(map[string]any))
		}
		b, err := json.Marshal(ev)
		if err != nil {
			panic(err)
		}
		return b
	}
	b64 := base64.RawURLEncoding.EncodeToString
	offCurve := append([]byte{4}, make([]byte, 64)...)
	offCurve[1], offCurve[64] = 1, 1

	var ps []poison
	add := func(name string, value []byte, reason topology.Reason) {
		ps = append(ps, poison{name: name, reason: reason, rec: &kgo.Record{Value: value}})
	}
	invalid, tooLarge, blocked := topology.ReasonInvalidEvent, topology.ReasonPayloadTooLarge, topology.ReasonEndpointBlocked
	add("invalid-json", []byte(`{"id":"poison-invalid-json","subscription":`), invalid)
	add("not-json", []byte("hello, world"), invalid)
	add("json-array", []byte(`[{"id":"poison-json-array"}]`), invalid)
	add("empty-value", nil, invalid)
	add("missing-id", event("", func(ev, _, _ map[string]any) { delete(ev, "id") }), invalid)
	add("missing-subscription", event("poison-missing-subscription", func(ev, _, _ map[string]any) { delete(ev, "subscription") }), invalid)
	add("missing-endpoint", event("poison-missing-endpoint", func(_, s, _ map[string]any) { delete(s, "endpoint") }), invalid)
	add("missing-keys", event("poison-missing-keys", func(_, s, _ map[string]any) { delete(s, "keys") }), invalid)
	add("auth-12-bytes", event("poison-auth-12-bytes", func(_, _, k map[string]any) { k["auth"] = b64(make([]byte, 12)) }), invalid)
	add("p256dh-64-bytes", event("poison-p256dh-64-bytes", func(_, _, k map[string]any) { k["p256dh"] = b64(make([]byte, 64)) }), invalid)
	add("p256dh-not-a-point", event("poison-p256dh-not-a-point", func(_, _, k map[string]any) { k["p256dh"] = b64(offCurve) }), invalid)
	add("auth-bad-base64", event("poison-auth-bad-base64", func(_, _, k map[string]any) { k["auth"] = "!!!!not*base64!!!!!!" }), invalid)
	add("payload-b64-bad", event("poison-payload-b64-bad", func(ev, _, _ map[string]any) { delete(ev, "payload"); ev["payload_b64"] = "%%%" }), invalid)
	add("payload-too-large", event("poison-payload-too-large", func(ev, _, _ map[string]any) { ev["payload"] = strings.Repeat("x", 3994) }), tooLarge)
	add("huge-record", event("poison-huge-record", func(ev, _, _ map[string]any) { ev["padding"] = strings.Repeat("y", 200<<10) }), invalid)
	add("invalid-utf8", []byte("{\"id\":\"poison-invalid-utf8\",\"payload\":\"\xff\xfe\"}"), invalid)
	add("deeply-nested", []byte(`{"id":"poison-deeply-nested","x":`+strings.Repeat("[", 10000)+strings.Repeat("]", 10000)+`}`), invalid)
	add("id-too-long", event(strings.Repeat("i", 300), nil), invalid)
	add("ttl-negative", event("poison-ttl-negative", func(ev, _, _ map[string]any) { ev["ttl"] = -5 }), invalid)
	add("urgency-bad", event("poison-urgency-bad", func(ev, _, _ map[string]any) { ev["urgency"] = "asap" }), invalid)
	add("endpoint-metadata", event("poison-endpoint-metadata", func(_, s, _ map[string]any) { s["endpoint"] = "https://169.254.169.254/latest/meta-data" }), blocked)
	add("endpoint-loopback", event("poison-endpoint-loopback", func(_, s, _ map[string]any) { s["endpoint"] = "https://127.0.0.1:9/push/x" }), blocked)
	for i := range ps {
		ps[i].rec.Topic = names.Tier(tiers.All[i%len(tiers.All)])
	}

	// Forged retry records: well-formed events to live subscriptions on a
	// retry topic, without or with a wrong push-sig. They must never be sent.
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	forged := func(name string, sig string) {
		id := "poison-" + name
		hs := []kgo.RecordHeader{
			{Key: topology.HeaderAttempt, Value: []byte("1")},
			{Key: topology.HeaderDue, Value: []byte(now)},
			{Key: topology.HeaderFirstSeen, Value: []byte(now)},
			{Key: topology.HeaderStatus, Value: []byte("503")},
		}
		if sig != "" {
			hs = append(hs, kgo.RecordHeader{Key: topology.HeaderSig, Value: []byte(sig)})
		}
		ps = append(ps, poison{name: name, reason: topology.ReasonBadSignature, payload: id, rec: &kgo.Record{
			Topic: names.Retry(tiers.Tier1, 2*time.Second), Value: event(id, nil), Headers: hs,
		}})
	}
	forged("forged-retry-unsigned", "")
	forged("forged-retry-bad-sig", strings.Repeat("ab", 32))
	for i := range ps {
		ps[i].rec.Key = []byte("poison-" + ps[i].name)
	}
	return ps
}

// Scenario 6: poison records of every malformed kind among good ones. Each
// must end in the DLQ with its reason, no processor may stop, and the good
// records come to their usual ends.
func scenarioPoison(t *testing.T) row {
	const n = 3000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, clusterOpts{procs: 3})
	good := c.mix("good", n)
	ps := c.poisons()
	// Poison spread through the good records.
	var rs []*kgo.Record
	every := n / len(ps)
	for i, e := range good {
		rs = append(rs, e.rec)
		if j := i / every; i%every == 0 && j < len(ps) {
			rs = append(rs, ps[j].rec)
		}
	}
	c.produce(ctx, rs)

	got, err := readDLQ(ctx, c, ps)
	if err != nil {
		t.Error(err)
	}
	deadLettered := 0
	for _, p := range ps {
		reason, ok := got[p.name]
		switch {
		case !ok:
			t.Errorf("poison %s: not in %s", p.name, names.DLQ())
		case reason != string(p.reason):
			t.Errorf("poison %s: DLQ reason %q, want %q", p.name, reason, p.reason)
		default:
			deadLettered++
		}
	}
	if err := c.ledger.waitAll(ctx, good); err != nil {
		t.Errorf("%v (%d missing)", err, c.ledger.missing(good))
	}
	sent, _ := deliveries(c.sim)
	for _, p := range ps {
		if p.payload != "" && sent[p.payload] > 0 {
			t.Errorf("poison %s: the push service got it %d times, want never", p.name, sent[p.payload])
		}
	}
	c.checkRunning()
	tl := c.check(t, good)
	return row{
		scenario: "6. poison records", events: n + len(ps), lost: tl.lost, dups: tl.dupSends, recover: "— (nothing stops)",
		notes: fmt.Sprintf("%d of %d poison kinds in the DLQ with their reason; %d good events as the mix says", deadLettered, len(ps), n-tl.lost-tl.wrong),
	}
}

// readDLQ reads push.dlq until every poison record's key is seen, and
// returns the push-reason of each by name.
func readDLQ(ctx context.Context, c *cluster, ps []poison) (map[string]string, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokerAddr), kgo.ConsumeTopics(names.DLQ()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(250*time.Millisecond))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	want := make(map[string]string, len(ps))
	for _, p := range ps {
		want["poison-"+p.name] = p.name
	}
	got := make(map[string]string)
	for len(got) < len(ps) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return got, fmt.Errorf("read %s: %d of %d poison records: %w", names.DLQ(), len(got), len(ps), err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			name, ok := want[string(r.Key)]
			if !ok {
				return
			}
			for _, h := range r.Headers {
				if h.Key == topology.HeaderReason {
					got[name] = string(h.Value)
				}
			}
		})
	}
	return got, nil
}
