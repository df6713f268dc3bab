package pipeline_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/netguard"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// signed returns the routing headers of m for topic with a push-sig made by
// s over them and value, expiring at exp.
func signed(s *topology.Signer, topic string, value []byte, m topology.Meta, exp time.Time) []kgo.RecordHeader {
	hs := m.Headers(nil)
	return append(hs, kgo.RecordHeader{Key: topology.HeaderSig, Value: []byte(s.Sign(topic, hs, value, exp))})
}

func setHeader(hs []kgo.RecordHeader, key, value string) []kgo.RecordHeader {
	hs = slices.Clone(hs)
	for i := range hs {
		if hs[i].Key == key {
			hs[i].Value = []byte(value)
			return hs
		}
	}
	return append(hs, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

// TestBadSignatures produces forged, tampered, wrong-key and expired records
// straight into a retry topic, as anyone with write access to it could: each
// must land in push.dlq as bad_signature, with no outcome and no send. A
// correctly signed record beside them is delivered (the zero sends mean
// something), and a correctly signed record with a blocked endpoint is still
// validated (a signature skips neither validation nor the ladder).
func TestBadSignatures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		now := time.Now()
		topic := env.Names.Retry(tiers.Tier1, 2*time.Second)
		later := env.Names.Retry(tiers.Tier1, 8*time.Second)
		wrongKey, err := topology.NewSigner([]byte("not-the-processor-hmac-key-0123456789"))
		if err != nil {
			t.Fatal(err)
		}
		meta := topology.Meta{Attempt: 1, Due: now, FirstSeen: now, Origin: "push.tier1/0/7", Status: 503}
		week := now.Add(7 * 24 * time.Hour)

		type build func(value []byte) (v []byte, hs []kgo.RecordHeader)
		bad := []struct {
			name  string
			build build
		}{
			{"unsigned", func(v []byte) ([]byte, []kgo.RecordHeader) { return v, meta.Headers(nil) }},
			{"no headers at all", func(v []byte) ([]byte, []kgo.RecordHeader) { return v, nil }},
			{"tampered value", func(v []byte) ([]byte, []kgo.RecordHeader) {
				hs := signed(env.Signer, topic, v, meta, week)
				return []byte(strings.Replace(string(v), `"payload":"x"`, `"payload":"y"`, 1)), hs
			}},
			{"tampered attempt", func(v []byte) ([]byte, []kgo.RecordHeader) {
				// Resetting the attempt count would buy a fresh ladder.
				return v, setHeader(signed(env.Signer, topic, v, meta, week), topology.HeaderAttempt, "0")
			}},
			{"tampered origin", func(v []byte) ([]byte, []kgo.RecordHeader) {
				return v, setHeader(signed(env.Signer, topic, v, meta, week), topology.HeaderOrigin, "push.tier1/0/8")
			}},
			{"added header", func(v []byte) ([]byte, []kgo.RecordHeader) {
				return v, setHeader(signed(env.Signer, topic, v, meta, week), topology.HeaderNotBefore, "1")
			}},
			{"signed for another topic", func(v []byte) ([]byte, []kgo.RecordHeader) {
				return v, signed(env.Signer, later, v, meta, week)
			}},
			{"wrong key", func(v []byte) ([]byte, []kgo.RecordHeader) {
				return v, signed(wrongKey, topic, v, meta, week)
			}},
			{"expired", func(v []byte) ([]byte, []kgo.RecordHeader) {
				return v, signed(env.Signer, topic, v, meta, now.Add(-time.Second))
			}},
			{"far future expiry rewritten", func(v []byte) ([]byte, []kgo.RecordHeader) {
				hs := signed(env.Signer, topic, v, meta, now.Add(-time.Second))
				for i := range hs {
					if hs[i].Key == topology.HeaderSig {
						parts := strings.SplitN(string(hs[i].Value), ".", 3)
						parts[1] = strconv.FormatInt(week.Unix(), 10)
						hs[i].Value = []byte(strings.Join(parts, "."))
					}
				}
				return v, hs
			}},
			{"malformed", func(v []byte) ([]byte, []kgo.RecordHeader) {
				return v, setHeader(meta.Headers(nil), topology.HeaderSig, "v1.x.y")
			}},
			{"empty", func(v []byte) ([]byte, []kgo.RecordHeader) {
				return v, setHeader(meta.Headers(nil), topology.HeaderSig, "")
			}},
			{"two signatures", func(v []byte) ([]byte, []kgo.RecordHeader) {
				hs := signed(env.Signer, topic, v, meta, week)
				return v, append(hs, hs[len(hs)-1])
			}},
			{"signature of another record", func(v []byte) ([]byte, []kgo.RecordHeader) {
				other := testenv.Event("someone-else", env.Sim.Subscribe(), "x", nil)
				return v, signed(env.Signer, topic, other, meta, week)
			}},
		}

		var recs []*kgo.Record
		subs := make(map[string]string) // sub id -> case
		for _, c := range bad {
			sub := env.Sim.Subscribe()
			subs[sub.ID] = c.name
			v, hs := c.build(testenv.Event("evt-"+c.name, sub, "x", nil))
			recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(c.name), Value: v, Headers: hs})
		}
		good := env.Sim.Subscribe()
		gv := testenv.Event("evt-good", good, "x", nil)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("good"), Value: gv, Headers: signed(env.Signer, topic, gv, meta, week)})
		blocked := env.Sim.Subscribe()
		blocked.Endpoint = "https://169.254.169.254/latest/meta-data/iam"
		bv := testenv.Event("evt-signed-blocked", blocked, "x", nil)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte("signed blocked"), Value: bv, Headers: signed(env.Signer, topic, bv, meta, week)})
		env.Produce(ctx, recs...)

		dlq, err := env.ReadRecords(ctx, env.Names.DLQ(), len(bad)+1)
		if err != nil {
			t.Fatal(err)
		}
		seen := make(map[string]bool)
		for _, r := range dlq {
			key := string(r.Key)
			seen[key] = true
			reason, cause := header(r, topology.HeaderReason), header(r, topology.HeaderError)
			if key == "signed blocked" {
				if reason != string(topology.ReasonEndpointBlocked) {
					t.Errorf("%s: push-reason %q, want endpoint_blocked", key, reason)
				}
				continue
			}
			if reason != string(topology.ReasonBadSignature) {
				t.Errorf("%s: push-reason %q, want bad_signature", key, reason)
			}
			if !strings.Contains(cause, "push-sig") {
				t.Errorf("%s: push-error %q, want it to name push-sig", key, cause)
			}
		}
		for _, c := range bad {
			if !seen[c.name] {
				t.Errorf("%s: not in the DLQ", c.name)
			}
		}

		// Outcomes: the good one and the signed-but-blocked one only. Wait
		// well past every retry step for anything else to show up.
		time.Sleep(2 * time.Minute)
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		outs, _ := env.ReadOutcomes(rctx, len(bad)+2)
		if got := len(outs); got != 2 {
			t.Errorf("outcomes for %d ids (%v), want 2: a forged record's id cannot be trusted", got, mapKeys(outs))
		}
		if o := outs["evt-good"]; len(o) != 1 || o[0].Outcome != string(topology.OutcomeDelivered) {
			t.Errorf("evt-good: outcomes %+v, want one delivered", o)
		}
		if o := outs["evt-signed-blocked"]; len(o) != 1 || o[0].Reason != string(topology.ReasonEndpointBlocked) {
			t.Errorf("evt-signed-blocked: outcomes %+v, want one endpoint_blocked", o)
		}
		for _, d := range env.Sim.Deliveries() {
			if name, ok := subs[d.SubID]; ok {
				t.Errorf("%s: the simulator received a send", name)
			}
		}
		if n := env.Sim.Stats().Requests; n != 1 {
			t.Errorf("simulator saw %d requests, want 1 (the correctly signed record)", n)
		}
		if n := env.Processor().Stats().Snapshot().DLQ[topology.ReasonBadSignature]; n != int64(len(bad)) {
			t.Errorf("bad_signature count %d, want %d", n, len(bad))
		}
	})
}

func mapKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// countingListener counts every connection accepted: zero means not one
// byte of a request reached it.
type countingListener struct {
	net.Listener
	accepts atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepts.Add(1)
	}
	return c, err
}

// hostileEndpoints are endpoints a record may carry that the processor must
// never send to. port is a loopback HTTPS server's port, which the policy
// under test allows, so that only the address rules stand between these
// endpoints and the server.
func hostileEndpoints(port int) []string {
	p := strconv.Itoa(port)
	return []string{
		// the loopback server itself, every spelling
		"https://127.0.0.1:" + p + "/push/1",
		"https://127.0.0.1.:" + p + "/push/1",
		"https://127.1.2.3:" + p + "/push/1",
		"https://[::1]:" + p + "/push/1",
		"https://[0:0:0:0:0:0:0:1]:" + p + "/push/1",
		"https://[::ffff:127.0.0.1]:" + p + "/push/1",
		"https://[::ffff:7f00:1]:" + p + "/push/1",
		"https://[64:ff9b::7f00:1]:" + p + "/push/1",
		"https://[2002:7f00:1::]:" + p + "/push/1",
		"https://2130706433:" + p + "/push/1",
		"https://0177.0.0.1:" + p + "/push/1",
		"https://0x7f.0.0.1:" + p + "/push/1",
		"https://0x7f000001:" + p + "/push/1",
		"https://127.1:" + p + "/push/1",
		"https://017700000001:" + p + "/push/1",
		"https://localhost:" + p + "/push/1",
		"https://LOCALHOST.:" + p + "/push/1",
		"https://foo.localhost:" + p + "/push/1",
		"https://0.0.0.0:" + p + "/push/1",
		"https://0:" + p + "/push/1",
		"https://[::]:" + p + "/push/1",
		"http://127.0.0.1:" + p + "/push/1",
		"https://fcm.googleapis.com@127.0.0.1:" + p + "/push/1",
		"https://user:pass@127.0.0.1:" + p + "/push/1",
		// private, CGNAT, link-local, metadata
		"https://10.0.0.1/push",
		"https://172.16.0.1/push",
		"https://192.168.1.1/push",
		"https://100.64.0.1/push",
		"https://169.254.169.254/latest/meta-data/",
		"https://[fd00:ec2::254]/latest/meta-data/",
		"https://[::ffff:169.254.169.254]/",
		"https://[::ffff:a9fe:a9fe]/",
		"https://metadata.google.internal/computeMetadata/v1/",
		"https://100.100.100.200/latest/meta-data/",
		"https://168.63.129.16/",
		"https://[fc00::1]/",
		"https://[fe80::1]/",
		"https://[fe80::1%25eth0]/",
		"https://224.0.0.1/",
		"https://[ff02::1]/",
		"https://255.255.255.255/",
		"https://192.0.2.1/",
		// schemes, ports, names, malformed
		"http://fcm.googleapis.com/fcm/send/abc",
		"file:///etc/passwd",
		"gopher://127.0.0.1:6379/_FLUSHALL",
		"javascript:alert(1)",
		"https://fcm.googleapis.com:22/",
		"https://fcm.googleapis.com:8443/fcm/send/abc",
		"https://user@fcm.googleapis.com/fcm/send/abc",
		"https://printer.local/",
		"https://pushsim/",
		"https://%31%32%37.0.0.1/",
		"https://[::1/",
		"fcm.googleapis.com/fcm/send/abc",
		"//127.0.0.1/push",
	}
}

// TestHostileEndpoints produces events carrying hostile endpoints into the
// tier topics of a processor that dials through its SSRF policy, as the
// processor command does. The policy allows the port of a loopback HTTPS
// server, so only the address rules keep the events from it: every event
// must end endpoint_blocked in the DLQ and the server must accept no
// connection at all. Two more cases reach dial time: a name that resolves
// to loopback (DNS rebinding: public when validated, loopback when dialed)
// and a name resolving to a metadata address. A good event to the simulator
// shows the pipeline was working.
func TestHostileEndpoints(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingListener{Listener: ln}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv.Listener = counting
	srv.StartTLS()
	defer srv.Close()
	port := counting.Addr().(*net.TCPAddr).Port

	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "rebind.tierpush-test.com":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}, nil
		case "metadata.tierpush-test.com":
			return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	env := testenv.Start(t, testenv.Options{
		Partitions:   2,
		GuardDial:    true,
		GuardOptions: []netguard.Option{netguard.AllowPorts(443, port), netguard.WithLookup(lookup)},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	endpoints := hostileEndpoints(port)
	if len(endpoints) < 40 {
		t.Fatalf("only %d hostile endpoints", len(endpoints))
	}
	dialTime := []string{
		"https://rebind.tierpush-test.com:" + strconv.Itoa(port) + "/push/1",
		"https://metadata.tierpush-test.com/latest/meta-data/",
	}
	sub := env.Sim.Subscribe()
	var recs []*kgo.Record
	want := make(map[string]string) // id -> endpoint
	for i, ep := range append(slices.Clone(endpoints), dialTime...) {
		id := fmt.Sprintf("hostile-%02d", i)
		want[id] = ep
		s := sub
		s.Endpoint = ep
		recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.All[i%3]), Key: []byte(id), Value: testenv.Event(id, s, "x", nil)})
	}
	recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.Tier1), Key: []byte("good"), Value: testenv.Event("good", sub, "x", nil)})
	env.Produce(ctx, recs...)

	outs, err := env.ReadOutcomes(ctx, len(want)+1)
	if err != nil {
		t.Fatal(err)
	}
	for id, ep := range want {
		o := outs[id]
		if len(o) != 1 || o[0].Outcome != string(topology.OutcomeDead) || o[0].Reason != string(topology.ReasonEndpointBlocked) {
			t.Errorf("%s %q: outcomes %+v, want one dead/endpoint_blocked", id, ep, o)
		}
	}
	if o := outs["good"]; len(o) != 1 || o[0].Outcome != string(topology.OutcomeDelivered) {
		t.Errorf("good: outcomes %+v, want delivered", o)
	}
	dlq, err := env.ReadRecords(ctx, env.Names.DLQ(), len(want))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range dlq {
		if got := header(r, topology.HeaderReason); got != string(topology.ReasonEndpointBlocked) {
			t.Errorf("%s: push-reason %q, want endpoint_blocked", r.Key, got)
		}
		if strings.Contains(header(r, topology.HeaderError), "/push/1") || strings.Contains(header(r, topology.HeaderError), "meta-data") {
			t.Errorf("%s: push-error %q holds the endpoint path", r.Key, header(r, topology.HeaderError))
		}
		if ep := want[string(r.Key)]; slices.Contains(dialTime, ep) && !strings.Contains(header(r, topology.HeaderError), "dial time") {
			t.Errorf("%s: push-error %q, want a refusal at dial time", r.Key, header(r, topology.HeaderError))
		}
	}
	if n := counting.accepts.Load(); n != 0 {
		t.Errorf("the loopback server accepted %d connections, want 0", n)
	}

	// The server was reachable all along: the same client, allowed to dial
	// it, connects (so the zero above is the policy's doing).
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatalf("control request: %v", err)
	}
	resp.Body.Close()
	if n := counting.accepts.Load(); n != 1 {
		t.Errorf("control: the loopback server accepted %d connections, want 1", n)
	}
}

