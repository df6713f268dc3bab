package dispatch_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/netguard"
	"github.com/tierpush/tierpush/internal/pushsim"
)

const subject = "mailto:ops@example.com"

// startSim serves a push simulator on a loopback port until the test ends.
func startSim(t *testing.T) *pushsim.Server {
	t.Helper()
	srv, err := pushsim.New(pushsim.DefaultConfig(), nil)
	if err != nil {
		t.Fatalf("pushsim.New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	srv.SetBaseURL("http://" + ln.Addr().String())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		if err := srv.Close(context.Background()); err != nil {
			t.Errorf("close simulator: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("serve simulator: %v", err)
		}
	})
	return srv
}

// clock is an injectable clock that starts at the real time (the simulator
// checks JWT expiry against its own clock) and moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newSender(t *testing.T, keys keyPair, cfg dispatch.Config) *dispatch.WebPush {
	t.Helper()
	cfg.VAPID = dispatch.VAPID{PublicKey: keys.pub, PrivateKey: keys.priv, Subject: subject}
	hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{})
	t.Cleanup(hc.CloseIdleConnections)
	w, err := dispatch.New(cfg, hc)
	if err != nil {
		t.Fatalf("dispatch.New: %v", err)
	}
	return w
}

// newEvent decodes an event for sub the way the processor does; extra adds
// or overrides top-level fields.
func newEvent(t *testing.T, sub pushsim.Subscription, extra map[string]any) *event.Event {
	t.Helper()
	v := map[string]any{
		"id": "evt-01",
		"subscription": map[string]any{
			"endpoint": sub.Endpoint,
			"keys":     map[string]any{"p256dh": sub.P256dh, "auth": sub.Auth},
		},
	}
	for k, x := range extra {
		v[k] = x
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	e, err := event.Decode(b, time.Now(), event.DefaultRules())
	if err != nil {
		t.Fatalf("event.Decode: %v", err)
	}
	return e
}

// onlyDelivery returns the one delivery the simulator recorded for sub.
func onlyDelivery(t *testing.T, srv *pushsim.Server, sub pushsim.Subscription) pushsim.Delivery {
	t.Helper()
	var got []pushsim.Delivery
	for _, d := range srv.Deliveries() {
		if d.SubID == sub.ID {
			got = append(got, d)
		}
	}
	if len(got) != 1 {
		t.Fatalf("simulator recorded %d deliveries for the subscription, want 1", len(got))
	}
	return got[0]
}

func binaryPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

func TestWebPushSend(t *testing.T) {
	srv := startSim(t)
	keys := newKeys(t)
	w := newSender(t, keys, dispatch.Config{})
	maxPayload := binaryPayload(event.DefaultRules().MaxPayload)

	tests := []struct {
		name  string
		reply pushsim.Response
		extra map[string]any
		ttl   time.Duration

		wantPayload []byte
		wantTTL     int
		wantUrgency string
		wantTopic   string
		want        push.Result // Err not compared
	}{
		{
			name:        "delivered with urgency and topic",
			reply:       pushsim.Response{Status: 201},
			extra:       map[string]any{"payload": "hello, world ✓", "urgency": "high", "topic": "order-42"},
			ttl:         42 * time.Second,
			wantPayload: []byte("hello, world ✓"),
			wantTTL:     42, wantUrgency: "high", wantTopic: "order-42",
			want: push.Result{Class: push.Delivered, Status: 201},
		},
		{
			name:        "delivered, binary payload of the maximum size",
			extra:       map[string]any{"payload_b64": base64.StdEncoding.EncodeToString(maxPayload), "urgency": "very-low"},
			ttl:         24 * time.Hour,
			wantPayload: maxPayload,
			wantTTL:     86400, wantUrgency: "very-low",
			want: push.Result{Class: push.Delivered, Status: 201},
		},
		{
			name:        "delivered, every byte value",
			reply:       pushsim.Response{Status: 202},
			extra:       map[string]any{"payload_b64": base64.StdEncoding.EncodeToString(binaryPayload(256))},
			ttl:         time.Hour,
			wantPayload: binaryPayload(256),
			wantTTL:     3600,
			want:        push.Result{Class: push.Delivered, Status: 202},
		},
		{
			name:        "empty push",
			ttl:         time.Minute,
			wantPayload: []byte{},
			wantTTL:     60,
			want:        push.Result{Class: push.Delivered, Status: 201},
		},
		{
			name:        "remaining ttl truncated to whole seconds",
			extra:       map[string]any{"payload": "x"},
			ttl:         42*time.Second + 900*time.Millisecond,
			wantPayload: []byte("x"),
			wantTTL:     42,
			want:        push.Result{Class: push.Delivered, Status: 201},
		},
		{
			name:        "sub-second ttl is not sent as 0",
			extra:       map[string]any{"payload": "x"},
			ttl:         500 * time.Millisecond,
			wantPayload: []byte("x"),
			wantTTL:     1,
			want:        push.Result{Class: push.Delivered, Status: 201},
		},
		{
			name:        "ttl 0: now or never",
			extra:       map[string]any{"payload": "x", "ttl": 0},
			ttl:         0,
			wantPayload: []byte("x"),
			wantTTL:     0,
			want:        push.Result{Class: push.Delivered, Status: 201},
		},
		{
			name:        "gone",
			reply:       pushsim.Response{Status: 410},
			extra:       map[string]any{"payload": "x"},
			ttl:         time.Minute,
			wantPayload: []byte("x"), wantTTL: 60,
			want: push.Result{Class: push.Gone, Status: 410},
		},
		{
			name:        "rate limited with Retry-After",
			reply:       pushsim.Response{Status: 429, RetryAfter: "7"},
			extra:       map[string]any{"payload": "x", "urgency": "low", "topic": "t"},
			ttl:         time.Minute,
			wantPayload: []byte("x"), wantTTL: 60, wantUrgency: "low", wantTopic: "t",
			want: push.Result{Class: push.Retryable, Status: 429, RetryAfter: 7 * time.Second},
		},
		{
			name:        "unavailable",
			reply:       pushsim.Response{Status: 503},
			extra:       map[string]any{"payload": "x"},
			ttl:         time.Minute,
			wantPayload: []byte("x"), wantTTL: 60,
			want: push.Result{Class: push.Retryable, Status: 503},
		},
		{
			name:        "WNS throttled",
			reply:       pushsim.Response{Status: 406, Header: map[string]string{"X-WNS-Status": "appthrottled"}},
			extra:       map[string]any{"payload": "x"},
			ttl:         time.Minute,
			wantPayload: []byte("x"), wantTTL: 60,
			want: push.Result{Class: push.Retryable, Status: 406},
		},
		{
			name:        "too large",
			reply:       pushsim.Response{Status: 413},
			extra:       map[string]any{"payload": "x"},
			ttl:         time.Minute,
			wantPayload: []byte("x"), wantTTL: 60,
			want: push.Result{Class: push.TooLarge, Status: 413},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := srv.Subscribe(tt.reply)
			e := newEvent(t, sub, tt.extra)
			got := w.Send(context.Background(), e, tt.ttl)
			if got.Class != tt.want.Class || got.Status != tt.want.Status || got.RetryAfter != tt.want.RetryAfter {
				t.Errorf("Send() = %+v, want %+v", got, tt.want)
			}
			if strings.Contains(got.Err, sub.Endpoint) || strings.Contains(got.Err, "://") {
				t.Errorf("Send().Err = %q holds the endpoint", got.Err)
			}

			d := onlyDelivery(t, srv, sub)
			if !d.Verified {
				t.Fatalf("simulator did not verify the request: %d %s", d.Status, d.Reason)
			}
			if !bytes.Equal(d.Payload, tt.wantPayload) {
				t.Errorf("decrypted payload = %q, want %q", d.Payload, tt.wantPayload)
			}
			if d.TTL != tt.wantTTL {
				t.Errorf("TTL header = %d, want %d", d.TTL, tt.wantTTL)
			}
			if d.Urgency != tt.wantUrgency || d.Topic != tt.wantTopic {
				t.Errorf("Urgency, Topic = %q, %q; want %q, %q", d.Urgency, d.Topic, tt.wantUrgency, tt.wantTopic)
			}
			if want := srv.BaseURL(); d.Audience != want {
				t.Errorf("JWT aud = %q, want %q", d.Audience, want)
			}
			if d.Subject != subject {
				t.Errorf("JWT sub = %q, want %q", d.Subject, subject)
			}
			if d.VAPIDKey != keys.pub {
				t.Errorf("VAPID k = %q, want %q", d.VAPIDKey, keys.pub)
			}
		})
	}
}

