// Package event decodes and validates the JSON events upstream services
// produce (docs/design.md, "Event"): one Web Push notification per record value.
//
// Decode is on the hot path and treats its input as hostile: it bounds size
// and nesting before parsing, never panics, and refuses with a *Error whose
// Reason is the push-reason for the dead-letter topic. The package does not
// encode events (the processor forwards the original record bytes), does not
// send anything, and never puts an endpoint URL, key or payload in an error.
package event

import (
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tierpush/tierpush/internal/netguard"
)

// Limits on a record value, checked before parsing.
const (
	// MaxEventSize is the largest record value Decode parses, in bytes.
	MaxEventSize = 64 << 10
	// MaxDepth is the deepest nesting of JSON objects and arrays Decode
	// parses. The contract needs 3; the rest is room for unknown fields.
	MaxDepth = 16
	// MaxIDLen is the longest id, in bytes.
	MaxIDLen = 256
	// MaxTopicLen is the longest RFC 8030 topic, in characters.
	MaxTopicLen = 32
	// MaxAppLen is the longest app name, in bytes.
	MaxAppLen = 64
)

// DefaultApp names the default VAPID identity (the --vapid-* flags): an
// event that gives it, or no app at all, is signed with that identity, and
// metrics and tables show it under this name. No app of --vapid-keys may be
// called so.
const DefaultApp = "default"

// Sizes of the subscription keys (RFC 8291).
const (
	P256dhLen = 65 // uncompressed P-256 point
	AuthLen   = 16
)

// Urgency values (RFC 8030 §5.3). An event without urgency has "".
const (
	UrgencyVeryLow = "very-low"
	UrgencyLow     = "low"
	UrgencyNormal  = "normal"
	UrgencyHigh    = "high"
)

// Event is a decoded, validated event. Endpoint, P256dh, Auth and Payload are
// secrets: log EndpointHash instead.
type Event struct {
	ID string
	// Endpoint is the subscription's push URL as produced.
	Endpoint string
	// EndpointURL is Endpoint parsed (and checked by Rules.Guard, if set).
	EndpointURL *url.URL
	P256dh      []byte // 65 bytes, a valid P-256 point
	Auth        []byte // 16 bytes
	// Payload is the message to encrypt; nil for an empty push.
	Payload []byte
	// TTL is how long the push service may hold the message.
	TTL time.Duration
	// Urgency is one of the Urgency constants, or "" when not given.
	Urgency string
	// Topic is the RFC 8030 topic, or "".
	Topic string
	// CreatedAt is when upstream created the event, or the record's
	// timestamp when it did not say.
	CreatedAt time.Time
	// App names the VAPID identity the push is signed with; "" is the
	// default identity (no app, or DefaultApp).
	App string

	origin string
	uaKey  *ecdh.PublicKey // P256dh parsed by Decode
}

// PublicKey returns P256dh as Decode parsed it, or nil for an Event built
// otherwise.
func (e *Event) PublicKey() *ecdh.PublicKey { return e.uaKey }

// Origin returns the push service origin, scheme://host[:port], lower case
// and without the default port: the key of a pacing lane.
func (e *Event) Origin() string { return e.origin }

// EndpointHash returns the first 16 hex digits of the SHA-256 of the
// endpoint: what logs, traces and metrics name a subscription by.
func (e *Event) EndpointHash() string { return EndpointHash(e.Endpoint) }

// EndpointHash returns the first 16 hex digits of the SHA-256 of endpoint.
// The endpoint is hashed from, and the digits written to, the stack: the
// string is its one allocation (there were two and 112 bytes).
func EndpointHash(endpoint string) string {
	var buf [512]byte // endpoints longer than this are rare; append then allocates
	sum := sha256.Sum256(append(buf[:0], endpoint...))
	var digits [16]byte
	hex.Encode(digits[:], sum[:8])
	return string(digits[:])
}

// AppName returns the name metrics and tables show for the identity of
// app: app itself, or DefaultApp for "".
func AppName(app string) string {
	if app == "" {
		return DefaultApp
	}
	return app
}

