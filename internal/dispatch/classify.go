package dispatch

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tierpush/tierpush/internal/push"
)

// maxRetryAfter caps a Retry-After the push service sends: a floor further
// out than this is treated as this (the TTL check still applies).
const maxRetryAfter = 24 * time.Hour

// Classify maps a push service's answer, or the error that stopped the
// request, to a routing class (docs/design.md, "Retry, backoff and pacing
// rules"). It is a pure function.
func Classify(status int, h http.Header, err error, now time.Time) push.Result {
	if err != nil {
		return push.Result{Class: push.Retryable, Err: transportCause(err)}
	}
	r := push.Result{Status: status}
	switch {
	case status >= 200 && status < 300:
		r.Class = push.Delivered
	case status == http.StatusNotFound || status == http.StatusGone:
		r.Class = push.Gone
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// What a push service answers a JWT signed with another key than
		// the subscription's (FCM 403, Mozilla 401), or none it accepts.
		r.Class = push.VAPIDRejected
		r.Err = "push service answered " + strconv.Itoa(status) + ": VAPID authorization refused"
	case status == http.StatusRequestEntityTooLarge:
		r.Class = push.TooLarge
		r.Err = "push service answered 413: payload too large"
	case status == http.StatusTooManyRequests,
		status == http.StatusInternalServerError,
		status == http.StatusBadGateway,
		status == http.StatusServiceUnavailable,
		status == http.StatusGatewayTimeout:
		r.Class = push.Retryable
		r.Err = "push service answered " + strconv.Itoa(status)
	case status == http.StatusNotAcceptable && strings.EqualFold(h.Get("X-WNS-Status"), "appthrottled"):
		// WNS throttles senders with 406 instead of 429.
		r.Class = push.Retryable
		r.Err = "push service answered 406 appthrottled"
	default:
		r.Class = push.Rejected
		r.Err = "push service answered " + strconv.Itoa(status)
	}
	if r.Class == push.Retryable {
		if d, ok := ParseRetryAfter(h.Get("Retry-After"), now); ok {
			r.RetryAfter = d
		}
	}
	return r
}

// ParseRetryAfter reads a Retry-After value in either form of RFC 9110:
// delay-seconds or an HTTP-date. It returns false when v is empty or
// malformed. A date in the past is a zero delay.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 64 {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil && !(errors.Is(err, strconv.ErrRange) && allDigits(v)) {
			return 0, false
		}
		// ErrRange: digits beyond uint64 are still delay-seconds, just huge.
		if err != nil || n > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d := t.Sub(now)
	if d < 0 {
		d = 0
	}
	return min(d, maxRetryAfter), true
}

// transportCause names a transport failure without its URL (url.Error
// carries the capability URL of the subscription).
func transportCause(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return "connection error: " + op.Op
	}
	return "connection error"
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
