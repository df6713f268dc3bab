package dispatch

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tierpush/tierpush/internal/event"
)

// VAPID keys are read the way webpush-go and web-push read them, so that
// a key that works with either works here:
//
//   - The public key is an uncompressed P-256 point, 65 bytes.
//   - The private key is the scalar as a big-endian integer of 1 to 32
//     bytes, left-padded to 32. Node's ECDH getPrivateKey, web-push before
//     it padded keys, and Go code writing ecdsa's D.Bytes() drop leading
//     zero bytes: one key in 256 is 31 bytes, one in 65,536 is 30.
//     webpush-go reads them through big.Int, which pads them itself.
//   - Either key is base64url or standard base64, padded or not
//     (`openssl … | base64` writes the standard alphabet with padding).
//
// The scalar must then be in range (1 to the group order less one) and
// give the public key: a pair that does not match signs JWTs no push
// service accepts.

// VAPID is the application server identity (RFC 8292).
type VAPID struct {
	PublicKey  string // uncompressed P-256 point, 65 bytes: base64url or base64, padded or not
	PrivateKey string // P-256 scalar of 1 to 32 bytes, left-padded: base64url or base64
	Subject    string // "mailto:ops@example.com", a bare address, or an https URL
}

// privateKeyLen is the length of a P-256 scalar, to which shorter ones are
// left-padded.
const privateKeyLen = 32

// ValidateVAPID checks the default identity's key pair and subject, naming
// the flag at fault. Its errors never hold a key.
func ValidateVAPID(v VAPID) error {
	_, err := parseIdentity(v, defaultFields, false)
	return err
}

// ValidateApp checks the identity of app as --vapid-keys gives it: the name
// (event.CheckApp, and not event.DefaultApp), the key pair, and a subject
// that is a mailto: or https: URL. Errors name the app and the field
// ("shop.private_key: …") and never hold a key.
func ValidateApp(app string, v VAPID) error {
	if err := event.CheckApp(app); err != nil {
		return fmt.Errorf("app name %s: %w", quoteName(app), err)
	}
	if app == event.DefaultApp {
		return fmt.Errorf("app name %q: names the default identity (--vapid-*); give the app another name", app)
	}
	_, err := parseIdentity(v, appFields(app), true)
	return err
}

// ValidateSubject checks a VAPID subject as ValidateApp does (strict: a
// mailto: address or an https URL) or as ValidateVAPID does (a bare
// address also, read as mailto:). The error names no field.
func ValidateSubject(s string, strict bool) error {
	switch {
	case s == "":
		return errors.New("missing; want mailto:address or an https URL")
	case strings.HasPrefix(s, "https://") && len(s) > len("https://"):
	case strings.HasPrefix(s, "mailto:") && strings.Contains(s[len("mailto:"):], "@"):
	case !strict && !strings.HasPrefix(s, "mailto:") && strings.Contains(s, "@"):
		// A bare address, as the flag has always taken it.
	default:
		return errors.New("want mailto:address or an https URL")
	}
	return nil
}

// identityFields name the three parts of an identity in errors.
type identityFields struct{ public, private, subject string }

var defaultFields = identityFields{"--vapid-public-key", "--vapid-private-key", "--vapid-subject"}

func appFields(app string) identityFields {
	return identityFields{app + ".public_key", app + ".private_key", app + ".subject"}
}

// identity is a checked key pair, ready to sign.
type identity struct {
	private *ecdsa.PrivateKey
	public  string // the k= of the Authorization header: base64url, unpadded
}

// parseIdentity checks v and returns its key pair; errors name the fields
// as f does and never hold a key.
func parseIdentity(v VAPID, f identityFields, strictSubject bool) (identity, error) {
	pub, err := decodeKey(v.PublicKey)
	switch {
	case v.PublicKey == "":
		return identity{}, fmt.Errorf("%s: missing; want a base64url uncompressed P-256 point (65 bytes)", f.public)
	case err != nil:
		return identity{}, fmt.Errorf("%s: %w; want an uncompressed P-256 point (65 bytes)", f.public, err)
	case len(pub) != 65 || pub[0] != 4:
		return identity{}, fmt.Errorf("%s: %d bytes, want a base64url uncompressed P-256 point (65 bytes, starting 0x04)", f.public, len(pub))
	}
	if _, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), pub); err != nil {
		return identity{}, fmt.Errorf("%s: not a point on P-256", f.public)
	}
	d, err := decodeKey(v.PrivateKey)
	switch {
	case v.PrivateKey == "":
		return identity{}, fmt.Errorf("%s: missing; want a base64url P-256 private key (32 bytes)", f.private)
	case err != nil:
		return identity{}, fmt.Errorf("%s: %w; want a P-256 private key (32 bytes)", f.private, err)
	case len(d) > privateKeyLen:
		return identity{}, fmt.Errorf("%s: %d bytes, want a P-256 private key of at most %d", f.private, len(d), privateKeyLen)
	}
	// Left-pad a scalar whose leading zero bytes were dropped.
	d = append(make([]byte, privateKeyLen-len(d), privateKeyLen), d...)
	k, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
	if err != nil {
		return identity{}, fmt.Errorf("%s: out of range for P-256 (zero, or not below the group order): not a private key", f.private)
	}
	derived, err := k.PublicKey.Bytes()
	if err != nil || !bytes.Equal(derived, pub) {
		return identity{}, fmt.Errorf("%s: does not match %s (the public key is not this private key's)", f.private, f.public)
	}
	if err := ValidateSubject(v.Subject, strictSubject); err != nil {
		return identity{}, fmt.Errorf("%s: %w", f.subject, err)
	}
	return identity{private: k, public: base64.RawURLEncoding.EncodeToString(pub)}, nil
}

// decodeKey decodes a key written in base64url or standard base64, padded
// or not. Its error says which, never what the text held.
func decodeKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	enc := base64.RawURLEncoding
	if strings.ContainsAny(s, "+/") {
		enc = base64.RawStdEncoding
	}
	if strings.HasSuffix(s, "=") {
		enc = enc.WithPadding(base64.StdPadding)
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		if strings.ContainsAny(s, "+/") && strings.ContainsAny(s, "-_") {
			return nil, errors.New("not base64: mixes the base64url (-_) and standard (+/) alphabets")
		}
		return nil, errors.New("not base64url or base64")
	}
	return b, nil
}

// subjectClaim is the JWT sub of a subject: a bare address becomes a
// mailto: URL.
func subjectClaim(s string) string {
	if strings.HasPrefix(s, "https:") || strings.HasPrefix(s, "mailto:") {
		return s
	}
	return "mailto:" + s
}

// quoteName quotes at most 64 bytes of an app name for an error.
func quoteName(s string) string {
	if len(s) > event.MaxAppLen {
		return strconv.Quote(s[:event.MaxAppLen]) + "…"
	}
	return strconv.Quote(s)
}
