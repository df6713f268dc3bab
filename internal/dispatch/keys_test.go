package dispatch_test

import (
	"context"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/push"
)

// keyFixture is a VAPID key pair as a tool wrote it: testdata/vapid holds
// the generators (gen-node.mjs: Node's crypto ECDH and web-push;
// gen-openssl.sh: OpenSSL; gen-go.go: webpush-go and crypto/ecdsa) and
// their output.
type keyFixture struct {
	Tool        string `json:"tool"`
	How         string `json:"how"`
	ScalarBytes int    `json:"scalar_bytes"` // the scalar without its leading zero bytes
	PublicKey   string `json:"public_key"`
	PrivateKey  string `json:"private_key"`

	file string
}

func (k keyFixture) String() string {
	return fmt.Sprintf("%s: %s, %d-byte scalar", k.file, k.How, k.ScalarBytes)
}

func loadKeyFixtures(t *testing.T) []keyFixture {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "vapid", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no key fixtures in testdata/vapid: %v", err)
	}
	var all []keyFixture
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var rows []keyFixture
		if err := json.Unmarshal(b, &rows); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for i := range rows {
			rows[i].file = filepath.Base(f)
		}
		all = append(all, rows...)
	}
	return all
}

// stdDecode decodes any of the four base64 forms, independently of the
// code under test.
func stdDecode(t *testing.T, s string) []byte {
	t.Helper()
	s = strings.NewReplacer("-", "+", "_", "/").Replace(strings.TrimRight(s, "="))
	b, err := base64.RawStdEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("fixture key %q… does not decode: %v", s[:4], err)
	}
	return b
}

// TestKeyCompatibility: every key pair as Node, web-push, webpush-go,
// crypto/ecdsa and OpenSSL write it — scalars of 32, 31 and 30 bytes,
// padded to 32 or not, base64url with or without padding and standard
// base64 — is accepted as a default identity and an app's, and signs
// pushes the simulator verifies against the subscription's key.
func TestKeyCompatibility(t *testing.T) {
	fixtures := loadKeyFixtures(t)
	srv := startSim(t)
	hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{})
	t.Cleanup(hc.CloseIdleConnections)

	// What the table must keep covering, should it be regenerated.
	covered := map[string]bool{}
	for _, k := range fixtures {
		pub, priv := stdDecode(t, k.PublicKey), stdDecode(t, k.PrivateKey)
		lead := 0
		for lead < len(priv) && priv[lead] == 0 {
			lead++
		}
		if len(priv)-lead != k.ScalarBytes || len(pub) != 65 {
			t.Fatalf("%s: decodes to a %d-byte private key with %d leading zeros and a %d-byte public key", k, len(priv), lead, len(pub))
		}
		padded := len(priv) == 32
		covered[fmt.Sprintf("%d padded=%v", k.ScalarBytes, padded)] = true
		covered["tool "+strings.Fields(k.Tool)[0]] = true
		switch {
		case strings.ContainsAny(k.PrivateKey+k.PublicKey, "+/"):
			covered["standard base64"] = true
		case strings.ContainsAny(k.PrivateKey+k.PublicKey, "-_") && strings.HasSuffix(k.PublicKey, "="):
			covered["padded base64url"] = true
		case strings.ContainsAny(k.PrivateKey+k.PublicKey, "-_"):
			covered["base64url"] = true
		}
		t.Run(k.String(), func(t *testing.T) {
			v := dispatch.VAPID{PublicKey: k.PublicKey, PrivateKey: k.PrivateKey, Subject: subject}
			if err := dispatch.ValidateVAPID(v); err != nil {
				t.Fatalf("ValidateVAPID() = %v", err)
			}
			if err := dispatch.ValidateApp("shop", v); err != nil {
				t.Fatalf("ValidateApp() = %v", err)
			}
			canonical := base64.RawURLEncoding.EncodeToString(pub)
			w, err := dispatch.New(dispatch.Config{VAPID: v, Apps: map[string]dispatch.VAPID{"shop": v}}, hc)
			if err != nil {
				t.Fatal(err)
			}
			for _, app := range []string{"", "shop"} {
				sub := srv.SubscribeWithKey(canonical)
				extra := map[string]any{"payload": "hello"}
				if app != "" {
					extra["app"] = app
				}
				if got := w.Send(context.Background(), newEvent(t, sub, extra), time.Minute); got.Class != push.Delivered {
					t.Fatalf("Send(app %q) = %+v, want delivered", app, got)
				}
				d := onlyDelivery(t, srv, sub)
				if !d.Verified || string(d.Payload) != "hello" || d.VAPIDKey != canonical {
					t.Errorf("app %q: verified %v, payload %q, k=%.12s…, want verified, hello, k=%.12s…", app, d.Verified, d.Payload, d.VAPIDKey, canonical)
				}
			}
		})
	}
	for _, want := range []string{
		"32 padded=true", "31 padded=true", "30 padded=true", "31 padded=false", "30 padded=false",
		"tool node", "tool web-push", "tool webpush-go", "tool OpenSSL",
		"standard base64", "padded base64url", "base64url",
	} {
		if !covered[want] {
			t.Errorf("the fixtures have no key with %s", want)
		}
	}
}