// TestWebPushSendBareSubject checks a subject given without mailto: still
// reaches the push service as a mailto: contact.
func TestWebPushSendBareSubject(t *testing.T) {
	srv := startSim(t)
	keys := newKeys(t)
	hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{})
	t.Cleanup(hc.CloseIdleConnections)
	w, err := dispatch.New(dispatch.Config{VAPID: dispatch.VAPID{PublicKey: keys.pub, PrivateKey: keys.priv, Subject: "ops@example.com"}}, hc)
	if err != nil {
		t.Fatal(err)
	}
	sub := srv.Subscribe()
	if got := w.Send(context.Background(), newEvent(t, sub, nil), time.Minute); got.Class != push.Delivered {
		t.Fatalf("Send() = %+v, want delivered", got)
	}
	if d := onlyDelivery(t, srv, sub); d.Subject != "mailto:ops@example.com" {
		t.Errorf("JWT sub = %q, want mailto:ops@example.com", d.Subject)
	}
}

func TestWebPushJWTReuse(t *testing.T) {
	srv := startSim(t)
	other := startSim(t) // a second push service origin
	clk := newClock()
	w := newSender(t, newKeys(t), dispatch.Config{Now: clk.Now})
	start := clk.Now()

	send := func(srv *pushsim.Server) pushsim.Delivery {
		t.Helper()
		sub := srv.Subscribe()
		if got := w.Send(context.Background(), newEvent(t, sub, map[string]any{"payload": "x"}), time.Minute); got.Class != push.Delivered {
			t.Fatalf("Send() = %+v, want delivered", got)
		}
		d := onlyDelivery(t, srv, sub)
		if !d.Verified || d.JWT == "" {
			t.Fatalf("delivery not verified or without a JWT: %+v", d)
		}
		return d
	}

	first := send(srv)
	if want := start.Add(12 * time.Hour).Truncate(time.Second); !first.JWTExp.Equal(want) {
		t.Errorf("JWT exp = %v, want now + 12h = %v", first.JWTExp, want)
	}
	second := send(srv)
	if second.JWT != first.JWT {
		t.Error("second send to the same origin minted a new JWT, want the first reused")
	}
	if o := send(other); o.JWT == first.JWT || o.Audience != other.BaseURL() {
		t.Errorf("other origin got JWT aud %q (same token: %v), want its own for %q", o.Audience, o.JWT == first.JWT, other.BaseURL())
	}

	clk.Advance(59 * time.Minute)
	if d := send(srv); d.JWT != first.JWT {
		t.Error("send 59m later minted a new JWT, want the first reused until JWTRefresh")
	}

	clk.Advance(2 * time.Minute) // 61m after the first mint
	refreshed := send(srv)
	if refreshed.JWT == first.JWT {
		t.Fatal("send 61m later reused the JWT, want a new one after JWTRefresh (1h)")
	}
	if want := start.Add(61*time.Minute + 12*time.Hour).Truncate(time.Second); !refreshed.JWTExp.Equal(want) {
		t.Errorf("refreshed JWT exp = %v, want %v", refreshed.JWTExp, want)
	}
	if d := send(srv); d.JWT != refreshed.JWT {
		t.Error("send after the refresh minted yet another JWT, want the refreshed one reused")
	}
}

