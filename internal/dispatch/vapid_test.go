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
		{"good pair, standard base64", dispatch.VAPID{
			PublicKey:  base64.StdEncoding.EncodeToString(pubA),
			PrivateKey: base64.StdEncoding.EncodeToString(privA),
			Subject:    subject,
		}, ""},
		{"other good pair", dispatch.VAPID{PublicKey: b.pub, PrivateKey: b.priv, Subject: subject}, ""},

		{"mismatched pair", dispatch.VAPID{PublicKey: a.pub, PrivateKey: b.priv, Subject: subject}, "--vapid-private-key"},
		{"keys swapped", dispatch.VAPID{PublicKey: a.priv, PrivateKey: a.pub, Subject: subject}, "--vapid-public-key"},
		{"public key missing", dispatch.VAPID{PrivateKey: a.priv, Subject: subject}, "--vapid-public-key"},
		{"public key bad base64", dispatch.VAPID{PublicKey: "not base64!", PrivateKey: a.priv, Subject: subject}, "--vapid-public-key"},
		{"public key with text after its padding", dispatch.VAPID{PublicKey: base64.StdEncoding.EncodeToString(pubA) + "+/", PrivateKey: a.priv, Subject: subject}, "--vapid-public-key"},
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

// TestValidateApp: an app's identity from --vapid-keys is refused with the
// app and field named, never with a key in the message.
func TestValidateApp(t *testing.T) {
	a, b := newKeys(t), newKeys(t)
	pubA, _ := base64.RawURLEncoding.DecodeString(a.pub)
	privA, _ := base64.RawURLEncoding.DecodeString(a.priv)
	offCurve := append([]byte(nil), pubA...)
	offCurve[64] ^= 1
	const subject = "mailto:push@shop.example"
	good := dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: subject}
	with := func(mut func(*dispatch.VAPID)) dispatch.VAPID {
		v := good
		mut(&v)
		return v
	}
	tests := []struct {
		name string
		app  string
		v    dispatch.VAPID
		want string // prefix of the error; "" for valid
	}{
		{"good, mailto", "shop", good, ""},
		{"good, https subject", "news", with(func(v *dispatch.VAPID) { v.Subject = "https://news.example" }), ""},
		{"good, padded keys", "shop-2027", with(func(v *dispatch.VAPID) {
			v.PublicKey, v.PrivateKey = base64.URLEncoding.EncodeToString(pubA), base64.URLEncoding.EncodeToString(privA)
		}), ""},

		{"public key bad base64", "shop", with(func(v *dispatch.VAPID) { v.PublicKey = "not*base64" }), "shop.public_key: not base64url"},
		{"public key with text after its padding", "shop", with(func(v *dispatch.VAPID) { v.PublicKey = base64.StdEncoding.EncodeToString(pubA) + "+/" }), "shop.public_key: not base64url"},
		{"public key wrong length", "shop", with(func(v *dispatch.VAPID) { v.PublicKey = base64.RawURLEncoding.EncodeToString(pubA[:33]) }), "shop.public_key: 33 bytes"},
		{"public key off the curve", "shop", with(func(v *dispatch.VAPID) { v.PublicKey = base64.RawURLEncoding.EncodeToString(offCurve) }), "shop.public_key: not a point on P-256"},
		{"public key missing", "shop", with(func(v *dispatch.VAPID) { v.PublicKey = "" }), "shop.public_key: missing"},
		{"private key bad base64", "shop", with(func(v *dispatch.VAPID) { v.PrivateKey = "*" + a.priv[1:] }), "shop.private_key: not base64url"},
		{"private key cut to 31 bytes", "shop", with(func(v *dispatch.VAPID) { v.PrivateKey = base64.RawURLEncoding.EncodeToString(privA[:31]) }), "shop.private_key: does not match shop.public_key"},
		{"private key too long", "shop", with(func(v *dispatch.VAPID) { v.PrivateKey = base64.RawURLEncoding.EncodeToString(append(privA, 1)) }), "shop.private_key: 33 bytes"},
		{"private key zero", "shop", with(func(v *dispatch.VAPID) { v.PrivateKey = base64.RawURLEncoding.EncodeToString(make([]byte, 32)) }), "shop.private_key: out of range for P-256"},
		{"private key missing", "shop", with(func(v *dispatch.VAPID) { v.PrivateKey = "" }), "shop.private_key: missing"},
		{"public key not the private key's", "shop", with(func(v *dispatch.VAPID) { v.PrivateKey = b.priv }), "shop.private_key: does not match shop.public_key"},
		{"subject missing", "shop", with(func(v *dispatch.VAPID) { v.Subject = "" }), "shop.subject: missing"},
		{"subject bare address", "shop", with(func(v *dispatch.VAPID) { v.Subject = "push@shop.example" }), "shop.subject: want mailto:"},
		{"subject http", "shop", with(func(v *dispatch.VAPID) { v.Subject = "http://shop.example" }), "shop.subject: want mailto:"},
		{"subject mailto without address", "shop", with(func(v *dispatch.VAPID) { v.Subject = "mailto:shop" }), "shop.subject: want mailto:"},
		{"subject bare https", "shop", with(func(v *dispatch.VAPID) { v.Subject = "https://" }), "shop.subject: want mailto:"},

		{"name empty", "", good, `app name "": is empty`},
		{"name with a slash", "shop/eu", good, `app name "shop/eu": want letters`},
		{"name too long", strings.Repeat("s", 65), good, "app name"},
		{"name default", "default", good, `app name "default": names the default identity`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := dispatch.ValidateApp(tt.app, tt.v)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ValidateApp() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("ValidateApp() = %v, want an error starting %q", err, tt.want)
			}
			for _, secret := range []string{a.priv, b.priv, a.pub, b.pub, tt.v.PrivateKey} {
				if secret != "" && strings.Contains(err.Error(), secret) {
					t.Errorf("ValidateApp() error %q holds a key", err)
				}
			}
			// New refuses it with the same message.
			_, nerr := dispatch.New(dispatch.Config{Apps: map[string]dispatch.VAPID{tt.app: tt.v}}, http.DefaultClient)
			if nerr == nil || nerr.Error() != err.Error() {
				t.Errorf("New() = %v, want %v", nerr, err)
			}
		})
	}
}

