package pipeline_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// syncBuffer is a log sink safe for the processor's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// secrets collects what must never appear in telemetry, with a label for
// the error message.
type secrets map[string]string

func (s secrets) add(label, v string) {
	if len(v) >= 8 { // shorter strings would match by chance
		s[v] = label
	}
}

// check reports every secret found in text, which came from where.
func (s secrets) check(t *testing.T, where, text string) {
	t.Helper()
	for v, label := range s {
		if i := strings.Index(text, v); i >= 0 {
			lo, hi := max(i-80, 0), min(i+len(v)+80, len(text))
			t.Errorf("%s holds %s: …%s…", where, label, text[lo:hi])
		}
	}
}

// TestRedaction runs a ledger-like workload (deliveries, 503 and 429
// retries, 410 gone, 500 to the end of the ladder, 403, 413, malformed
// events, blocked endpoints, forged retry records, events of a second
// app's identity, of an app without one and of an app whose key the
// subscription was not made with) with known secrets: the VAPID private
// keys, the HMAC key, every endpoint and its path, every
// p256dh and auth key and every payload. It captures the processor's logs at
// debug level (kgo's included), every span, the /metrics output and the
// Stats labels, and every header of what the processor wrote (and the
// values of push.outcomes), and finds none of the secrets in any of them.
// push.gone values carry the endpoint by design, and DLQ and retry values
// are the event itself, so those values are not checked.
func TestRedaction(t *testing.T) {
	const n = 200
	synctest.Test(t, func(t *testing.T) {
		logs := new(syncBuffer)
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		metrics, err := telemetry.NewMetrics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		env := testenv.Start(t, testenv.Options{
			Virtual:          true,
			Log:              logs,
			LogLevel:         slog.LevelDebug,
			KafkaLogs:        true,
			Hooks:            metrics,
			ProcessorOptions: telemetry.PipelineTracing(tp, "tierpush", "tierpush"),
			Apps:             []string{"shop"},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()

		secret := secrets{}
		secret.add("the VAPID private key", env.VAPID.PrivateKey)
		secret.add("shop's VAPID private key", env.Apps["shop"].PrivateKey)
		secret.add("the HMAC key", string(testenv.HMACKey))
		secret.add("the HMAC key (base64)", base64.StdEncoding.EncodeToString(testenv.HMACKey))
		secret.add("the HMAC key (base64url)", base64.RawURLEncoding.EncodeToString(testenv.HMACKey))
		addSub := func(label string, sub pushsim.Subscription, payload string) {
			secret.add(label+" endpoint", sub.Endpoint)
			if u, err := url.Parse(sub.Endpoint); err == nil {
				secret.add(label+" endpoint path", u.EscapedPath())
			}
			secret.add(label+" p256dh", sub.P256dh)
			secret.add(label+" auth", sub.Auth)
			secret.add(label+" payload", payload)
		}

		var recs []*kgo.Record
		ids := 0
		produce := func(label string, sub pushsim.Subscription, payload string, extra map[string]any) {
			addSub(label, sub, payload)
			id := fmt.Sprintf("evt-%04d", ids)
			ids++
			recs = append(recs, &kgo.Record{
				Topic: env.Names.Tier(tiers.All[ids%3]),
				Key:   []byte(event.EndpointHash(sub.Endpoint)),
				Value: testenv.Event(id, sub, payload, extra),
			})
		}
		for i := range n {
			c := ledgerMix(i)
			sub := env.Sim.Subscribe(c.Script...)
			if c.Malformed {
				sub.Auth = sub.Auth[:16]
			}
			produce(fmt.Sprintf("event %d (%s)", i, c.Name), sub, fmt.Sprintf("secret-payload-%d-%s", i, sub.ID), nil)
		}
		for _, st := range []int{403, 413, 404} {
			sub := env.Sim.Subscribe(pushsim.Response{Status: st})
			produce(fmt.Sprintf("%d event", st), sub, "secret-payload-"+sub.ID, nil)
		}
		for i, ep := range []string{
			"https://169.254.169.254/latest/meta-data/secret-token-aaaaaaaa",
			"http://fcm.googleapis.com/fcm/send/secret-token-bbbbbbbb",
			"https://user:secret-password-cccc@fcm.googleapis.com/fcm/send/x",
			"https://fcm.googleapis.com:8443/fcm/send/secret-token-dddddddd",
			"https://printer.local/secret-token-eeeeeeee",
			"https://%zz/secret-token-ffffffff",
		} {
			sub := env.Sim.Subscribe()
			sub.Endpoint = ep
			produce(fmt.Sprintf("blocked endpoint %d", i), sub, "secret-payload-"+sub.ID, nil)
		}
		secret.add("a userinfo password", "secret-password-cccc")
		for i, app := range []string{"shop", "shop", "blog"} {
			sub := env.Sim.SubscribeWithKey(env.Apps["shop"].PublicKey)
			if i == 1 {
				sub = env.Sim.SubscribeWithKey(env.VAPID.PublicKey) // 403: vapid_rejected
			}
			produce(fmt.Sprintf("app %s event %d", app, i), sub, "secret-payload-"+sub.ID, map[string]any{"app": app})
		}
		big := env.Sim.Subscribe()
		produce("oversized payload", big, strings.Repeat("secret-oversized-payload ", 200), nil)
		badTopic := env.Sim.Subscribe()
		produce("bad topic", badTopic, "secret-payload-"+badTopic.ID, map[string]any{"topic": "secret topic with spaces " + badTopic.ID})
		forged := env.Sim.Subscribe()
		addSub("forged retry record", forged, "secret-payload-"+forged.ID)
		recs = append(recs, &kgo.Record{
			Topic:   env.Names.Retry(tiers.Tier1, 2*time.Second),
			Value:   testenv.Event("forged", forged, "secret-payload-"+forged.ID, nil),
			Headers: []kgo.RecordHeader{{Key: topology.HeaderAttempt, Value: []byte("1")}, {Key: topology.HeaderSig, Value: []byte("v1.1.forged")}},
		})
		env.Produce(ctx, recs...)

		if _, err := env.ReadOutcomes(ctx, ids); err != nil {
			t.Fatal(err)
		}

		// Records: every header the processor wrote, and the outcome
		// values.
		written := readAll(ctx, t, env, env.Names.All(&env.Policy)...)
		var nrec int
		for _, r := range written {
			nrec++
			var b strings.Builder
			for _, h := range r.Headers {
				fmt.Fprintf(&b, "%s=%s\n", h.Key, h.Value)
			}
			secret.check(t, fmt.Sprintf("headers of %s record %d", r.Topic, r.Offset), b.String())
			if r.Topic == env.Names.Outcomes() {
				secret.check(t, fmt.Sprintf("outcome record %d", r.Offset), string(r.Key)+" "+string(r.Value))
			}
		}

		// Logs.
		text := logs.String()
		secret.check(t, "the logs", text)

		// Spans: names, attributes, events, status, links.
		var st strings.Builder
		got := spans.GetSpans()
		for _, s := range got {
			fmt.Fprintf(&st, "%s %s %s\n", s.Name, s.Status.Code, s.Status.Description)
			for _, a := range s.Attributes {
				fmt.Fprintf(&st, "  %s=%s\n", a.Key, a.Value.String())
			}
			for _, e := range s.Events {
				fmt.Fprintf(&st, "  event %s\n", e.Name)
				for _, a := range e.Attributes {
					fmt.Fprintf(&st, "    %s=%s\n", a.Key, a.Value.String())
				}
			}
			for _, l := range s.Links {
				for _, a := range l.Attributes {
					fmt.Fprintf(&st, "  link %s=%s\n", a.Key, a.Value.String())
				}
			}
		}
		secret.check(t, "the spans", st.String())

		// Metrics: /metrics as served, and the Stats labels.
		rec := httptest.NewRecorder()
		metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		secret.check(t, "/metrics", string(body))
		secret.check(t, "the Stats labels", fmt.Sprintf("%+v", env.Processor().Stats().Snapshot()))

		// Nothing above passed by being empty.
		if len(got) < n || !strings.Contains(string(body), "tierpush_sends") || !strings.Contains(text, "level=DEBUG") ||
			!strings.Contains(text, "retry record refused") || nrec < 2*n {
			t.Errorf("too little captured: %d spans, %d records, %d bytes of logs, /metrics %d bytes", len(got), nrec, len(text), len(body))
		}
		t.Logf("checked %d secrets against %d log bytes, %d spans, %d records, %d metrics bytes", len(secret), len(text), len(got), nrec, len(body))
	})
}

// readAll reads every record of topics from the start to their current end.
func readAll(ctx context.Context, t *testing.T, env *testenv.Env, topics ...string) []*kgo.Record {
	t.Helper()
	ends, err := kadm.NewClient(env.Client).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	want := int64(0)
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	cl, err := kgo.NewClient(append(env.KafkaOpts(), kgo.ConsumeTopics(topics...), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for int64(len(got)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records: %v", len(got), want, ctx.Err())
		}
		got = append(got, fs.Records()...)
	}
	return got
}
