package dispatch

import (
	"crypto/ecdh"
	"encoding/base64"
	"testing"
)

// TestRFC8291AppendixA encrypts the RFC's example with its sender key pair
// and salt and gets its message byte for byte: the derivation of every key
// and nonce is pinned to the published answer, not only to a round trip
// with our own decryption.
func TestRFC8291AppendixA(t *testing.T) {
	b := func(s string) []byte {
		v, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			t.Fatalf("decode %q: %v", s, err)
		}
		return v
	}
	const (
		plaintext = "When I grow up, I want to be a watermelon"
		asPrivate = "yfWPiYE-n46HLnH0KqZOF1fJJU3MYrct3AELtAQ-oRw"
		asPublic  = "BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"
		uaPublic  = "BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"
		salt      = "DGv6ra1nlYgDCS1FRnbzlw"
		auth      = "BTBZMqHH6r4Tts7J_aSIgg"
		want      = "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
	)
	as, err := ecdh.P256().NewPrivateKey(b(asPrivate))
	if err != nil {
		t.Fatal(err)
	}
	if got := base64.RawURLEncoding.EncodeToString(as.PublicKey().Bytes()); got != asPublic {
		t.Fatalf("sender public key %s, want the RFC's %s", got, asPublic)
	}
	body, err := seal(nil, []byte(plaintext), b(uaPublic), nil, b(auth), as, b(salt), len(plaintext)+1)
	if err != nil {
		t.Fatal(err)
	}
	if got := base64.RawURLEncoding.EncodeToString(body); got != want {
		t.Errorf("message\n got %s\nwant %s", got, want)
	}
}
