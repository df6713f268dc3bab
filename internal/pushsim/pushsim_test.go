package pushsim_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/SherClockHolmes/webpush-go"
	"github.com/golang-jwt/jwt/v5"

	"github.com/tierpush/tierpush/internal/pushsim"
)

func TestPushDecryptsAndRecords(t *testing.T) {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	tests := []struct {
		name    string
		msg     []byte
		mod     func(*webpush.Options)
		wantTTL int
		wantUrg string
		wantTop string
	}{
		{name: "text", msg: []byte("hello, push"), wantTTL: 60, wantUrg: "high", wantTop: "t1"},
		{name: "empty", msg: []byte{}, wantTTL: 60, wantUrg: "high", wantTop: "t1"},
		{name: "binary", msg: binary, wantTTL: 60, wantUrg: "high", wantTop: "t1"},
		{name: "ends like padding", msg: []byte("ab\x02\x00\x00"), wantTTL: 60, wantUrg: "high", wantTop: "t1"},
		{name: "max 3993 bytes", msg: bytes.Repeat([]byte{'x'}, 3993), wantTTL: 60, wantUrg: "high", wantTop: "t1"},
		{
			name: "ttl 0 without urgency or topic",
			msg:  []byte("{}"),
			mod: func(o *webpush.Options) {
				o.TTL, o.Urgency, o.Topic = 0, "", ""
			},
			wantTTL: 0,
		},
		{
			name: "https subscriber",
			msg:  []byte("x"),
			mod: func(o *webpush.Options) {
				o.Subscriber, o.Urgency = "https://example.com/contact", webpush.UrgencyVeryLow
			},
			wantTTL: 60, wantUrg: "very-low", wantTop: "t1",
		},
	}
	sim, c, ts := newHTTPSim(t, pushsim.DefaultConfig())
	keys := newVAPID(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := sim.Subscribe()
			opts := defaultOptions(c, keys)
			if tt.mod != nil {
				tt.mod(opts)
			}
			before := time.Now()
			resp := send(t, sub, tt.msg, opts)
			if got, want := resp.StatusCode, http.StatusCreated; got != want {
				t.Fatalf("status = %d, want %d", got, want)
			}
			if got := resp.Header.Get("Location"); !strings.HasPrefix(got, ts.URL+"/m/") {
				t.Errorf("Location = %q, want prefix %q", got, ts.URL+"/m/")
			}
			d := lastDelivery(t, sim)
			if got, want := d.SubID, sub.ID; got != want {
				t.Errorf("SubID = %q, want %q", got, want)
			}
			if !d.Verified || d.Payload == nil {
				t.Fatalf("Verified = %v, Payload nil = %v; want verified with payload", d.Verified, d.Payload == nil)
			}
			if got, want := d.Payload, tt.msg; !bytes.Equal(got, want) {
				t.Errorf("Payload = %q, want %q", got, want)
			}
			if got, want := d.TTL, tt.wantTTL; got != want {
				t.Errorf("TTL = %d, want %d", got, want)
			}
			if got, want := d.Urgency, tt.wantUrg; got != want {
				t.Errorf("Urgency = %q, want %q", got, want)
			}
			if got, want := d.Topic, tt.wantTop; got != want {
				t.Errorf("Topic = %q, want %q", got, want)
			}
			if got, want := d.Audience, ts.URL; got != want {
				t.Errorf("Audience = %q, want %q", got, want)
			}
			wantSub := "mailto:ops@example.com"
			if opts.Subscriber != "ops@example.com" {
				wantSub = opts.Subscriber
			}
			if got := d.Subject; got != wantSub {
				t.Errorf("Subject = %q, want %q", got, wantSub)
			}
			if d.JWTExp.Before(before) || d.JWTExp.After(before.Add(24*time.Hour)) {
				t.Errorf("JWTExp = %v, want within 24h after %v", d.JWTExp, before)
			}
			if got, want := d.VAPIDKey, keys.pub; got != want {
				t.Errorf("VAPIDKey = %q, want %q", got, want)
			}
			if got, want := d.Status, http.StatusCreated; got != want {
				t.Errorf("recorded Status = %d, want %d", got, want)
			}
		})
	}
	st := sim.Stats()
	if got, want := st.ByStatus[http.StatusCreated], int64(len(tests)); got != want {
		t.Errorf("Stats.ByStatus[201] = %d, want %d", got, want)
	}
	if got, want := st.Decrypted, int64(len(tests)); got != want {
		t.Errorf("Stats.Decrypted = %d, want %d", got, want)
	}
	if got, want := sim.Requests(), int64(len(tests)); got != want {
		t.Errorf("Requests() = %d, want %d", got, want)
	}
}

