package pushsim_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/SherClockHolmes/webpush-go"
	"github.com/golang-jwt/jwt/v5"

	"github.com/tierpush/tierpush/internal/pushsim"
)

// vapidKeys is an application server key pair in webpush-go's encoding.
type vapidKeys struct{ priv, pub string }

func newVAPID(t testing.TB) vapidKeys {
	t.Helper()
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatalf("generate VAPID keys: %v", err)
	}
	return vapidKeys{priv: priv, pub: pub}
}

// signJWT signs claims with k's private key, for hand-crafted VAPID tokens.
func signJWT(t testing.TB, k vapidKeys, claims jwt.MapClaims) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(k.priv)
	if err != nil {
		t.Fatalf("decode VAPID private key: %v", err)
	}
	key, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), raw)
	if err != nil {
		t.Fatalf("parse VAPID private key: %v", err)
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodES256, claims).SignedString(key)
	if err != nil {
		t.Fatalf("sign JWT: %v", err)
	}
	return s
}

// doFunc adapts a function to webpush.HTTPClient.
type doFunc func(*http.Request) (*http.Response, error)

func (f doFunc) Do(r *http.Request) (*http.Response, error) { return f(r) }

// tamper returns a client that lets mod change each request before c sends it.
func tamper(c webpush.HTTPClient, mod func(t testing.TB, r *http.Request)) func(testing.TB) webpush.HTTPClient {
	return func(t testing.TB) webpush.HTTPClient {
		return doFunc(func(r *http.Request) (*http.Response, error) {
			mod(t, r)
			return c.Do(r)
		})
	}
}

// setBody replaces a request body.
func setBody(r *http.Request, b []byte) {
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.GetBody = nil
}

// readBody reads and restores a request body.
func readBody(t testing.TB, r *http.Request) []byte {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatalf("read request body: %v", err)
	}
	return b
}

func defaultOptions(c webpush.HTTPClient, k vapidKeys) *webpush.Options {
	return &webpush.Options{
		HTTPClient:      c,
		Subscriber:      "ops@example.com",
		VAPIDPublicKey:  k.pub,
		VAPIDPrivateKey: k.priv,
		TTL:             60,
		Urgency:         webpush.UrgencyHigh,
		Topic:           "t1",
	}
}

// send pushes msg to sub with webpush-go and returns the response with its body closed.
func send(t testing.TB, sub pushsim.Subscription, msg []byte, opts *webpush.Options) *http.Response {
	t.Helper()
	n := len(msg)
	resp, err := webpush.SendNotification(msg[:n:n], &webpush.Subscription{
		Endpoint: sub.Endpoint,
		Keys:     webpush.Keys{P256dh: sub.P256dh, Auth: sub.Auth},
	}, opts)
	if err != nil {
		t.Fatalf("send notification: %v", err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("read response body: %v", err)
	}
	resp.Body.Close()
	return resp
}

// newHTTPSim serves a simulator for cfg on an httptest server and returns it with a client.
func newHTTPSim(t testing.TB, cfg pushsim.Config) (*pushsim.Server, *http.Client, *httptest.Server) {
	t.Helper()
	sim, err := pushsim.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("new simulator: %v", err)
	}
	ts := httptest.NewServer(sim.Handler())
	t.Cleanup(ts.Close)
	sim.SetBaseURL(ts.URL)
	return sim, ts.Client(), ts
}

// lastDelivery returns the most recent delivery.
func lastDelivery(t testing.TB, sim *pushsim.Server) pushsim.Delivery {
	t.Helper()
	ds := sim.Deliveries()
	if len(ds) == 0 {
		t.Fatal("no deliveries recorded")
	}
	return ds[len(ds)-1]
}

// replaceAuth swaps the t= and/or k= parameters of a VAPID Authorization header.
func replaceAuth(r *http.Request, tok, key string) {
	h := r.Header.Get("Authorization")
	params := strings.TrimPrefix(h, "vapid ")
	var oldT, oldK string
	for p := range strings.SplitSeq(params, ",") {
		p = strings.TrimSpace(p)
		if v, ok := strings.CutPrefix(p, "t="); ok {
			oldT = v
		}
		if v, ok := strings.CutPrefix(p, "k="); ok {
			oldK = v
		}
	}
	if tok == "" {
		tok = oldT
	}
	if key == "" {
		key = oldK
	}
	r.Header.Set("Authorization", "vapid t="+tok+", k="+key)
}

// memListener is an in-memory net.Listener whose Dial hands net.Pipe ends to Accept, so an
// HTTP server and client can run inside a testing/synctest bubble.
type memListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *memListener) Addr() net.Addr { return memAddr{} }

func (l *memListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }
