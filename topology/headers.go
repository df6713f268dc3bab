package topology

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header keys of the records the processor writes (docs/design.md, "Headers
// on records the processor writes").
const (
	HeaderAttempt      = "push-attempt"
	HeaderDue          = "push-due"
	HeaderNotBefore    = "push-not-before"
	HeaderFirstSeen    = "push-first-seen"
	HeaderOrigin       = "push-origin"
	HeaderStatus       = "push-status"
	HeaderReason       = "push-reason"
	HeaderError        = "push-error"
	HeaderRedriveCount = "push-redrive-count"
	HeaderSig          = "push-sig"
	HeaderTraceparent  = "traceparent"
)

// Reason says why a record left the pipeline (push-reason).
type Reason string

// The reasons of the public contract.
const (
	ReasonMaxAttempts     Reason = "max_attempts"
	ReasonTTLExpired      Reason = "ttl_expired"
	ReasonRejected        Reason = "rejected"
	ReasonPayloadTooLarge Reason = "payload_too_large"
	ReasonInvalidEvent    Reason = "invalid_event"
	ReasonEndpointBlocked Reason = "endpoint_blocked"
	ReasonBadSignature    Reason = "bad_signature"
	ReasonUnknownApp      Reason = "unknown_app"
	ReasonVAPIDRejected   Reason = "vapid_rejected"
	ReasonDelivered       Reason = "delivered"
	ReasonGone            Reason = "gone"
)

// maxHeaderValue bounds what the codec reads from one header, so a hostile
// record cannot make it parse megabytes.
const maxHeaderValue = 256

// Meta is the routing state a record carries in its headers.
type Meta struct {
	Attempt      int       // sends made so far
	Due          time.Time // when a retry record may be sent again
	NotBefore    time.Time // Retry-After or breaker floor; zero when none
	FirstSeen    time.Time // first dispatch attempt
	Origin       string    // topic/partition/offset of the original event
	Status       int       // last HTTP status, 0 when none
	Reason       Reason
	Error        string
	RedriveCount int
	Sig          string
}

// ErrHeader is wrapped by every header decoding error.
var ErrHeader = errors.New("bad header")

// DecodeMeta reads the routing headers of a record. Unknown headers are
// ignored; a malformed known header is an error wrapping ErrHeader.
func DecodeMeta(hs []kgo.RecordHeader) (Meta, error) {
	var m Meta
	var err error
	for _, h := range hs {
		if !strings.HasPrefix(h.Key, "push-") {
			continue
		}
		if len(h.Value) > maxHeaderValue {
			return Meta{}, fmt.Errorf("%w: %s is %d bytes", ErrHeader, h.Key, len(h.Value))
		}
		v := string(h.Value)
		switch h.Key {
		case HeaderAttempt:
			m.Attempt, err = parseCount(h.Key, v)
		case HeaderDue:
			m.Due, err = parseMillis(h.Key, v)
		case HeaderNotBefore:
			m.NotBefore, err = parseMillis(h.Key, v)
		case HeaderFirstSeen:
			m.FirstSeen, err = parseMillis(h.Key, v)
		case HeaderOrigin:
			m.Origin = v
		case HeaderStatus:
			m.Status, err = parseCount(h.Key, v)
		case HeaderReason:
			m.Reason = Reason(v)
		case HeaderError:
			m.Error = v
		case HeaderRedriveCount:
			m.RedriveCount, err = parseCount(h.Key, v)
		case HeaderSig:
			m.Sig = v
		}
		if err != nil {
			return Meta{}, err
		}
	}
	return m, nil
}

func parseCount(key, v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 1_000_000 {
		return 0, fmt.Errorf("%w: %s %q is not a count", ErrHeader, key, v)
	}
	return n, nil
}

func parseMillis(key, v string) (time.Time, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > 1<<50 {
		return time.Time{}, fmt.Errorf("%w: %s %q is not unix milliseconds", ErrHeader, key, v)
	}
	return time.UnixMilli(n), nil
}

// Headers appends m's routing headers to dst, all but the signature, in a
// fixed order (the signature covers them in this order).
func (m *Meta) Headers(dst []kgo.RecordHeader) []kgo.RecordHeader {
	// Every value is a slice of one buffer, sized so that no append
	// moves it: one allocation for the values, not two per header (bench
	// a: 4% of the processor's allocations).
	const num = 20 // the longest int64 in decimal
	buf := make([]byte, 0, 6*num+len(m.Origin)+len(m.Reason)+len(m.Error))
	add := func(k string, v []byte) []byte {
		dst = append(dst, kgo.RecordHeader{Key: k, Value: v[len(buf):len(v):len(v)]})
		return v
	}
	buf = add(HeaderAttempt, strconv.AppendInt(buf, int64(m.Attempt), 10))
	if !m.Due.IsZero() {
		buf = add(HeaderDue, strconv.AppendInt(buf, m.Due.UnixMilli(), 10))
	}
	if !m.NotBefore.IsZero() {
		buf = add(HeaderNotBefore, strconv.AppendInt(buf, m.NotBefore.UnixMilli(), 10))
	}
	if !m.FirstSeen.IsZero() {
		buf = add(HeaderFirstSeen, strconv.AppendInt(buf, m.FirstSeen.UnixMilli(), 10))
	}
	buf = add(HeaderOrigin, append(buf, m.Origin...))
	buf = add(HeaderStatus, strconv.AppendInt(buf, int64(m.Status), 10))
	if m.Reason != "" {
		buf = add(HeaderReason, append(buf, m.Reason...))
	}
	if m.Error != "" {
		buf = add(HeaderError, append(buf, m.Error...))
	}
	if m.RedriveCount > 0 {
		add(HeaderRedriveCount, strconv.AppendInt(buf, int64(m.RedriveCount), 10))
	}
	return dst
}

// OriginOf formats the push-origin of a record: one allocation, the string
// (the offset's own string and the concatenation were two per record).
func OriginOf(r *kgo.Record) string {
	var b [128]byte
	s := append(b[:0], r.Topic...)
	s = append(s, '/')
	s = strconv.AppendInt(s, int64(r.Partition), 10)
	s = append(s, '/')
	s = strconv.AppendInt(s, r.Offset, 10)
	return string(s)
}

// ParseOrigin splits a push-origin value into topic, partition and offset.
func ParseOrigin(s string) (topic string, partition int32, offset int64, err error) {
	i := strings.LastIndexByte(s, '/')
	if i <= 0 {
		return "", 0, 0, fmt.Errorf("%w: push-origin %q", ErrHeader, s)
	}
	j := strings.LastIndexByte(s[:i], '/')
	if j <= 0 {
		return "", 0, 0, fmt.Errorf("%w: push-origin %q", ErrHeader, s)
	}
	p, err1 := strconv.ParseInt(s[j+1:i], 10, 32)
	o, err2 := strconv.ParseInt(s[i+1:], 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return "", 0, 0, fmt.Errorf("%w: push-origin %q", ErrHeader, s)
	}
	return s[:j], int32(p), o, nil
}