func TestWebPushConcurrentSendsShareJWT(t *testing.T) {
	srv := startSim(t)
	w := newSender(t, newKeys(t), dispatch.Config{})
	const n = 16
	subs := make([]pushsim.Subscription, n)
	events := make([]*event.Event, n)
	for i := range subs {
		subs[i] = srv.Subscribe()
		events[i] = newEvent(t, subs[i], map[string]any{"payload": "x"})
	}
	results := make([]push.Result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { results[i] = w.Send(context.Background(), events[i], time.Minute) })
	}
	wg.Wait()
	jwts := make(map[string]bool)
	for i, r := range results {
		if r.Class != push.Delivered {
			t.Errorf("send %d = %+v, want delivered", i, r)
		}
		jwts[onlyDelivery(t, srv, subs[i]).JWT] = true
	}
	if len(jwts) != 1 {
		t.Errorf("%d concurrent sends to one origin carried %d JWTs, want 1", n, len(jwts))
	}
}

func TestWebPushPayloadNotWrittenPastLength(t *testing.T) {
	srv := startSim(t)
	w := newSender(t, newKeys(t), dispatch.Config{})
	tests := []struct {
		name  string
		n     int
		spare int
	}{
		{"short payload, large spare capacity", 5, 4096},
		{"empty payload with spare capacity", 0, 64},
		{"maximum payload", event.DefaultRules().MaxPayload, 128},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := srv.Subscribe()
			e := newEvent(t, sub, nil)
			want := binaryPayload(tt.n)
			buf := make([]byte, tt.n+tt.spare)
			copy(buf, want)
			for i := tt.n; i < len(buf); i++ {
				buf[i] = 0xA5
			}
			e.Payload = buf[:tt.n]

			if got := w.Send(context.Background(), e, time.Minute); got.Class != push.Delivered {
				t.Fatalf("Send() = %+v, want delivered", got)
			}
			if !bytes.Equal(buf[:tt.n], want) {
				t.Error("Send modified the payload")
			}
			for i := tt.n; i < len(buf); i++ {
				if buf[i] != 0xA5 {
					t.Fatalf("Send wrote into the payload's spare capacity at offset %d (len %d)", i, tt.n)
				}
			}
			if d := onlyDelivery(t, srv, sub); !bytes.Equal(d.Payload, want) {
				t.Errorf("decrypted payload = %x, want %x", d.Payload, want)
			}
		})
	}
}