type wantResp struct {
	status int
	header map[string]string
}

func TestScripts(t *testing.T) {
	tests := []struct {
		name   string
		script []pushsim.Response
		want   []wantResp
	}{
		{
			name:   "503 then 201",
			script: []pushsim.Response{{Status: 503}},
			want:   []wantResp{{status: 503}, {status: 201}, {status: 201}},
		},
		{
			name:   "always 500",
			script: []pushsim.Response{{Status: 500, Repeat: true}},
			want:   []wantResp{{status: 500}, {status: 500}, {status: 500}, {status: 500}},
		},
		{
			name:   "429 with Retry-After",
			script: []pushsim.Response{{Status: 429, RetryAfter: "7"}, {Status: 429, RetryAfter: "Wed, 21 Oct 2037 07:28:00 GMT"}},
			want: []wantResp{
				{status: 429, header: map[string]string{"Retry-After": "7"}},
				{status: 429, header: map[string]string{"Retry-After": "Wed, 21 Oct 2037 07:28:00 GMT"}},
				{status: 201, header: map[string]string{"Retry-After": ""}},
			},
		},
		{
			name:   "WNS throttled header then default status",
			script: []pushsim.Response{{Status: 406, Header: map[string]string{"X-WNS-Status": "appthrottled"}}, {}},
			want: []wantResp{
				{status: 406, header: map[string]string{"X-WNS-Status": "appthrottled"}},
				{status: 201},
			},
		},
		{
			name:   "gone and too large forever",
			script: []pushsim.Response{{Status: 410}, {Status: 413, Repeat: true}},
			want:   []wantResp{{status: 410}, {status: 413}, {status: 413}},
		},
	}
	// Failure fractions must not touch scripted subscriptions.
	cfg := pushsim.DefaultConfig()
	cfg.Fail503 = 1
	sim, c, _ := newHTTPSim(t, cfg)
	keys := newVAPID(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := sim.Subscribe(tt.script...)
			for i, w := range tt.want {
				resp := send(t, sub, []byte("m"), defaultOptions(c, keys))
				if got := resp.StatusCode; got != w.status {
					t.Errorf("request %d: status = %d, want %d", i, got, w.status)
				}
				for k, v := range w.header {
					if got := resp.Header.Get(k); got != v {
						t.Errorf("request %d: %s = %q, want %q", i, k, got, v)
					}
				}
			}
		})
	}
}

func TestSubscriptionGone(t *testing.T) {
	sim, c, ts := newHTTPSim(t, pushsim.DefaultConfig())
	keys := newVAPID(t)
	sub := sim.Subscribe()

	unknown := sub
	unknown.ID = "NOSUCHSUBSCRIPTION"
	unknown.Endpoint = ts.URL + "/push/" + unknown.ID
	if got, want := send(t, unknown, []byte("m"), defaultOptions(c, keys)).StatusCode, http.StatusNotFound; got != want {
		t.Errorf("unknown subscription: status = %d, want %d", got, want)
	}
	if got, want := send(t, sub, []byte("m"), defaultOptions(c, keys)).StatusCode, http.StatusCreated; got != want {
		t.Errorf("before Unsubscribe: status = %d, want %d", got, want)
	}
	if !sim.Unsubscribe(sub.ID) {
		t.Fatal("Unsubscribe = false, want true")
	}
	if sim.Unsubscribe(unknown.ID) {
		t.Error("Unsubscribe(unknown) = true, want false")
	}
	if got, want := send(t, sub, []byte("m"), defaultOptions(c, keys)).StatusCode, http.StatusGone; got != want {
		t.Errorf("after Unsubscribe: status = %d, want %d", got, want)
	}
}

