package event

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tierpush/tierpush/internal/netguard"
)

// rawValue is a JSON value as it appears in the input, so Decode can tell
// absent from empty, check types itself and decode base64 without an
// intermediate string. It aliases the input and must not outlive Decode.
type rawValue []byte

// present reports whether the field was given and not null.
func (r rawValue) present() bool {
	return len(r) > 0 && string(r) != "null"
}

// wire is the JSON shape of an event (docs/design.md, "Event"), as parse
// fills it. The tags name the keys for encoding/json, which the tests hold
// parse to.
type wire struct {
	ID           rawValue         `json:"id"`
	Subscription wireSubscription `json:"subscription"`
	Payload      rawValue         `json:"payload"`
	PayloadB64   rawValue         `json:"payload_b64"`
	TTL          rawValue         `json:"ttl"`
	Urgency      rawValue         `json:"urgency"`
	Topic        rawValue         `json:"topic"`
	CreatedAt    rawValue         `json:"created_at"`
	App          rawValue         `json:"app"`
}

type wireSubscription struct {
	Endpoint rawValue `json:"endpoint"`
	Keys     wireKeys `json:"keys"`
	// given is whether the event had a subscription object, so that its
	// absence is named as such rather than as its first missing member.
	given bool
}

type wireKeys struct {
	P256dh rawValue `json:"p256dh"`
	Auth   rawValue `json:"auth"`
	given  bool
}

// Field paths named in errors.
const (
	fieldID           = "id"
	fieldSubscription = "subscription"
	fieldKeys         = "subscription.keys"
	fieldEndpoint     = "subscription.endpoint"
	fieldP256dh       = "subscription.keys.p256dh"
	fieldAuth         = "subscription.keys.auth"
	fieldPayload      = "payload"
	fieldPayloadB64   = "payload_b64"
	fieldTTL          = "ttl"
	fieldUrgency      = "urgency"
	fieldTopic        = "topic"
	fieldCreatedAt    = "created_at"
	fieldApp          = "app"
)

// Decode parses and validates one record value. recordTime is the record's
// timestamp, the default for created_at. A refused event gives a *Error.
//
// Field names match case-insensitively and the last of duplicate fields wins
// (encoding/json rules); null counts as absent. The returned Event does not
// alias value.
func Decode(value []byte, recordTime time.Time, rules Rules) (*Event, error) {
	e, err := decode(value, recordTime, rules)
	if err != nil {
		return nil, err
	}
	return e, nil
}

func decode(value []byte, recordTime time.Time, rules Rules) (*Event, *Error) {
	if e := precheck(value); e != nil {
		return nil, e
	}
	var w wire
	if e := parse(value, &w); e != nil {
		return nil, e
	}
	return fromWire(&w, recordTime, rules)
}

// precheck bounds the size and nesting of value before it is parsed.
func precheck(value []byte) *Error {
	switch {
	case len(value) == 0:
		return invalid("", "event is empty")
	case len(value) > MaxEventSize:
		return invalid("", "event is %d bytes, limit %d", len(value), MaxEventSize)
	case !utf8.Valid(value):
		return invalid("", "event is not valid UTF-8")
	case tooDeep(value, MaxDepth):
		return invalid("", "event nests deeper than %d", MaxDepth)
	}
	return nil
}