func TestWebPushTransportErrors(t *testing.T) {
	keys := newKeys(t)

	t.Run("connection refused", func(t *testing.T) {
		srv := startSim(t)
		sub := srv.Subscribe()
		// A port nothing listens on: take one and close it.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		sub.Endpoint = "http://" + addr + "/push/" + sub.ID
		w := newSender(t, keys, dispatch.Config{})
		got := w.Send(context.Background(), newEvent(t, sub, nil), time.Minute)
		if got.Class != push.Retryable || got.Status != 0 {
			t.Errorf("Send() = %+v, want retryable without a status", got)
		}
		if !strings.HasPrefix(got.Err, "connection error") || strings.Contains(got.Err, addr) || strings.Contains(got.Err, sub.ID) {
			t.Errorf("Send().Err = %q, want a connection error without the endpoint", got.Err)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		srv := startSim(t)
		// The simulator holds the answer far longer than the send may take;
		// closing it at cleanup cuts the wait short.
		sub := srv.Subscribe(pushsim.Response{Latency: time.Hour})
		w := newSender(t, keys, dispatch.Config{Timeout: 50 * time.Millisecond})
		got := w.Send(context.Background(), newEvent(t, sub, nil), time.Minute)
		if got.Class != push.Retryable || got.Err != "timeout" {
			t.Errorf("Send() = %+v, want retryable timeout", got)
		}
	})

	t.Run("refused at dial time", func(t *testing.T) {
		srv := startSim(t)
		sub := srv.Subscribe()
		var dials atomic.Int32
		hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				dials.Add(1)
				return nil, &netguard.BlockedError{Reason: "loopback address"}
			},
		})
		w, err := dispatch.New(dispatch.Config{VAPID: dispatch.VAPID{PublicKey: keys.pub, PrivateKey: keys.priv, Subject: subject}}, hc)
		if err != nil {
			t.Fatal(err)
		}
		got := w.Send(context.Background(), newEvent(t, sub, nil), time.Minute)
		if got.Class != push.Blocked {
			t.Errorf("Send() = %+v, want blocked", got)
		}
		if dials.Load() == 0 {
			t.Error("the dialer was never called")
		}
		if n := srv.Requests(); n != 0 {
			t.Errorf("simulator got %d requests, want 0", n)
		}
	})

	t.Run("canceled context", func(t *testing.T) {
		srv := startSim(t)
		sub := srv.Subscribe()
		w := newSender(t, keys, dispatch.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		got := w.Send(ctx, newEvent(t, sub, nil), time.Minute)
		if got.Class != push.Retryable || got.Err != "connection error" {
			t.Errorf("Send() = %+v, want retryable connection error", got)
		}
		if n := srv.Requests(); n != 0 {
			t.Errorf("simulator got %d requests, want 0", n)
		}
	})

	t.Run("deadline already passed", func(t *testing.T) {
		srv := startSim(t)
		sub := srv.Subscribe()
		w := newSender(t, keys, dispatch.Config{})
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		got := w.Send(ctx, newEvent(t, sub, nil), time.Minute)
		if got.Class != push.Retryable || got.Err != "timeout" {
			t.Errorf("Send() = %+v, want retryable timeout", got)
		}
	})
}