func TestRateLimit(t *testing.T) {
	// A refill of 1 token per 1000 s: the bucket cannot refill during the test however slow
	// the machine is, so exactly Burst requests pass.
	tests := []struct {
		name           string
		burst          int
		retryAfter     int
		sends          int
		wantCreated    int
		wantRetryAfter string
	}{
		{name: "burst 3", burst: 3, retryAfter: 1, sends: 6, wantCreated: 3, wantRetryAfter: "1"},
		{name: "burst 1 retry-after 5", burst: 1, retryAfter: 5, sends: 3, wantCreated: 1, wantRetryAfter: "5"},
		{name: "no retry-after", burst: 2, retryAfter: 0, sends: 3, wantCreated: 2, wantRetryAfter: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pushsim.DefaultConfig()
			cfg.RateLimit, cfg.Burst, cfg.RetryAfter = 0.001, tt.burst, tt.retryAfter
			sim, c, ts := newHTTPSim(t, cfg)
			keys := newVAPID(t)
			sub := sim.Subscribe()
			for i := range tt.sends {
				resp := send(t, sub, []byte("m"), defaultOptions(c, keys))
				want := http.StatusCreated
				if i >= tt.wantCreated {
					want = http.StatusTooManyRequests
					if got := resp.Header.Get("Retry-After"); got != tt.wantRetryAfter {
						t.Errorf("request %d: Retry-After = %q, want %q", i, got, tt.wantRetryAfter)
					}
				}
				if got := resp.StatusCode; got != want {
					t.Errorf("request %d: status = %d, want %d", i, got, want)
				}
			}
			// Another origin (same server addressed as localhost) has its own bucket.
			sim.SetBaseURL(strings.Replace(ts.URL, "127.0.0.1", "localhost", 1))
			other := sim.Subscribe()
			if got, want := send(t, other, []byte("m"), defaultOptions(c, keys)).StatusCode, http.StatusCreated; got != want {
				t.Errorf("other origin: status = %d, want %d", got, want)
			}
		})
	}
}

// TestInMemorySynctest runs the simulator on an in-memory listener inside a synctest bubble:
// the token bucket refills with fake time, latency is served by fake timers, and Close leaves
// no goroutine behind.
func TestInMemorySynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pushsim.DefaultConfig()
		cfg.RateLimit, cfg.Burst = 1, 2
		cfg.Latency = 20 * time.Millisecond
		sim, err := pushsim.New(cfg, nil)
		if err != nil {
			t.Fatalf("new simulator: %v", err)
		}
		ln := newMemListener()
		served := make(chan error, 1)
		go func() { served <- sim.Serve(ln) }()
		sim.SetBaseURL("http://push.sim")
		tr := &http.Transport{DialContext: ln.DialContext}
		c := &http.Client{Transport: tr}
		keys := newVAPID(t)
		sub := sim.Subscribe()

		steps := []struct {
			wait time.Duration
			want int
		}{
			{0, http.StatusCreated},
			{0, http.StatusCreated},
			{0, http.StatusTooManyRequests},
			{time.Second, http.StatusCreated}, // one token back
			{0, http.StatusTooManyRequests},
			{5 * time.Second, http.StatusCreated}, // refilled to burst, not beyond
			{0, http.StatusCreated},
			{0, http.StatusTooManyRequests},
		}
		for i, st := range steps {
			time.Sleep(st.wait)
			start := time.Now()
			resp := send(t, sub, []byte("m"), defaultOptions(c, keys))
			if got := resp.StatusCode; got != st.want {
				t.Errorf("step %d: status = %d, want %d", i, got, st.want)
			}
			if got := time.Since(start); got < cfg.Latency {
				t.Errorf("step %d: answered after %v of fake time, want >= %v", i, got, cfg.Latency)
			}
		}
		if got, want := sim.Stats().ByStatus[http.StatusTooManyRequests], int64(3); got != want {
			t.Errorf("Stats.ByStatus[429] = %d, want %d", got, want)
		}

		tr.CloseIdleConnections()
		if err := sim.Close(t.Context()); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