// TestKeyRefusals: a private key out of range, too long, or not the
// public key's, and text that is no base64, are refused naming the flag
// or the app's field, with the reason, never the key.
func TestKeyRefusals(t *testing.T) {
	fixtures := loadKeyFixtures(t)
	a, b := fixtures[0], fixtures[len(fixtures)-1]
	order := elliptic.P256().Params().N
	enc := base64.RawURLEncoding.EncodeToString
	ff := make([]byte, 32)
	for i := range ff {
		ff[i] = 0xff
	}
	tests := []struct {
		name       string
		pub, priv  string
		field, why string // the field named (of the default identity) and the reason
	}{
		{"zero scalar", a.PublicKey, enc([]byte{0}), "--vapid-private-key", "out of range for P-256"},
		{"32 zero bytes", a.PublicKey, enc(make([]byte, 32)), "--vapid-private-key", "out of range for P-256"},
		{"the group order", a.PublicKey, enc(order.Bytes()), "--vapid-private-key", "out of range for P-256"},
		{"above the group order", a.PublicKey, enc(ff), "--vapid-private-key", "out of range for P-256"},
		{"33 bytes", a.PublicKey, enc(append([]byte{0}, stdDecode(t, a.PrivateKey)...)), "--vapid-private-key", "33 bytes, want a P-256 private key of at most 32"},
		{"a public key as the private key", a.PublicKey, a.PublicKey, "--vapid-private-key", "65 bytes"},
		{"another pair's private key", a.PublicKey, b.PrivateKey, "--vapid-private-key", "does not match --vapid-public-key"},
		{"a 31-byte key cut from a 32-byte one", a.PublicKey, enc(stdDecode(t, a.PrivateKey)[1:]), "--vapid-private-key", "does not match --vapid-public-key"},
		{"mixed alphabets", a.PublicKey, "ab-_cd+/" + strings.Repeat("A", 35), "--vapid-private-key", "mixes the base64url (-_) and standard (+/) alphabets"},
		{"not base64", a.PublicKey, "not a key!", "--vapid-private-key", "not base64url or base64"},
		{"public key not base64", "%%%", a.PrivateKey, "--vapid-public-key", "not base64url or base64"},
		{"public key compressed", enc(append([]byte{2}, stdDecode(t, a.PublicKey)[1:33]...)), a.PrivateKey, "--vapid-public-key", "33 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := dispatch.VAPID{PublicKey: tt.pub, PrivateKey: tt.priv, Subject: subject}
			err := dispatch.ValidateVAPID(v)
			if err == nil || !strings.HasPrefix(err.Error(), tt.field+": ") || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("ValidateVAPID() = %v, want %s: …%s…", err, tt.field, tt.why)
			}
			appField := map[string]string{"--vapid-private-key": "shop.private_key", "--vapid-public-key": "shop.public_key"}[tt.field]
			aerr := dispatch.ValidateApp("shop", v)
			if aerr == nil || !strings.HasPrefix(aerr.Error(), appField+": ") {
				t.Errorf("ValidateApp() = %v, want it to name %s", aerr, appField)
			}
			for _, e := range []error{err, aerr} {
				if e != nil && strings.Contains(e.Error(), tt.priv) && len(tt.priv) > 3 {
					t.Errorf("error %q holds the private key", e)
				}
			}
			if _, nerr := dispatch.New(dispatch.Config{VAPID: v}, http.DefaultClient); nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New() = %v, want %v", nerr, err)
			}
		})
	}
}