// hostileRecord is one record built to cost the processor.
type hostileRecord struct {
	name    string
	key     []byte // nil: the name
	retry   bool   // produced to a retry topic instead of the tier topic
	value   []byte
	headers []kgo.RecordHeader
	reason  topology.Reason
}

func junkHeaders(key string, n int) []kgo.RecordHeader {
	hs := make([]kgo.RecordHeader, n)
	for i := range hs {
		hs[i] = kgo.RecordHeader{Key: fmt.Sprintf("%s-%d", key, i), Value: []byte("v")}
	}
	return hs
}

// TestHostileRecords feeds the processor records built to cost it: JSON
// nested 30,000 deep, invalid UTF-8, a 60,000-digit number, 5,000 keys, a
// value just over the event size limit, thousands of headers (on a tier and
// on a retry topic). Each must end in the DLQ with a reason and a short
// push-error, without its hostile headers, and the partition must keep
// going: good events after them, one under 5,000 upstream headers, are
// delivered and the committed offsets reach the end.
func TestHostileRecords(t *testing.T) {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sub := pushsim.Subscription{
		Endpoint: "https://fcm.googleapis.com/fcm/send/x",
		P256dh:   base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()),
		Auth:     base64.RawURLEncoding.EncodeToString(make([]byte, 16)),
	}
	valid := func(id string) []byte { return testenv.Event(id, sub, "hello", nil) }
	var manyKeys bytes.Buffer
	manyKeys.WriteString(`{"id":"keys"`)
	for i := range 5000 {
		fmt.Fprintf(&manyKeys, `,"k%d":%d`, i, i)
	}
	manyKeys.WriteString("}")
	pushJunk := make([]kgo.RecordHeader, 5000)
	for i := range pushJunk {
		pushJunk[i] = kgo.RecordHeader{Key: topology.HeaderAttempt, Value: []byte(strconv.Itoa(i))}
	}
	runHostile(t, false, func() []hostileRecord {
		return []hostileRecord{
			{name: "nested 30000", value: []byte(`{"id":"deep","x":` + strings.Repeat("[", 30000) + strings.Repeat("]", 30000) + `}`), reason: topology.ReasonInvalidEvent},
			{name: "unterminated nesting", value: []byte(strings.Repeat(`{"a":[`, 10000)), reason: topology.ReasonInvalidEvent},
			{name: "invalid utf-8", value: bytes.Replace(valid("utf8"), []byte("hello"), []byte("hel\xffo"), 1), reason: topology.ReasonInvalidEvent},
			{name: "60000-digit ttl", value: bytes.Replace(valid("number"), []byte(`"ttl":3600`), []byte(`"ttl":1`+strings.Repeat("0", 60000)), 1), reason: topology.ReasonInvalidEvent},
			{name: "5000 keys", value: manyKeys.Bytes(), reason: topology.ReasonInvalidEvent},
			{name: "65537 bytes", value: append([]byte(`{"id":"fat","x":"`), append(bytes.Repeat([]byte("x"), 65537), `"}`...)...), reason: topology.ReasonInvalidEvent},
			{name: "5000 headers bad value", value: []byte(`{"id":"hdrs"`), headers: junkHeaders("x-junk", 5000), reason: topology.ReasonInvalidEvent},
			{name: "5000 push headers retry", retry: true, value: valid("push-hdrs"), headers: pushJunk, reason: topology.ReasonBadSignature},
		}
	})
}