// CheckApp checks an app name: 1 to MaxAppLen of [A-Za-z0-9._-]. Its error
// quotes no part of the name, which may come from a hostile record.
func CheckApp(name string) error {
	switch {
	case name == "":
		return errors.New("is empty")
	case len(name) > MaxAppLen:
		return fmt.Errorf("is %d bytes, limit %d", len(name), MaxAppLen)
	}
	for i := 0; i < len(name); i++ {
		if !appChar(name[i]) {
			return errors.New("want letters, digits, '.', '_' and '-' only")
		}
	}
	return nil
}

func appChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Rules are the limits Decode applies.
type Rules struct {
	// DefaultTTL applies when an event has no ttl.
	DefaultTTL time.Duration
	// MaxTTL is the largest ttl accepted.
	MaxTTL time.Duration
	// MaxPayload is the largest payload accepted, in bytes. 3993 is what
	// fits one 4096-byte aes128gcm record (RFC 8291).
	MaxPayload int
	// Guard checks the endpoint; nil skips the SSRF check (the endpoint
	// must still be an http or https URL with a host).
	Guard *netguard.Policy
}

// DefaultRules returns DefaultTTL 24h, MaxTTL 28 days, MaxPayload 3993 and no
// Guard.
func DefaultRules() Rules {
	return Rules{
		DefaultTTL: 24 * time.Hour,
		MaxTTL:     28 * 24 * time.Hour,
		MaxPayload: 3993,
	}
}

// Validate checks the rules are consistent, naming the field at fault.
func (r Rules) Validate() error {
	switch {
	case r.MaxTTL < time.Second:
		return fmt.Errorf("MaxTTL %v: want at least 1s", r.MaxTTL)
	case r.DefaultTTL < 0 || r.DefaultTTL > r.MaxTTL:
		return fmt.Errorf("DefaultTTL %v: want 0 to MaxTTL (%v)", r.DefaultTTL, r.MaxTTL)
	case r.MaxPayload < 0 || r.MaxPayload > MaxEventSize:
		return fmt.Errorf("MaxPayload %d: want 0 to %d", r.MaxPayload, MaxEventSize)
	}
	return nil
}

// Reason classifies a refused event; it is the push-reason header value.
type Reason string

// Reasons Decode gives.
const (
	ReasonInvalid         Reason = "invalid_event"
	ReasonPayloadTooLarge Reason = "payload_too_large"
	ReasonEndpointBlocked Reason = "endpoint_blocked"
)

// Error is why Decode refused an event. Field is the JSON path at fault
// ("subscription.keys.auth"), or "" for the event as a whole. Msg never holds
// the endpoint URL, key material or payload, so Error() is fit for the
// push-error header and logs.
type Error struct {
	Reason Reason
	Field  string
	Msg    string

	err error // cause, e.g. a *netguard.BlockedError
}

func (e *Error) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Unwrap returns the cause, a *netguard.BlockedError for ReasonEndpointBlocked.
func (e *Error) Unwrap() error { return e.err }

func invalid(field, format string, args ...any) *Error {
	return &Error{Reason: ReasonInvalid, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the Reason of a Decode error, and false for errors that
// are not a *Error.
func ReasonOf(err error) (Reason, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason, true
	}
	return "", false
}

// originOf returns scheme://host[:port] with the host lower-cased, any
// trailing dot dropped and the scheme's default port left out. It slices raw
// when raw already starts that way, which is the common case.
func originOf(raw string, u *url.URL) string {
	host, port := u.Hostname(), u.Port()
	if (u.Scheme == "https" && port == "443") || (u.Scheme == "http" && port == "80") {
		port = ""
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	n := len(u.Scheme) + len("://") + len(host)
	if port != "" {
		n += 1 + len(port)
	}
	if len(raw) >= n && raw[len(u.Scheme):len(u.Scheme)+3] == "://" &&
		raw[len(u.Scheme)+3:len(u.Scheme)+3+len(host)] == host &&
		(port == "" || raw[n-len(port)-1] == ':' && raw[n-len(port):n] == port) &&
		(len(raw) == n || raw[n] == '/' || raw[n] == '?' || raw[n] == '#') &&
		raw[:len(u.Scheme)] == u.Scheme {
		return raw[:n]
	}
	if port != "" {
		return u.Scheme + "://" + host + ":" + port
	}
	return u.Scheme + "://" + host
}