func TestRejects(t *testing.T) {
	other := newVAPID(t)
	jwtWith := func(mut func(jwt.MapClaims)) func(testing.TB, *http.Request, vapidKeys) {
		return func(t testing.TB, r *http.Request, k vapidKeys) {
			claims := jwt.MapClaims{
				"aud": r.URL.Scheme + "://" + r.URL.Host,
				"exp": time.Now().Add(time.Hour).Unix(),
				"sub": "mailto:ops@example.com",
			}
			mut(claims)
			replaceAuth(r, signJWT(t, k, claims), "")
		}
	}
	tests := []struct {
		name       string
		cfg        func(*pushsim.Config, vapidKeys)
		mod        func(t testing.TB, r *http.Request, k vapidKeys)
		wantStatus int
	}{
		{name: "missing TTL", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Del("TTL") }, wantStatus: 400},
		{name: "negative TTL", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Set("TTL", "-1") }, wantStatus: 400},
		{name: "non-numeric TTL", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Set("TTL", "1h") }, wantStatus: 400},
		{name: "bad urgency", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Set("Urgency", "urgent") }, wantStatus: 400},
		{name: "topic too long", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Set("Topic", strings.Repeat("a", 33)) }, wantStatus: 400},
		{name: "topic not base64url", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Set("Topic", "order.42") }, wantStatus: 400},
		{name: "wrong content-encoding", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Set("Content-Encoding", "aesgcm") }, wantStatus: 400},
		{name: "missing authorization", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Del("Authorization") }, wantStatus: 401},
		{name: "webpush scheme", mod: func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Header.Set("Authorization", "WebPush abc") }, wantStatus: 401},
		{
			name:       "signature by another key",
			mod:        func(_ testing.TB, r *http.Request, _ vapidKeys) { replaceAuth(r, "", other.pub) },
			wantStatus: 403,
		},
		{
			name:       "key other than the configured one",
			cfg:        func(c *pushsim.Config, _ vapidKeys) { c.VAPIDPublicKey = other.pub },
			wantStatus: 403,
		},
		{
			name:       "audience is another origin",
			mod:        func(_ testing.TB, r *http.Request, _ vapidKeys) { r.Host = "push.example" },
			wantStatus: 403,
		},
		{name: "expired jwt", mod: jwtWith(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() }), wantStatus: 403},
		{name: "jwt beyond 24h", mod: jwtWith(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(25 * time.Hour).Unix() }), wantStatus: 403},
		{name: "jwt without exp", mod: jwtWith(func(c jwt.MapClaims) { delete(c, "exp") }), wantStatus: 403},
		{name: "jwt without sub", mod: jwtWith(func(c jwt.MapClaims) { delete(c, "sub") }), wantStatus: 403},
		{name: "jwt sub not a contact", mod: jwtWith(func(c jwt.MapClaims) { c["sub"] = "ops@example.com" }), wantStatus: 403},
		{name: "jwt aud with path", mod: jwtWith(func(c jwt.MapClaims) { c["aud"] = c["aud"].(string) + "/push" }), wantStatus: 403},
		{name: "hand-made jwt accepted", mod: jwtWith(func(jwt.MapClaims) {}), wantStatus: 201},
		{
			name: "tampered ciphertext",
			mod: func(t testing.TB, r *http.Request, _ vapidKeys) {
				b := readBody(t, r)
				b[len(b)-1] ^= 1
				setBody(r, b)
			},
			wantStatus: 400,
		},
		{
			name: "tampered salt",
			mod: func(t testing.TB, r *http.Request, _ vapidKeys) {
				b := readBody(t, r)
				b[0] ^= 1
				setBody(r, b)
			},
			wantStatus: 400,
		},
		{
			name:       "truncated body",
			mod:        func(t testing.TB, r *http.Request, _ vapidKeys) { setBody(r, readBody(t, r)[:100]) },
			wantStatus: 400,
		},
		{
			name:       "body over 4096 bytes",
			mod:        func(t testing.TB, r *http.Request, _ vapidKeys) { setBody(r, append(readBody(t, r), 0)) },
			wantStatus: 413,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := newVAPID(t)
			cfg := pushsim.DefaultConfig()
			if tt.cfg != nil {
				tt.cfg(&cfg, keys)
			}
			sim, c, _ := newHTTPSim(t, cfg)
			var client webpush.HTTPClient = c
			if tt.mod != nil {
				client = tamper(c, func(t testing.TB, r *http.Request) { tt.mod(t, r, keys) })(t)
			}
			resp := send(t, sim.Subscribe(), []byte("secret message"), defaultOptions(client, keys))
			if got := resp.StatusCode; got != tt.wantStatus {
				t.Errorf("status = %d, want %d", got, tt.wantStatus)
			}
			d := lastDelivery(t, sim)
			if got := d.Status; got != tt.wantStatus {
				t.Errorf("recorded Status = %d, want %d (reason %q)", got, tt.wantStatus, d.Reason)
			}
			if tt.wantStatus != http.StatusCreated && d.Payload != nil {
				t.Errorf("Payload = %q, want nil for a rejected request", d.Payload)
			}
		})
	}
}

