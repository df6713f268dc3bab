package dispatch_test

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"

	webpush "github.com/SherClockHolmes/webpush-go"

	"github.com/tierpush/tierpush/internal/dispatch"
)

type keyPair struct{ priv, pub string }

func newKeys(t testing.TB) keyPair {
	t.Helper()
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatalf("generate VAPID keys: %v", err)
	}
	return keyPair{priv: priv, pub: pub}
}

func TestValidateVAPID(t *testing.T) {
	a, b := newKeys(t), newKeys(t)
	pubA, _ := base64.RawURLEncoding.DecodeString(a.pub)
	compressed := append([]byte{2 + pubA[64]&1}, pubA[1:33]...)
	notUncompressed := append([]byte{5}, pubA[1:]...)
	privA, _ := base64.RawURLEncoding.DecodeString(a.priv)
	const subject = "mailto:ops@example.com"

	tests := []struct {
		name     string
		v        dispatch.VAPID
		wantFlag string // "" for valid
	}{
		{"good pair, mailto", dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: subject}, ""},
		{"good pair, bare address", dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: "ops@example.com"}, ""},
		{"good pair, https subject", dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: "https://example.com/contact"}, ""},
		{"good pair, padded base64url", dispatch.VAPID{
			PublicKey:  base64.URLEncoding.EncodeToString(pubA),
			PrivateKey: base64.URLEncoding.EncodeToString(privA),
			Subject:    subject,
		}, ""},
		{"other good pair", dispatch.VAPID{PublicKey: b.pub, PrivateKey: b.priv, Subject: subject}, ""},

		{"mismatched pair", dispatch.VAPID{PublicKey: a.pub, PrivateKey: b.priv, Subject: subject}, "--vapid-private-key"},
		{"keys swapped", dispatch.VAPID{PublicKey: a.priv, PrivateKey: a.pub, Subject: subject}, "--vapid-public-key"},
		{"public key missing", dispatch.VAPID{PrivateKey: a.priv, Subject: subject}, "--vapid-public-key"},
		{"public key bad base64", dispatch.VAPID{PublicKey: "not base64!", PrivateKey: a.priv, Subject: subject}, "--vapid-public-key"},
		{"public key std base64", dispatch.VAPID{PublicKey: base64.StdEncoding.EncodeToString(pubA) + "+/", PrivateKey: a.priv, Subject: subject}, "--vapid-public-key"},
		{"public key compressed", dispatch.VAPID{PublicKey: base64.RawURLEncoding.EncodeToString(compressed), PrivateKey: a.priv, Subject: subject}, "--vapid-public-key"},
		{"public key wrong prefix", dispatch.VAPID{PublicKey: base64.RawURLEncoding.EncodeToString(notUncompressed), PrivateKey: a.priv, Subject: subject}, "--vapid-public-key"},
		{"private key missing", dispatch.VAPID{PublicKey: a.pub, Subject: subject}, "--vapid-private-key"},
		{"private key bad base64", dispatch.VAPID{PublicKey: a.pub, PrivateKey: "*" + a.priv[1:], Subject: subject}, "--vapid-private-key"},
		{"private key short", dispatch.VAPID{PublicKey: a.pub, PrivateKey: base64.RawURLEncoding.EncodeToString(privA[:31]), Subject: subject}, "--vapid-private-key"},
		{"subject missing", dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv}, "--vapid-subject"},
		{"subject bare mailto", dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: "mailto:"}, "--vapid-subject"},
		{"subject bare https", dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: "https://"}, "--vapid-subject"},
		{"subject http", dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: "http://example.com"}, "--vapid-subject"},
		{"subject host only", dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: "example.com"}, "--vapid-subject"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dispatch.ValidateVAPID(tt.v)
			if tt.wantFlag == "" {
				if err != nil {
					t.Fatalf("ValidateVAPID() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ValidateVAPID() = nil, want an error naming %s", tt.wantFlag)
			}
			if got := err.Error(); !strings.HasPrefix(got, tt.wantFlag) {
				t.Errorf("ValidateVAPID() = %q, want it to start with %q", got, tt.wantFlag)
			}
			for _, secret := range []string{a.priv, b.priv} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("ValidateVAPID() error holds a private key")
				}
			}
			// New refuses the same identity with the same message.
			_, nerr := dispatch.New(dispatch.Config{VAPID: tt.v}, http.DefaultClient)
			if nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New() = %v, want %v", nerr, err)
			}
		})
	}
}