// fromWire checks the fields of w and builds the Event.
func fromWire(w *wire, recordTime time.Time, rules Rules) (*Event, *Error) {
	ev := &Event{}

	idStr, e := stringField(w.ID, fieldID, true)
	if e != nil {
		return nil, e
	}
	id := idStr.bytes()
	switch {
	case len(id) == 0:
		return nil, invalid(fieldID, "is empty")
	case len(id) > MaxIDLen:
		return nil, invalid(fieldID, "is %d bytes, limit %d", len(id), MaxIDLen)
	case !printable(id):
		return nil, invalid(fieldID, "has a non-printable character")
	}
	if !w.Subscription.given {
		return nil, invalid(fieldSubscription, "is missing")
	}
	epStr, e := stringField(w.Subscription.Endpoint, fieldEndpoint, true)
	if e != nil {
		return nil, e
	}
	ep := epStr.bytes()
	if len(ep) == 0 {
		return nil, invalid(fieldEndpoint, "is empty")
	}
	// The id and the endpoint share one allocation.
	var sb strings.Builder
	sb.Grow(len(id) + len(ep))
	sb.Write(id)
	sb.Write(ep)
	s := sb.String()
	ev.ID, ev.Endpoint = s[:len(id)], s[len(id):]
	if e := ev.setEndpointURL(rules.Guard); e != nil {
		return nil, e
	}

	// Keys and payload share one allocation.
	if !w.Subscription.Keys.given {
		return nil, invalid(fieldKeys, "is missing")
	}
	p256dh, e := base64Field(w.Subscription.Keys.P256dh, fieldP256dh, true)
	if e != nil {
		return nil, e
	}
	if n := p256dh.len(); n != P256dhLen {
		return nil, invalid(fieldP256dh, "key is %d bytes, want %d", n, P256dhLen)
	}
	auth, e := base64Field(w.Subscription.Keys.Auth, fieldAuth, true)
	if e != nil {
		return nil, e
	}
	if n := auth.len(); n != AuthLen {
		return nil, invalid(fieldAuth, "auth secret is %d bytes, want %d", n, AuthLen)
	}
	text, e := stringField(w.Payload, fieldPayload, false)
	if e != nil {
		return nil, e
	}
	bin, e := base64Field(w.PayloadB64, fieldPayloadB64, false)
	if e != nil {
		return nil, e
	}
	payloadLen, payloadField := text.len(), fieldPayload
	switch {
	case w.Payload.present() && w.PayloadB64.present():
		return nil, invalid(fieldPayloadB64, "give payload or payload_b64, not both")
	case w.PayloadB64.present():
		payloadLen, payloadField = bin.len(), fieldPayloadB64
	}
	if payloadLen > rules.MaxPayload {
		return nil, &Error{Reason: ReasonPayloadTooLarge, Field: payloadField,
			Msg: "is " + strconv.Itoa(payloadLen) + " bytes, limit " + strconv.Itoa(rules.MaxPayload)}
	}

	buf := make([]byte, P256dhLen+AuthLen+payloadLen)
	ev.P256dh = buf[:P256dhLen:P256dhLen]
	ev.Auth = buf[P256dhLen : P256dhLen+AuthLen : P256dhLen+AuthLen]
	if err := p256dh.decode(ev.P256dh); err != nil {
		return nil, invalid(fieldP256dh, "invalid base64")
	}
	if err := auth.decode(ev.Auth); err != nil {
		return nil, invalid(fieldAuth, "invalid base64")
	}
	if ev.P256dh[0] != 4 {
		return nil, invalid(fieldP256dh, "key is not an uncompressed P-256 point")
	}
	k, err := ecdh.P256().NewPublicKey(ev.P256dh)
	if err != nil {
		return nil, invalid(fieldP256dh, "key is not a point on P-256")
	}
	ev.uaKey = k
	if payloadLen > 0 {
		ev.Payload = buf[P256dhLen+AuthLen:]
		if w.PayloadB64.present() {
			if err := bin.decode(ev.Payload); err != nil {
				return nil, invalid(fieldPayloadB64, "invalid base64")
			}
		} else {
			text.copyTo(ev.Payload)
		}
	}

	if e := ev.setTTL(w.TTL, rules); e != nil {
		return nil, e
	}
	if e := ev.setUrgency(w.Urgency); e != nil {
		return nil, e
	}
	topicStr, e := stringField(w.Topic, fieldTopic, false)
	if e != nil {
		return nil, e
	}
	topic := topicStr.bytes()
	if len(topic) > MaxTopicLen {
		return nil, invalid(fieldTopic, "is %d characters, limit %d", len(topic), MaxTopicLen)
	}
	if !base64URLAlphabet(topic) {
		return nil, invalid(fieldTopic, "has a character outside the base64url alphabet")
	}
	if len(topic) > 0 {
		ev.Topic = string(topic)
	}

	if e := ev.setApp(w.App); e != nil {
		return nil, e
	}

	ev.CreatedAt = recordTime
	if w.CreatedAt.present() {
		s, e := stringField(w.CreatedAt, fieldCreatedAt, false)
		if e != nil {
			return nil, e
		}
		if err := ev.CreatedAt.UnmarshalText(s.bytes()); err != nil {
			return nil, invalid(fieldCreatedAt, "not an RFC 3339 time")
		}
		// A created_at after the record was produced is clamped to
		// then: the TTL counts from it, and one from the future would
		// be sent longer than the event's own ttl and never expire on
		// the ladder. The record's timestamp travels unchanged through
		// every retry hop, so the clamp is the same at each.
		if !recordTime.IsZero() && ev.CreatedAt.After(recordTime) {
			ev.CreatedAt = recordTime
		}
	}
	return ev, nil
}