// TestNewIdentities: the default identity is optional when an app has one;
// without any identity New names the default's flags.
func TestNewIdentities(t *testing.T) {
	a, b := newKeys(t), newKeys(t)
	def := dispatch.VAPID{PublicKey: a.pub, PrivateKey: a.priv, Subject: "mailto:ops@example.com"}
	shop := dispatch.VAPID{PublicKey: b.pub, PrivateKey: b.priv, Subject: "mailto:push@shop.example"}
	tests := []struct {
		name    string
		cfg     dispatch.Config
		wantErr string
		signs   map[string]bool
	}{
		{"default only", dispatch.Config{VAPID: def}, "", map[string]bool{"": true, "shop": false}},
		{"apps only", dispatch.Config{Apps: map[string]dispatch.VAPID{"shop": shop}}, "", map[string]bool{"": false, "shop": true, "news": false}},
		{"both", dispatch.Config{VAPID: def, Apps: map[string]dispatch.VAPID{"shop": shop, "news": def}}, "", map[string]bool{"": true, "shop": true, "news": true, "default": false}},
		{"none", dispatch.Config{}, "--vapid-public-key: missing", nil},
		{"none, empty apps", dispatch.Config{Apps: map[string]dispatch.VAPID{}}, "--vapid-public-key: missing", nil},
		{"partial default beside apps", dispatch.Config{VAPID: dispatch.VAPID{Subject: "mailto:ops@example.com"}, Apps: map[string]dispatch.VAPID{"shop": shop}}, "--vapid-public-key: missing", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := dispatch.New(tt.cfg, http.DefaultClient)
			if tt.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("New() = %v, want an error starting %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for app, want := range tt.signs {
				if got := w.Signs(app); got != want {
					t.Errorf("Signs(%q) = %v, want %v", app, got, want)
				}
			}
		})
	}
}
