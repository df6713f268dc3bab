package dispatch

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pushsim"
)

type uaKeys struct {
	priv *ecdh.PrivateKey
	auth []byte
}

func newUA(tb testing.TB) uaKeys {
	tb.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	return uaKeys{priv: k, auth: auth}
}

func TestEncryptDecryptsAtThePushService(t *testing.T) {
	ua := newUA(t)
	pub := ua.priv.PublicKey().Bytes()
	tests := []struct {
		name    string
		payload []byte
	}{
		{"empty", nil},
		{"one byte", []byte{0}},
		{"text", []byte(`{"title":"hello","body":"✓"}`)},
		{"trailing zeros kept", []byte{1, 2, 0, 0}},
		{"ends with the delimiter byte", []byte{2, 2}},
		{"maximum", bytes.Repeat([]byte{0xA5}, MaxPayload)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := encrypt(tt.payload, pub, ua.auth)
			if err != nil {
				t.Fatalf("encrypt() error = %v", err)
			}
			if len(body) != recordSize {
				t.Errorf("body is %d bytes, want %d (padded like webpush-go)", len(body), recordSize)
			}
			got, err := pushsim.Decrypt(body, ua.priv, ua.auth)
			if err != nil {
				t.Fatalf("pushsim.Decrypt() error = %v", err)
			}
			if !bytes.Equal(got, tt.payload) {
				t.Errorf("decrypted %x, want %x", got, tt.payload)
			}
		})
	}
}

func TestEncryptFreshKeyAndSalt(t *testing.T) {
	ua := newUA(t)
	pub := ua.priv.PublicKey().Bytes()
	a, err := encrypt([]byte("x"), pub, ua.auth)
	if err != nil {
		t.Fatal(err)
	}
	b, err := encrypt([]byte("x"), pub, ua.auth)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a[:saltLen], b[:saltLen]) {
		t.Error("two messages share a salt")
	}
	if bytes.Equal(a[saltLen+5:headerLen], b[saltLen+5:headerLen]) {
		t.Error("two messages share an ephemeral key")
	}
}

func TestEncryptRefuses(t *testing.T) {
	ua := newUA(t)
	pub := ua.priv.PublicKey().Bytes()
	if _, err := encrypt(make([]byte, MaxPayload+1), pub, ua.auth); !errors.Is(err, errPayloadTooLarge) {
		t.Errorf("encrypt(%d bytes) error = %v, want errPayloadTooLarge", MaxPayload+1, err)
	}
	bad := bytes.Clone(pub)
	bad[64] ^= 1 // off the curve
	if _, err := encrypt([]byte("x"), bad, ua.auth); err == nil {
		t.Error("encrypt() to a point off the curve succeeded")
	}
}

func TestMaxPayloadMatchesEventRules(t *testing.T) {
	if got, want := MaxPayload, event.DefaultRules().MaxPayload; got != want {
		t.Errorf("MaxPayload = %d, event.DefaultRules().MaxPayload = %d", got, want)
	}
}

// noSend answers every request without a network, so the benchmarks
// measure building the request.
type noSend struct{}

func (noSend) Do(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 201}, nil
}

// BenchmarkRequest is the CPU of one push request as the processor builds
// it, against webpush-go's, which also signs a VAPID JWT per send.
func BenchmarkRequest(b *testing.B) {
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		b.Fatal(err)
	}
	ua := newUA(b)
	e := &event.Event{
		Endpoint: "https://push.example.com/push/abc",
		P256dh:   ua.priv.PublicKey().Bytes(), Auth: ua.auth,
		Payload: []byte(`{"title":"tierpush bench","body":"Your order has shipped"}`), Urgency: event.UrgencyNormal,
	}
	b.Run("dispatch", func(b *testing.B) {
		w, err := New(Config{VAPID: VAPID{PublicKey: pub, PrivateKey: priv, Subject: "mailto:a@example.com"}}, http.DefaultClient)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			body := newBody()
			if _, err := w.request(context.Background(), e, time.Hour, body); err != nil {
				b.Fatal(err)
			}
			body.recycle()
		}
	})
	// The P-256 work RFC 8291 asks of every message, alone: a new key
	// pair and the key agreement with the subscription's key. It is the
	// floor of the processor's CPU per notification on the standard
	// library (docs/benchmarks.md).
	b.Run("P-256 alone", func(b *testing.B) {
		uaPub, err := ecdh.P256().NewPublicKey(e.P256dh)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			k, err := ecdh.P256().GenerateKey(rand.Reader)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := k.ECDH(uaPub); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("webpush-go", func(b *testing.B) {
		sub := &webpush.Subscription{Endpoint: e.Endpoint, Keys: webpush.Keys{
			P256dh: base64.RawURLEncoding.EncodeToString(e.P256dh),
			Auth:   base64.RawURLEncoding.EncodeToString(e.Auth),
		}}
		opts := &webpush.Options{HTTPClient: noSend{}, Subscriber: "a@example.com", VAPIDPublicKey: pub, VAPIDPrivateKey: priv, TTL: 3600, Urgency: webpush.UrgencyNormal}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := webpush.SendNotificationWithContext(context.Background(), e.Payload[:len(e.Payload):len(e.Payload)], sub, opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}