// setEndpointURL parses and checks ev.Endpoint.
func (ev *Event) setEndpointURL(guard *netguard.Policy) *Error {
	if guard != nil {
		u, err := guard.CheckEndpoint(ev.Endpoint)
		if err != nil {
			msg := "blocked"
			var be *netguard.BlockedError
			if errors.As(err, &be) {
				msg = be.Reason
			}
			return &Error{Reason: ReasonEndpointBlocked, Field: fieldEndpoint, Msg: msg, err: err}
		}
		ev.EndpointURL = u
	} else {
		u, err := url.Parse(ev.Endpoint)
		switch {
		case err != nil:
			// The *url.Error holds the URL: never pass it on.
			return invalid(fieldEndpoint, "malformed URL")
		case u.Scheme != "https" && u.Scheme != "http":
			return invalid(fieldEndpoint, "want an https URL")
		case u.Opaque != "" || u.Hostname() == "":
			return invalid(fieldEndpoint, "URL has no host")
		case u.User != nil:
			return invalid(fieldEndpoint, "URL has userinfo")
		}
		ev.EndpointURL = u
	}
	ev.origin = originOf(ev.Endpoint, ev.EndpointURL)
	return nil
}

func (ev *Event) setTTL(raw rawValue, rules Rules) *Error {
	if !raw.present() {
		ev.TTL = rules.DefaultTTL
		return nil
	}
	b := []byte(raw)
	if b[0] == '-' {
		return invalid(fieldTTL, "is negative")
	}
	if b[0] < '0' || b[0] > '9' {
		return invalid(fieldTTL, "want a number of seconds")
	}
	var secs int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return invalid(fieldTTL, "want whole seconds")
		}
		secs = secs*10 + int64(c-'0')
		if secs > int64(rules.MaxTTL/time.Second) {
			return invalid(fieldTTL, "exceeds %d seconds", int64(rules.MaxTTL/time.Second))
		}
	}
	ev.TTL = time.Duration(secs) * time.Second
	return nil
}

// setApp reads the app: absent, null or DefaultApp is the default identity.
func (ev *Event) setApp(raw rawValue) *Error {
	if !raw.present() {
		return nil
	}
	s, e := stringField(raw, fieldApp, false)
	if e != nil {
		return e
	}
	b := s.bytes()
	if err := CheckApp(string(b)); err != nil {
		return invalid(fieldApp, "%s", err.Error())
	}
	if string(b) != DefaultApp {
		ev.App = string(b)
	}
	return nil
}

func (ev *Event) setUrgency(raw rawValue) *Error {
	s, e := stringField(raw, fieldUrgency, false)
	if e != nil {
		return e
	}
	switch string(s.bytes()) {
	case "":
	case UrgencyVeryLow:
		ev.Urgency = UrgencyVeryLow
	case UrgencyLow:
		ev.Urgency = UrgencyLow
	case UrgencyNormal:
		ev.Urgency = UrgencyNormal
	case UrgencyHigh:
		ev.Urgency = UrgencyHigh
	default:
		return invalid(fieldUrgency, "want very-low, low, normal or high")
	}
	return nil
}

