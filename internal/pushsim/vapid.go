package pushsim

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// maxJWTLifetime is how far in the future a VAPID JWT may expire (RFC 8292 §2).
const maxJWTLifetime = 24 * time.Hour

var (
	// errUnauthorized maps to 401: no usable VAPID Authorization header.
	errUnauthorized = errors.New("vapid authorization missing or malformed")
	// errForbidden maps to 403: the VAPID JWT or key is not acceptable.
	errForbidden = errors.New("vapid authorization rejected")
)

var jwtParser = jwt.NewParser(
	jwt.WithValidMethods([]string{jwt.SigningMethodES256.Alg()}),
	jwt.WithoutClaimsValidation(), // checked by vapidClaims.check, with our clock
)

// vapidAuth is a parsed "vapid t=<jwt>, k=<key>" Authorization header (RFC 8292 §3).
type vapidAuth struct {
	token string
	key   []byte // uncompressed P-256 point
	rawK  string
}

// parseVAPIDAuth parses an Authorization header value. Errors wrap errUnauthorized.
func parseVAPIDAuth(h string) (vapidAuth, error) {
	if h == "" {
		return vapidAuth{}, fmt.Errorf("%w: no Authorization header", errUnauthorized)
	}
	scheme, params, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "vapid") {
		return vapidAuth{}, fmt.Errorf("%w: scheme is not vapid", errUnauthorized)
	}
	var a vapidAuth
	for p := range strings.SplitSeq(params, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(p), "=")
		if !ok {
			continue
		}
		value = strings.Trim(strings.TrimSpace(value), `"`)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "t":
			a.token = value
		case "k":
			a.rawK = value
		}
	}
	if a.token == "" || a.rawK == "" {
		return vapidAuth{}, fmt.Errorf("%w: want t= and k= parameters", errUnauthorized)
	}
	k, err := decodeB64URL(a.rawK)
	if err != nil {
		return vapidAuth{}, fmt.Errorf("%w: k is not base64url", errUnauthorized)
	}
	a.key = k
	return a, nil
}

// vapidClaims are the JWT claims a push service checks.
type vapidClaims struct {
	aud string
	sub string
	exp time.Time
}

// readJWT decodes the JWT claims, verifying the ES256 signature with a.key when verify is set.
// Errors wrap errForbidden.
func readJWT(a vapidAuth, verify bool) (vapidClaims, error) {
	var rc jwt.RegisteredClaims
	if verify {
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), a.key)
		if err != nil {
			return vapidClaims{}, fmt.Errorf("%w: k: %v", errForbidden, err)
		}
		if _, err := jwtParser.ParseWithClaims(a.token, &rc, func(*jwt.Token) (any, error) { return pub, nil }); err != nil {
			return vapidClaims{}, fmt.Errorf("%w: jwt: %v", errForbidden, err)
		}
	} else {
		return readUnverified(a.token)
	}
	c := vapidClaims{sub: rc.Subject}
	if len(rc.Audience) == 1 {
		c.aud = rc.Audience[0]
	}
	if rc.ExpiresAt != nil {
		c.exp = rc.ExpiresAt.Time
	}
	return c, nil
}

// readUnverified decodes a JWT's header and claims without checking its
// signature, as readJWT does for the requests it does not verify: the
// claims jwt.ParseUnverified would give, read into two small structs
// instead of a map and the library's claim types (a fifth of the bench
// process's CPU, which the simulator shares with the processor).
func readUnverified(token string) (vapidClaims, error) {
	head, rest, ok := strings.Cut(token, ".")
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(sig, ".") {
		return vapidClaims{}, fmt.Errorf("%w: jwt: token contains an invalid number of segments", errForbidden)
	}
	var h struct {
		Alg string `json:"alg"`
	}
	if err := decodeSegment(head, &h); err != nil {
		return vapidClaims{}, fmt.Errorf("%w: jwt: header: %v", errForbidden, err)
	}
	if h.Alg != jwt.SigningMethodES256.Alg() {
		return vapidClaims{}, fmt.Errorf("%w: jwt alg is not ES256", errForbidden)
	}
	var rc struct {
		Aud json.RawMessage `json:"aud"`
		Sub string          `json:"sub"`
		Exp *json.Number    `json:"exp"`
	}
	if err := decodeSegment(payload, &rc); err != nil {
		return vapidClaims{}, fmt.Errorf("%w: jwt: claims: %v", errForbidden, err)
	}
	c := vapidClaims{sub: rc.Sub}
	// aud is a string or an array of strings (RFC 7519 §4.1.3); only
	// one is an audience here.
	var aud []string
	var one string
	switch {
	case len(rc.Aud) == 0 || string(rc.Aud) == "null":
	case json.Unmarshal(rc.Aud, &one) == nil:
		aud = []string{one}
	case json.Unmarshal(rc.Aud, &aud) == nil:
	default:
		return vapidClaims{}, fmt.Errorf("%w: jwt: aud is not a string or an array of strings", errForbidden)
	}
	if len(aud) == 1 {
		c.aud = aud[0]
	}
	if rc.Exp != nil {
		f, err := rc.Exp.Float64()
		if err != nil {
			return vapidClaims{}, fmt.Errorf("%w: jwt: exp: %v", errForbidden, err)
		}
		sec, frac := math.Modf(f)
		c.exp = jwt.NewNumericDate(time.Unix(int64(sec), int64(frac*1e9))).Time
	}
	return c, nil
}

func decodeSegment(seg string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// check applies RFC 8292 §2 to the claims of a request addressed to origin at now.
// Errors wrap errForbidden.
func (c vapidClaims) check(origin string, now time.Time) error {
	aud, err := audienceOrigin(c.aud)
	if err != nil {
		return fmt.Errorf("%w: aud: %v", errForbidden, err)
	}
	if aud != origin {
		return fmt.Errorf("%w: aud %q is not the origin %q", errForbidden, c.aud, origin)
	}
	switch {
	case c.exp.IsZero():
		return fmt.Errorf("%w: no exp", errForbidden)
	case !c.exp.After(now):
		return fmt.Errorf("%w: expired at %s", errForbidden, c.exp.UTC().Format(time.RFC3339))
	case c.exp.After(now.Add(maxJWTLifetime)):
		return fmt.Errorf("%w: exp more than 24h ahead", errForbidden)
	}
	if !(strings.HasPrefix(c.sub, "mailto:") && len(c.sub) > len("mailto:")) &&
		!(strings.HasPrefix(c.sub, "https:") && len(c.sub) > len("https:")) {
		return fmt.Errorf("%w: sub is not a mailto: or https: contact", errForbidden)
	}
	return nil
}

// audienceOrigin normalizes a JWT aud value, which must be a bare origin.
func audienceOrigin(aud string) (string, error) {
	if aud == "" {
		return "", errors.New("missing or not a single string")
	}
	u, err := url.Parse(aud)
	if err != nil {
		return "", errors.New("not a URL")
	}
	if u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return "", errors.New("not an origin")
	}
	return origin(u.Scheme, u.Host), nil
}

// origin is scheme://host[:port] lowercased, without the scheme's default port.
func origin(scheme, hostport string) string {
	scheme = strings.ToLower(scheme)
	hostport = strings.ToLower(hostport)
	if host, port, err := net.SplitHostPort(hostport); err == nil {
		if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
			hostport = host
			if strings.Contains(host, ":") {
				hostport = "[" + host + "]"
			}
		}
	}
	return scheme + "://" + hostport
}
