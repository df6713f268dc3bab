package pushsim_test

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/SherClockHolmes/webpush-go"

	"github.com/tierpush/tierpush/internal/pushsim"
)

// capture returns a client that records the request webpush-go would send and answers 201.
func capture(t testing.TB, got **http.Request, body *[]byte) webpush.HTTPClient {
	return doFunc(func(r *http.Request) (*http.Response, error) {
		*got = r
		*body = readBody(t, r)
		return &http.Response{StatusCode: http.StatusCreated, Body: io.NopCloser(bytes.NewReader(nil)), Header: http.Header{}}, nil
	})
}

// encrypt returns the body webpush-go sends for msg to the subscription (key, auth).
func encrypt(t testing.TB, key *ecdh.PrivateKey, auth []byte, msg []byte) []byte {
	t.Helper()
	var req *http.Request
	var body []byte
	sub := pushsim.Subscription{
		Endpoint: "https://push.test/push/x",
		P256dh:   base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()),
		Auth:     base64.RawURLEncoding.EncodeToString(auth),
	}
	send(t, sub, msg, defaultOptions(capture(t, &req, &body), newVAPID(t)))
	return body
}

func TestDecrypt(t *testing.T) {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	valid := encrypt(t, key, auth, []byte("hello"))
	otherKey, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(valid)
		b[i] ^= 0x01
		return b
	}
	tests := []struct {
		name    string
		body    []byte
		key     *ecdh.PrivateKey
		auth    []byte
		want    []byte
		wantErr error
	}{
		{name: "valid", body: valid, key: key, auth: auth, want: []byte("hello")},
		{name: "empty", body: nil, key: key, auth: auth, wantErr: pushsim.ErrMalformed},
		{name: "header only", body: valid[:21], key: key, auth: auth, wantErr: pushsim.ErrMalformed},
		{name: "no record", body: valid[:86], key: key, auth: auth, wantErr: pushsim.ErrMalformed},
		{name: "record size below 18", body: func() []byte { b := bytes.Clone(valid); b[16], b[17], b[18], b[19] = 0, 0, 0, 17; return b }(), key: key, auth: auth, wantErr: pushsim.ErrMalformed},
		{name: "record larger than rs", body: func() []byte { b := bytes.Clone(valid); b[16], b[17], b[18], b[19] = 0, 0, 0, 100; return b }(), key: key, auth: auth, wantErr: pushsim.ErrMalformed},
		{name: "idlen not 65", body: flip(20), key: key, auth: auth, wantErr: pushsim.ErrMalformed},
		{name: "keyid not on curve", body: flip(30), key: key, auth: auth, wantErr: pushsim.ErrMalformed},
		{name: "tampered salt", body: flip(0), key: key, auth: auth, wantErr: pushsim.ErrDecrypt},
		{name: "tampered tag", body: flip(len(valid) - 1), key: key, auth: auth, wantErr: pushsim.ErrDecrypt},
		{name: "wrong auth", body: valid, key: key, auth: make([]byte, 16), wantErr: pushsim.ErrDecrypt},
		{name: "short auth", body: valid, key: key, auth: auth[:12], wantErr: pushsim.ErrDecrypt},
		{name: "wrong key", body: valid, key: otherKey, auth: auth, wantErr: pushsim.ErrDecrypt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pushsim.Decrypt(tt.body, tt.key, tt.auth)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Decrypt() error = %v, want %v", err, tt.wantErr)
			}
			if !bytes.Equal(got, tt.want) {
				t.Errorf("Decrypt() = %q, want %q", got, tt.want)
			}
		})
	}
}

// FuzzDecrypt feeds arbitrary bodies to Decrypt: it must never panic, must fail only with its
// sentinel errors, and a successful result is shorter than the body.
func FuzzDecrypt(f *testing.F) {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		f.Fatalf("generate key: %v", err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	for _, m := range []string{"", "hello", "\x00\x02\x00", string(bytes.Repeat([]byte{'x'}, 3993))} {
		body := encrypt(f, key, auth, []byte(m))
		f.Add(body)
		f.Add(body[:len(body)/2])
	}
	f.Add([]byte{})
	f.Add(make([]byte, 21))
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := pushsim.Decrypt(body, key, auth)
		if err != nil {
			if !errors.Is(err, pushsim.ErrMalformed) && !errors.Is(err, pushsim.ErrDecrypt) {
				t.Fatalf("Decrypt() error = %v, want ErrMalformed or ErrDecrypt", err)
			}
			return
		}
		if len(got) >= len(body) {
			t.Fatalf("Decrypt() returned %d bytes from a %d-byte body", len(got), len(body))
		}
	})
}

// FuzzPush feeds arbitrary headers and bodies to the push handler: it must never panic and
// must answer one of the statuses a push service would.
func FuzzPush(f *testing.F) {
	cfg := pushsim.DefaultConfig()
	cfg.KeepDeliveries = 16
	sim, err := pushsim.New(cfg, nil)
	if err != nil {
		f.Fatalf("new simulator: %v", err)
	}
	sim.SetBaseURL("http://push.test")
	sub := sim.Subscribe()
	h := sim.Handler()

	var req *http.Request
	var body []byte
	send(f, sub, []byte("seed"), defaultOptions(capture(f, &req, &body), newVAPID(f)))
	auth := req.Header.Get("Authorization")
	f.Add("60", "high", "t1", "aes128gcm", auth, body)
	f.Add("", "", "", "aes128gcm", auth, body)
	f.Add("0", "low", "", "aes128gcm", "vapid t=a.b.c, k=AAAA", body)
	f.Add("1", "", "", "", "vapid t=, k=", []byte{})
	f.Add("99999999999", "x", "a.b", "gzip", "WebPush x", []byte{1, 2, 3})

	allowed := map[int]bool{201: true, 400: true, 401: true, 403: true, 413: true}
	f.Fuzz(func(t *testing.T, ttl, urgency, topic, encoding, authz string, body []byte) {
		r := httptest.NewRequest(http.MethodPost, sub.Endpoint, bytes.NewReader(body))
		for k, v := range map[string]string{"TTL": ttl, "Urgency": urgency, "Topic": topic, "Content-Encoding": encoding, "Authorization": authz} {
			if v != "" {
				r.Header[http.CanonicalHeaderKey(k)] = []string{v}
			}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if !allowed[w.Code] {
			t.Fatalf("status = %d, want one of 201, 400, 401, 403, 413", w.Code)
		}
	})
}