// jsonString is the body of a JSON string value, between the quotes.
type jsonString struct {
	body    []byte
	escaped bool
}

// len returns the decoded length.
func (s jsonString) len() int {
	if !s.escaped {
		return len(s.body)
	}
	return unquote(nil, s.body)
}

// copyTo decodes into dst, which must be s.len() long.
func (s jsonString) copyTo(dst []byte) {
	if !s.escaped {
		copy(dst, s.body)
		return
	}
	unquote(dst, s.body)
}

// bytes returns the decoded contents: a sub-slice of the input when there
// are no escapes (no copy), else a new slice.
func (s jsonString) bytes() []byte {
	if !s.escaped {
		return s.body
	}
	b := make([]byte, s.len())
	s.copyTo(b)
	return b
}

// stringField reads a JSON string value. Absent or null gives the zero
// jsonString, or an error if required.
func stringField(raw rawValue, field string, required bool) (jsonString, *Error) {
	if !raw.present() {
		if required {
			return jsonString{}, invalid(field, "is missing")
		}
		return jsonString{}, nil
	}
	if raw[0] != '"' || len(raw) < 2 {
		return jsonString{}, invalid(field, "want a JSON string")
	}
	body := raw[1 : len(raw)-1]
	return jsonString{body: body, escaped: bytes.IndexByte(body, '\\') >= 0}, nil
}

// b64 is a base64 text (padding stripped) and the encoding that reads it.
type b64 struct {
	src []byte
	enc *base64.Encoding
}

// len returns the decoded length.
func (b b64) len() int { return b.enc.DecodedLen(len(b.src)) }

func (b b64) decode(dst []byte) error {
	n, err := b.enc.Decode(dst, b.src)
	if err == nil && n != len(dst) {
		err = errors.New("short base64")
	}
	return err
}

// base64Field reads a JSON string of base64 in the URL or standard alphabet,
// padded or not; it checks the alphabet and length, not the content.
func base64Field(raw rawValue, field string, required bool) (b64, *Error) {
	js, e := stringField(raw, field, required)
	if e != nil {
		return b64{}, e
	}
	s := js.bytes()
	if len(s) > 0 && s[len(s)-1] == '=' {
		s = s[:len(s)-1]
		if len(s) > 0 && s[len(s)-1] == '=' {
			s = s[:len(s)-1]
		}
	}
	var std, url bool
	for _, c := range s {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '+' || c == '/':
			std = true
		case c == '-' || c == '_':
			url = true
		default:
			return b64{}, invalid(field, "invalid base64")
		}
	}
	if (std && url) || len(s)%4 == 1 {
		return b64{}, invalid(field, "invalid base64")
	}
	if required && len(s) == 0 {
		return b64{}, invalid(field, "is empty")
	}
	if std {
		return b64{s, base64.RawStdEncoding}, nil
	}
	return b64{s, base64.RawURLEncoding}, nil
}

func printable(b []byte) bool {
	for len(b) > 0 {
		if c := b[0]; c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return false
			}
			b = b[1:]
			continue
		}
		r, n := utf8.DecodeRune(b)
		if !unicode.IsPrint(r) {
			return false
		}
		b = b[n:]
	}
	return true
}

func base64URLAlphabet(b []byte) bool {
	for _, c := range b {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// tooDeep reports whether b nests objects and arrays deeper than max. It only
// counts brackets outside strings; parse does the real validation.
func tooDeep(b []byte, max int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			// Skip to the closing quote: one preceded by an even number
			// of backslashes.
			for {
				j := bytes.IndexByte(b[i+1:], '"')
				if j < 0 {
					return false // unterminated: a syntax error later
				}
				i += 1 + j
				k := i - 1
				for k >= 0 && b[k] == '\\' {
					k--
				}
				if (i-1-k)%2 == 0 {
					break
				}
			}
		case '{', '[':
			depth++
			if depth > max {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}
