package dispatch_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/push"
)

// BenchmarkSend is one whole send, encryption to the drained answer, over
// HTTP/2 and TLS to a push service that answers 201 at once: what a send
// costs the processor, the client's work included.
func BenchmarkSend(b *testing.B) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()

	keys := newKeys(b)
	hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{TLS: &dispatch.TLSConfig{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}})
	defer hc.CloseIdleConnections()
	w, err := dispatch.New(dispatch.Config{VAPID: dispatch.VAPID{PublicKey: keys.pub, PrivateKey: keys.priv, Subject: subject}}, hc)
	if err != nil {
		b.Fatal(err)
	}
	ua, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	decode := func(path string) *event.Event {
		v, _ := json.Marshal(map[string]any{
			"id": "evt-01",
			"subscription": map[string]any{"endpoint": srv.URL + path, "keys": map[string]any{
				"p256dh": base64.RawURLEncoding.EncodeToString(ua.PublicKey().Bytes()),
				"auth":   base64.RawURLEncoding.EncodeToString(auth),
			}},
			"payload": `{"title":"tierpush bench","body":"Your order has shipped"}`,
			"urgency": "normal",
		})
		e, err := event.Decode(v, time.Now(), event.DefaultRules())
		if err != nil {
			b.Fatal(err)
		}
		return e
	}
	e := decode("/push/abc")
	// Subscriptions of their own, as a push service's are: FCM's endpoint
	// path carries a token of about 150 characters, and each new path is
	// one more entry in the connection's header table (HPACK).
	distinct := make([]*event.Event, 4096)
	for i := range distinct {
		token := make([]byte, 112)
		rand.Read(token)
		distinct[i] = decode("/fcm/send/" + base64.RawURLEncoding.EncodeToString(token))
	}
	ctx := context.Background()
	if r := w.Send(ctx, e, time.Hour); r.Class != push.Delivered { // the connection, once
		b.Fatalf("Send = %+v", r)
	}
	b.Run("one at a time", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r := w.Send(ctx, e, time.Hour); r.Class != push.Delivered {
				b.Fatalf("Send = %+v", r)
			}
		}
	})
	b.Run("64 at once", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(64 / runtime.GOMAXPROCS(0))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if r := w.Send(ctx, e, time.Hour); r.Class != push.Delivered {
					b.Errorf("Send = %+v", r)
					return
				}
			}
		})
	})
	b.Run("64 at once, distinct endpoints", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(64 / runtime.GOMAXPROCS(0))
		var next atomic.Uint64
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				e := distinct[next.Add(1)%uint64(len(distinct))]
				if r := w.Send(ctx, e, time.Hour); r.Class != push.Delivered {
					b.Errorf("Send = %+v", r)
					return
				}
			}
		})
	})
}
