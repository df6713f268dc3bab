package pushsim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// TestReadUnverifiedAgrees: the claims of a request not verified are the
// ones a verified read finds in the same token, whatever form aud and exp
// take; what the verified read refuses as malformed, the unverified one
// refuses too.
func TestReadUnverifiedAgrees(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := key.PublicKey.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	sign := func(c jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(jwt.SigningMethodES256, c).SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for name, c := range map[string]jwt.MapClaims{
		"aud a string":             {"aud": "https://push.example", "exp": 1893456000, "sub": "mailto:ops@example.com"},
		"aud an array of one":      {"aud": []string{"https://push.example"}, "exp": 1893456000, "sub": "mailto:ops@example.com"},
		"aud an array of two":      {"aud": []string{"https://a.example", "https://b.example"}, "exp": 1893456000},
		"exp a fraction":           {"aud": "https://push.example", "exp": 1893456000.75},
		"no exp, no aud, no sub":   {},
		"aud null":                 {"aud": nil, "exp": 1893456000},
		"aud a number (refused)":   {"aud": 7},
		"sub a number (refused)":   {"sub": 7},
		"exp a string (refused)":   {"exp": "soon"},
		"aud mixed (refused)":      {"aud": []any{"https://a.example", 7}},
		"exp in the past":          {"aud": "https://push.example", "exp": 1000},
		"exp far ahead":            {"aud": "https://push.example", "exp": 4102444800},
		"exp negative":             {"aud": "https://push.example", "exp": -5},
		"exp huge fraction":        {"aud": "https://push.example", "exp": 1893456000.999999},
		"sub empty, aud empty":     {"aud": "", "sub": ""},
		"aud an empty array":       {"aud": []string{}},
		"extra claims are ignored": {"aud": "https://push.example", "exp": 1893456000, "jti": "x", "iat": 1},
	} {
		a := vapidAuth{token: sign(c), key: pub}
		want, werr := readJWT(a, true)
		got, gerr := readJWT(a, false)
		if (werr == nil) != (gerr == nil) || got != want {
			t.Errorf("%s: unverified %+v, %v; verified %+v, %v", name, got, gerr, want, werr)
		}
	}
	for _, tok := range []string{"", "a.b", "a.b.c.d", "!!.e30.sig", "eyJhbGciOiJIUzI1NiJ9.e30.sig"} {
		if _, err := readJWT(vapidAuth{token: tok, key: pub}, false); err == nil {
			t.Errorf("unverified read of %q: no error", tok)
		}
	}
}