// TestOversizedRecords: a 10 MB value (on a tier and on a retry topic), a
// 10 MB key, a 2 MB traceparent and 5,000 traceparents. The DLQ record of
// each must leave the oversized part out (it could not be produced to a
// DLQ topic with Kafka's default 1 MB limit, and a produce that fails holds
// the partition's commits back for good), the partition must keep going,
// and once the records are deleted from the broker the live heap must hold
// no copy of a 10 MB value.
func TestOversizedRecords(t *testing.T) {
	runHostile(t, true, func() []hostileRecord {
		const big = 10 << 20
		tenMB := append([]byte(`{"id":"big","payload":"`), bytes.Repeat([]byte("A"), big)...)
		tenMB = append(tenMB, `"}`...)
		traces := make([]kgo.RecordHeader, 5000)
		for i := range traces {
			traces[i] = kgo.RecordHeader{Key: topology.HeaderTraceparent, Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}
		}
		return []hostileRecord{
			{name: "10MB", value: tenMB, reason: topology.ReasonInvalidEvent},
			{name: "10MB retry", retry: true, value: tenMB, reason: topology.ReasonBadSignature},
			{name: "10MB key", key: bytes.Repeat([]byte("k"), big), value: []byte(`{"id":"bigkey"}`), reason: topology.ReasonInvalidEvent},
			{name: "2MB traceparent", value: []byte(`{"id":"bigtrace"}`), headers: []kgo.RecordHeader{{Key: topology.HeaderTraceparent, Value: bytes.Repeat([]byte("0"), 2<<20)}}, reason: topology.ReasonInvalidEvent},
			{name: "5000 traceparents", value: []byte(`{"id":"traces"}`), headers: traces, reason: topology.ReasonInvalidEvent},
		}
	})
}