func TestFailureFractions(t *testing.T) {
	tests := []struct {
		name           string
		cfg            func(*pushsim.Config)
		want           int
		wantRetryAfter string
	}{
		{name: "none", cfg: func(*pushsim.Config) {}, want: 201},
		{name: "503", cfg: func(c *pushsim.Config) { c.Fail503 = 1 }, want: 503},
		{name: "429", cfg: func(c *pushsim.Config) { c.Fail429, c.RetryAfter = 1, 3 }, want: 429, wantRetryAfter: "3"},
		{name: "410", cfg: func(c *pushsim.Config) { c.Fail410 = 1 }, want: 410},
		{name: "500", cfg: func(c *pushsim.Config) { c.Fail500 = 1 }, want: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pushsim.DefaultConfig()
			tt.cfg(&cfg)
			sim, c, _ := newHTTPSim(t, cfg)
			keys := newVAPID(t)
			sub := sim.Subscribe()
			for i := range 3 {
				resp := send(t, sub, []byte("m"), defaultOptions(c, keys))
				if got := resp.StatusCode; got != tt.want {
					t.Errorf("request %d: status = %d, want %d", i, got, tt.want)
				}
				if got := resp.Header.Get("Retry-After"); got != tt.wantRetryAfter {
					t.Errorf("request %d: Retry-After = %q, want %q", i, got, tt.wantRetryAfter)
				}
			}
			// Failures are injected after verification: the payload was still decrypted.
			if got, want := sim.Stats().Decrypted, int64(3); got != want {
				t.Errorf("Stats.Decrypted = %d, want %d", got, want)
			}
		})
	}
}