// A push service's answer with headers over MaxResponseHeaderBytes is
// refused after that many bytes, a retryable transport failure, instead of
// being buffered whole; an answer within the bound is read as usual.
func TestResponseHeaderLimit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header int
		want   push.Class
	}{
		{"8 KiB of headers", 8 << 10, push.Delivered},
		{"1 MiB of headers", 1 << 20, push.Retryable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Junk", strings.Repeat("x", tc.header))
				w.WriteHeader(http.StatusCreated)
			}))
			t.Cleanup(srv.Close)
			sim := startSim(t)
			sub := sim.Subscribe()
			sub.Endpoint = srv.URL + "/push/hostile"
			w := newSender(t, newKeys(t), dispatch.Config{})
			res := w.Send(context.Background(), newEvent(t, sub, nil), time.Minute)
			if res.Class != tc.want {
				t.Fatalf("class %s (status %d, %q), want %s", res.Class, res.Status, res.Err, tc.want)
			}
		})
	}
}

// TestWebPushApps: each event is signed by its app's identity, the default
// one when it has none; one JWT is cached per app and push service, and an
// app without an identity is refused without a request.
func TestWebPushApps(t *testing.T) {
	srv := startSim(t)
	other := startSim(t)
	clk := newClock()
	def, shop, news := newKeys(t), newKeys(t), newKeys(t)
	hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{})
	t.Cleanup(hc.CloseIdleConnections)
	w, err := dispatch.New(dispatch.Config{
		VAPID: dispatch.VAPID{PublicKey: def.pub, PrivateKey: def.priv, Subject: subject},
		Apps: map[string]dispatch.VAPID{
			"shop": {PublicKey: shop.pub, PrivateKey: shop.priv, Subject: "mailto:push@shop.example"},
			"news": {PublicKey: news.pub, PrivateKey: news.priv, Subject: "https://news.example"},
		},
		Now: clk.Now,
	}, hc)
	if err != nil {
		t.Fatal(err)
	}
	send := func(srv *pushsim.Server, app string) pushsim.Delivery {
		t.Helper()
		sub := srv.Subscribe()
		extra := map[string]any{"payload": "x"}
		if app != "" {
			extra["app"] = app
		}
		if got := w.Send(context.Background(), newEvent(t, sub, extra), time.Minute); got.Class != push.Delivered {
			t.Fatalf("Send(app %q) = %+v, want delivered", app, got)
		}
		d := onlyDelivery(t, srv, sub)
		if !d.Verified {
			t.Fatalf("app %q: delivery not verified: %+v", app, d)
		}
		return d
	}
	wantKey := map[string]string{"": def.pub, "default": def.pub, "shop": shop.pub, "news": news.pub}
	wantSub := map[string]string{"": subject, "default": subject, "shop": "mailto:push@shop.example", "news": "https://news.example"}
	first := make(map[string]pushsim.Delivery)
	for _, app := range []string{"", "shop", "news", "default"} {
		d := send(srv, app)
		if d.VAPIDKey != wantKey[app] || d.Subject != wantSub[app] {
			t.Errorf("app %q: signed with k=%s… sub %q, want k=%s… sub %q", app, d.VAPIDKey[:8], d.Subject, wantKey[app][:8], wantSub[app])
		}
		first[app] = d
	}
	if first["default"].JWT != first[""].JWT {
		t.Error(`app "default" minted its own JWT, want the default identity's`)
	}
	if first["shop"].JWT == first["news"].JWT || first["shop"].JWT == first[""].JWT {
		t.Error("two identities share a JWT")
	}
	for _, app := range []string{"", "shop", "news"} {
		if d := send(srv, app); d.JWT != first[app].JWT {
			t.Errorf("app %q: a second send to the same push service minted a new JWT, want one per app and audience", app)
		}
		if d := send(other, app); d.JWT == first[app].JWT || d.VAPIDKey != wantKey[app] {
			t.Errorf("app %q: another push service got the same JWT or another key", app)
		}
	}
	clk.Advance(61 * time.Minute)
	for _, app := range []string{"", "shop", "news"} {
		if d := send(srv, app); d.JWT == first[app].JWT {
			t.Errorf("app %q: JWT reused after an hour, want it refreshed", app)
		}
	}

	before := srv.Requests()
	sub := srv.Subscribe()
	if w.Signs("blog") {
		t.Fatal(`Signs("blog") = true for an app without an identity`)
	}
	got := w.Send(context.Background(), newEvent(t, sub, map[string]any{"app": "blog"}), time.Minute)
	if got.Class != push.Rejected || got.Status != 0 {
		t.Errorf("Send(app blog) = %+v, want rejected without a status", got)
	}
	if n := srv.Requests(); n != before {
		t.Errorf("an event of an app without an identity reached the push service (%d requests)", n-before)
	}
}