// runHostile produces the records cases builds, then two good events, to one partition of a tier
// topic (retry cases to its first retry topic), and checks what the tests
// above promise. With checkHeap the live heap is compared before the cases
// are built and after they are processed and deleted.
func runHostile(t *testing.T, checkHeap bool, cases func() []hostileRecord) {
	synctest.Test(t, func(t *testing.T) {
		const maxBytes = 32 << 20 // the broker takes what the test produces
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1,
			BrokerConfigs: map[string]string{"message.max.bytes": strconv.Itoa(maxBytes)}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		sub := env.Sim.Subscribe()
		tier := env.Names.Tier(tiers.Tier2)
		retry := env.Names.Retry(tiers.Tier2, 2*time.Second)

		// Warm up (clients connected, group joined, buffers pooled), then
		// take the baseline.
		env.Produce(ctx, &kgo.Record{Topic: tier, Key: []byte("warm-up"), Value: testenv.Event("warm-up", sub, "x", nil)})
		if _, err := readOutcomesOf(ctx, env, "warm-up"); err != nil {
			t.Fatal(err)
		}
		base := heapAlloc()
		bad := cases()

		cl, err := kgo.NewClient(append(env.KafkaOpts(), kgo.ProducerBatchMaxBytes(maxBytes), kgo.MaxBufferedBytes(4*maxBytes))...)
		if err != nil {
			t.Fatal(err)
		}
		var recs []*kgo.Record
		for _, c := range bad {
			r := &kgo.Record{Topic: tier, Key: c.key, Value: c.value, Headers: c.headers}
			if r.Key == nil {
				r.Key = []byte(c.name)
			}
			if c.retry {
				r.Topic = retry
			}
			recs = append(recs, r)
		}
		recs = append(recs,
			&kgo.Record{Topic: tier, Key: []byte("good-headers"), Value: testenv.Event("good-headers", sub, "x", nil), Headers: junkHeaders("x-upstream", 5000)},
			&kgo.Record{Topic: tier, Key: []byte("good"), Value: testenv.Event("good", sub, "x", nil)},
		)
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		cl.Close()
		byOrigin := make(map[string]hostileRecord) // push-origin -> case
		for i, c := range bad {
			c.key, c.value, c.headers = nil, nil, nil // let the big ones go
			byOrigin[topology.OriginOf(recs[i])] = c
		}
		recs, bad = nil, nil

		dlq, err := env.ReadRecords(ctx, env.Names.DLQ(), len(byOrigin))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range dlq {
			c, ok := byOrigin[header(r, topology.HeaderOrigin)]
			if !ok {
				t.Errorf("unexpected DLQ record from %s", header(r, topology.HeaderOrigin))
				continue
			}
			delete(byOrigin, header(r, topology.HeaderOrigin))
			if got := topology.Reason(header(r, topology.HeaderReason)); got != c.reason {
				t.Errorf("%s: push-reason %q, want %q", c.name, got, c.reason)
			}
			if cause := header(r, topology.HeaderError); cause == "" || len(cause) > 200 {
				t.Errorf("%s: push-error is %d bytes, want 1..200", c.name, len(cause))
			}
			n := 0
			for _, h := range r.Headers {
				n += len(h.Key) + len(h.Value)
			}
			if len(r.Headers) > 16 || n > 4096 {
				t.Errorf("%s: DLQ record has %d headers of %d bytes: hostile headers copied", c.name, len(r.Headers), n)
			}
			if len(r.Key) > 4096 || len(r.Value) > 1<<20 {
				t.Errorf("%s: DLQ record key %d bytes, value %d bytes", c.name, len(r.Key), len(r.Value))
			}
		}
		for _, c := range byOrigin {
			t.Errorf("%s: not in the DLQ", c.name)
		}
		dlq = nil

		outs, err := readOutcomesOf(ctx, env, "good", "good-headers")
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"good", "good-headers"} {
			o := outs[id]
			if len(o) != 1 || o[0].Outcome != string(topology.OutcomeDelivered) {
				t.Errorf("%s: outcomes %+v, want one delivered", id, o)
				continue
			}
			if len(o[0].Headers) > 16 {
				t.Errorf("%s: outcome carries %d headers: upstream headers copied", id, len(o[0].Headers))
			}
		}

		// The partitions did not stall: the group's committed offsets
		// reach the end of both topics.
		time.Sleep(5 * time.Second)
		adm := kadm.NewClient(env.Client)
		ends, err := adm.ListEndOffsets(ctx, tier, retry)
		if err != nil {
			t.Fatal(err)
		}
		committed, err := adm.FetchOffsets(ctx, pipeline.DefaultConfig().Group)
		if err != nil {
			t.Fatal(err)
		}
		ends.Each(func(o kadm.ListedOffset) {
			if c, _ := committed.Lookup(o.Topic, o.Partition); c.At != o.Offset {
				t.Errorf("%s/%d: committed offset %d, end %d: a hostile record stalled the partition", o.Topic, o.Partition, c.At, o.Offset)
			}
		})
		if !checkHeap {
			return
		}
		// Delete every record from the broker: then no copy of a big
		// value may remain anywhere in the process.
		all, err := adm.ListEndOffsets(ctx, tier, retry, env.Names.DLQ(), env.Names.Outcomes())
		if err != nil {
			t.Fatal(err)
		}
		del := kadm.Offsets{}
		all.Each(func(o kadm.ListedOffset) { del.Add(kadm.Offset{Topic: o.Topic, Partition: o.Partition, At: o.Offset}) })
		if _, err := adm.DeleteRecords(ctx, del); err != nil {
			t.Fatal(err)
		}
		after := heapAlloc()
		t.Logf("live heap: %d KiB before the hostile records, %d KiB after them and their deletion", base>>10, after>>10)
		if grew := after - base; grew > 5<<20 {
			t.Errorf("live heap grew by %d KiB after processing and deleting the records; a copy of a hostile record is retained", grew>>10)
		}
	})
}

// heapAlloc returns the live heap after two collections (the second frees
// what sync.Pools dropped in the first).
func heapAlloc() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// readOutcomesOf reads push.outcomes until every one of ids has an outcome.
func readOutcomesOf(ctx context.Context, env *testenv.Env, ids ...string) (map[string][]testenv.Outcome, error) {
	for want := len(ids); ; want++ {
		outs, err := env.ReadOutcomes(ctx, want)
		if err != nil {
			return outs, err
		}
		missing := false
		for _, id := range ids {
			missing = missing || len(outs[id]) == 0
		}
		if !missing {
			return outs, nil
		}
	}
}