func TestVerifyEvery(t *testing.T) {
	cfg := pushsim.DefaultConfig()
	cfg.VerifyEvery = 3
	sim, c, _ := newHTTPSim(t, cfg)
	keys := newVAPID(t)
	sub := sim.Subscribe()
	// Request 2 has a tampered body: sampled out, so it is not decrypted and passes.
	corrupt := tamper(c, func(t testing.TB, r *http.Request) {
		b := readBody(t, r)
		b[len(b)-1] ^= 1
		setBody(r, b)
	})(t)
	for i := range 7 {
		var client webpush.HTTPClient = c
		if i == 1 {
			client = corrupt
		}
		if got, want := send(t, sub, []byte("m"), defaultOptions(client, keys)).StatusCode, http.StatusCreated; got != want {
			t.Errorf("request %d: status = %d, want %d", i, got, want)
		}
	}
	var got []bool
	for _, d := range sim.Deliveries() {
		got = append(got, d.Payload != nil)
	}
	want := []bool{true, false, false, true, false, false, true}
	if !equalBools(got, want) {
		t.Errorf("decrypted per request = %v, want %v", got, want)
	}
	if got, want := sim.Stats().Decrypted, int64(3); got != want {
		t.Errorf("Stats.Decrypted = %d, want %d", got, want)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestTLSHTTP2(t *testing.T) {
	cfg := pushsim.DefaultConfig()
	cfg.TLS = true
	sim, err := pushsim.New(cfg, nil)
	if err != nil {
		t.Fatalf("new simulator: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- sim.Serve(ln) }()
	port := ln.Addr().(*net.TCPAddr).Port

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: sim.CertPool()}, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	keys := newVAPID(t)

	tests := []struct {
		name string
		base string
	}{
		{name: "ipv4", base: "https://127.0.0.1:" + strconv.Itoa(port)},
		{name: "localhost", base: "https://localhost:" + strconv.Itoa(port)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim.SetBaseURL(tt.base)
			sub := sim.Subscribe()
			resp := send(t, sub, []byte("over h2"), defaultOptions(c, keys))
			if got, want := resp.StatusCode, http.StatusCreated; got != want {
				t.Fatalf("status = %d, want %d", got, want)
			}
			if got, want := resp.ProtoMajor, 2; got != want {
				t.Errorf("response ProtoMajor = %d, want %d", got, want)
			}
			d := lastDelivery(t, sim)
			if got, want := d.Proto, "HTTP/2.0"; got != want {
				t.Errorf("recorded Proto = %q, want %q", got, want)
			}
			if got, want := d.Audience, tt.base; got != want {
				t.Errorf("Audience = %q, want %q", got, want)
			}
			if got, want := string(d.Payload), "over h2"; got != want {
				t.Errorf("Payload = %q, want %q", got, want)
			}
		})
	}

	// Without this, graceful shutdown waits for the idle h2 connection.
	tr.CloseIdleConnections()
	for i := range 2 { // Close is safe twice
		if err := sim.Close(t.Context()); err != nil {
			t.Errorf("Close #%d: %v", i+1, err)
		}
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestServeDerivesBaseURL(t *testing.T) {
	sim, err := pushsim.New(pushsim.DefaultConfig(), nil)
	if err != nil {
		t.Fatalf("new simulator: %v", err)
	}
	if got, want := sim.BaseURL(), "http://127.0.0.1:8443"; got != want {
		t.Errorf("BaseURL before Serve = %q, want %q", got, want)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- sim.Serve(ln) }()
	want := "http://" + ln.Addr().String()
	// Serve sets the base URL before it accepts; a request that succeeds proves Serve runs.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, want+"/healthz", nil)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	resp.Body.Close()
	if got := sim.BaseURL(); got != want {
		t.Errorf("BaseURL after Serve = %q, want %q", got, want)
	}
	if got := sim.CertPool(); got != nil {
		t.Errorf("CertPool without TLS = %v, want nil", got)
	}
	if err := sim.Close(t.Context()); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestListenAndServe(t *testing.T) {
	cfg := pushsim.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	sim, err := pushsim.New(cfg, nil)
	if err != nil {
		t.Fatalf("new simulator: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- sim.ListenAndServe(ctx) }()

	// Poll with a deadline until Serve has derived the real address.
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for sim.BaseURL() == "http://127.0.0.1:0" {
		if time.Now().After(deadline) {
			t.Fatal("ListenAndServe did not start within 10s")
		}
		<-tick.C
	}
	keys := newVAPID(t)
	if got, want := send(t, sim.Subscribe(), []byte("m"), defaultOptions(http.DefaultClient, keys)).StatusCode, http.StatusCreated; got != want {
		t.Errorf("status = %d, want %d", got, want)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("ListenAndServe after cancel = %v, want nil", err)
	}
}

func TestHTTPEndpoints(t *testing.T) {
	sim, c, ts := newHTTPSim(t, pushsim.DefaultConfig())
	keys := newVAPID(t)

	post := func(t *testing.T, path string) *http.Response {
		t.Helper()
		resp, err := c.Post(ts.URL+path, "application/json", nil)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}

	resp := post(t, "/subscribe?script=503,429:2,201")
	if got, want := resp.StatusCode, http.StatusCreated; got != want {
		t.Fatalf("POST /subscribe status = %d, want %d", got, want)
	}
	var js struct {
		ID       string `json:"id"`
		Endpoint string `json:"endpoint"`
		Keys     struct {
			P256dh string `json:"p256dh"`
			Auth   string `json:"auth"`
		} `json:"keys"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&js); err != nil {
		t.Fatalf("decode /subscribe: %v", err)
	}
	if got, want := js.Endpoint, ts.URL+"/push/"+js.ID; got != want {
		t.Errorf("endpoint = %q, want %q", got, want)
	}
	sub := pushsim.Subscription{ID: js.ID, Endpoint: js.Endpoint, P256dh: js.Keys.P256dh, Auth: js.Keys.Auth}
	for i, w := range []wantResp{{status: 503}, {status: 429, header: map[string]string{"Retry-After": "2"}}, {status: 201}, {status: 201}} {
		resp := send(t, sub, []byte("m"), defaultOptions(c, keys))
		if got := resp.StatusCode; got != w.status {
			t.Errorf("request %d: status = %d, want %d", i, got, w.status)
		}
		for k, v := range w.header {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("request %d: %s = %q, want %q", i, k, got, v)
			}
		}
	}

	if got, want := post(t, "/subscribe?script=500*,201").StatusCode, http.StatusBadRequest; got != want {
		t.Errorf("POST /subscribe with repeat not last: status = %d, want %d", got, want)
	}
	if got, want := post(t, "/subscribe?script=99").StatusCode, http.StatusBadRequest; got != want {
		t.Errorf("POST /subscribe with status 99: status = %d, want %d", got, want)
	}

	req, err := http.NewRequest(http.MethodDelete, ts.URL+"/subscribe/"+sub.ID, nil)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	dresp, err := c.Do(req)
	if err != nil {
		t.Fatalf("DELETE /subscribe: %v", err)
	}
	dresp.Body.Close()
	if got, want := dresp.StatusCode, http.StatusNoContent; got != want {
		t.Errorf("DELETE /subscribe status = %d, want %d", got, want)
	}
	if got, want := send(t, sub, []byte("m"), defaultOptions(c, keys)).StatusCode, http.StatusGone; got != want {
		t.Errorf("after DELETE: status = %d, want %d", got, want)
	}

	sresp, err := c.Get(ts.URL + "/stats")
	if err != nil {
		t.Fatalf("GET /stats: %v", err)
	}
	defer sresp.Body.Close()
	var got pushsim.Stats
	if err := json.NewDecoder(sresp.Body).Decode(&got); err != nil {
		t.Fatalf("decode /stats: %v", err)
	}
	want := pushsim.Stats{Requests: 5, Decrypted: 4, ByStatus: map[int]int64{201: 2, 410: 1, 429: 1, 503: 1}}
	if got.Requests != want.Requests || got.Decrypted != want.Decrypted || len(got.ByStatus) != len(want.ByStatus) {
		t.Fatalf("GET /stats = %+v, want %+v", got, want)
	}
	for k, v := range want.ByStatus {
		if got.ByStatus[k] != v {
			t.Errorf("GET /stats by_status[%d] = %d, want %d", k, got.ByStatus[k], v)
		}
	}

	dresp2, err := c.Get(ts.URL + "/deliveries")
	if err != nil {
		t.Fatalf("GET /deliveries: %v", err)
	}
	defer dresp2.Body.Close()
	var ds []pushsim.Delivery
	if err := json.NewDecoder(dresp2.Body).Decode(&ds); err != nil {
		t.Fatalf("decode /deliveries: %v", err)
	}
	if got, want := len(ds), len(sim.Deliveries()); got != want || got != 5 {
		t.Errorf("GET /deliveries has %d entries, Deliveries() %d, want 5", got, want)
	}
}

func TestWaitFor(t *testing.T) {
	sim, c, _ := newHTTPSim(t, pushsim.DefaultConfig())
	keys := newVAPID(t)
	sub := sim.Subscribe()
	errs := make(chan error, 1)
	go func() {
		for range 3 {
			n := 1
			resp, err := webpush.SendNotification([]byte("m")[:n:n], &webpush.Subscription{
				Endpoint: sub.Endpoint, Keys: webpush.Keys{P256dh: sub.P256dh, Auth: sub.Auth},
			}, defaultOptions(c, keys))
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
		}
		errs <- nil
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := sim.WaitFor(ctx, func(st pushsim.Stats) bool { return st.ByStatus[201] == 3 }); err != nil {
		t.Fatalf("WaitFor: %v", err)
	}
	if err := <-errs; err != nil {
		t.Fatalf("send: %v", err)
	}

	canceled, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if err := sim.WaitFor(canceled, func(pushsim.Stats) bool { return false }); err == nil {
		t.Error("WaitFor with a canceled context = nil, want an error")
	}
}

func TestKeepDeliveries(t *testing.T) {
	cfg := pushsim.DefaultConfig()
	cfg.KeepDeliveries = 2
	sim, c, _ := newHTTPSim(t, cfg)
	keys := newVAPID(t)
	sub := sim.Subscribe()
	for _, m := range []string{"a", "b", "c", "d", "e"} {
		send(t, sub, []byte(m), defaultOptions(c, keys))
	}
	var got []string
	for _, d := range sim.Deliveries() {
		got = append(got, string(d.Payload))
	}
	if want := []string{"d", "e"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Deliveries payloads = %q, want %q", got, want)
	}
	if got, want := sim.Stats().Requests, int64(5); got != want {
		t.Errorf("Stats.Requests = %d, want %d", got, want)
	}
}

// TestClientGone: a request its sender gave up on before the answer (a
// send timeout) is recorded with ClientGone, so a harness can tell the
// push it was sent again for from a duplicate; one answered in time is not.
func TestClientGone(t *testing.T) {
	sim, c, _ := newHTTPSim(t, pushsim.DefaultConfig())
	keys := newVAPID(t)
	slow := sim.Subscribe(pushsim.Response{Latency: 10 * time.Second})
	impatient := &http.Client{Transport: c.Transport, Timeout: 100 * time.Millisecond}
	_, err := webpush.SendNotification([]byte("m"), &webpush.Subscription{
		Endpoint: slow.Endpoint, Keys: webpush.Keys{P256dh: slow.P256dh, Auth: slow.Auth},
	}, defaultOptions(impatient, keys))
	if err == nil {
		t.Fatal("a 10 s answer came within a 100 ms timeout")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sim.Deliveries()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if d := lastDelivery(t, sim); !d.ClientGone || d.Status != http.StatusCreated {
		t.Errorf("request given up on: %+v, want status 201 and ClientGone", d)
	}

	send(t, sim.Subscribe(), []byte("m"), defaultOptions(c, keys))
	if d := lastDelivery(t, sim); d.ClientGone {
		t.Errorf("request answered in time: ClientGone set")
	}
}
