package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/push"
)

// now is second-aligned so HTTP-dates (whole seconds) give exact delays.
var now = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestClassifyStatus(t *testing.T) {
	const (
		delivered = push.Delivered
		gone      = push.Gone
		retryable = push.Retryable
		rejected  = push.Rejected
		tooLarge  = push.TooLarge
		vapid     = push.VAPIDRejected
	)
	throttled := header("X-WNS-Status", "appthrottled")
	tests := []struct {
		name    string
		status  int
		h       http.Header
		want    push.Class
		wantRA  time.Duration
		wantErr bool // Err must be set (push-error of a DLQ or retry record)
	}{
		{"200", 200, nil, delivered, 0, false},
		{"201", 201, nil, delivered, 0, false},
		{"202", 202, nil, delivered, 0, false},
		{"204", 204, nil, delivered, 0, false},
		{"201 with Retry-After ignored", 201, header("Retry-After", "30"), delivered, 0, false},
		{"400", 400, nil, rejected, 0, true},
		{"401", 401, nil, vapid, 0, true},
		{"403", 403, nil, vapid, 0, true},
		{"403 Retry-After ignored", 403, header("Retry-After", "7"), vapid, 0, true},
		{"404", 404, nil, gone, 0, false},
		{"410", 410, nil, gone, 0, false},
		{"413", 413, nil, tooLarge, 0, true},
		{"429", 429, nil, retryable, 0, true},
		{"429 Retry-After 7", 429, header("Retry-After", "7"), retryable, 7 * time.Second, true},
		{"429 Retry-After date", 429, header("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)), retryable, 90 * time.Second, true},
		{"429 Retry-After garbage", 429, header("Retry-After", "soon"), retryable, 0, true},
		{"500", 500, nil, retryable, 0, true},
		{"500 Retry-After 120", 500, header("Retry-After", "120"), retryable, 2 * time.Minute, true},
		{"502", 502, nil, retryable, 0, true},
		{"503", 503, nil, retryable, 0, true},
		{"503 Retry-After 3600", 503, header("Retry-After", "3600"), retryable, time.Hour, true},
		{"504", 504, nil, retryable, 0, true},
		{"406", 406, nil, rejected, 0, true},
		{"406 other WNS status", 406, header("X-WNS-Status", "dropped"), rejected, 0, true},
		{"406 appthrottled", 406, throttled, retryable, 0, true},
		{"406 AppThrottled", 406, header("X-WNS-Status", "AppThrottled"), retryable, 0, true},
		{"406 appthrottled Retry-After", 406, header("X-WNS-Status", "appthrottled", "Retry-After", "60"), retryable, time.Minute, true},
		{"400 with appthrottled", 400, throttled, rejected, 0, true},
		{"400 Retry-After ignored", 400, header("Retry-After", "7"), rejected, 0, true},
		{"405", 405, nil, rejected, 0, true},
		{"418", 418, nil, rejected, 0, true},
		{"451", 451, nil, rejected, 0, true},
		{"301 redirect not followed", 301, header("Location", "https://elsewhere.example/"), rejected, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.h
			if h == nil {
				h = http.Header{}
			}
			got := Classify(tt.status, h, nil, now)
			if got.Class != tt.want || got.Status != tt.status || got.RetryAfter != tt.wantRA {
				t.Errorf("Classify(%d) = %v/%d/%v, want %v/%d/%v", tt.status, got.Class, got.Status, got.RetryAfter, tt.want, tt.status, tt.wantRA)
			}
			if (got.Err != "") != tt.wantErr {
				t.Errorf("Classify(%d).Err = %q, want set %v", tt.status, got.Err, tt.wantErr)
			}
		})
	}
}

// timeoutErr is a net.Error that timed out, as a dialer or TLS handshake
// deadline gives.
type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

const secretURL = "https://fcm.googleapis.com/fcm/send/dXNlcjEyMzQ:APA91bHun4MxP5egoKMwt2KZFBaFUH-1RYqx"

// urlErr wraps err the way http.Client does, with the capability URL.
func urlErr(err error) error { return &url.Error{Op: "Post", URL: secretURL, Err: err} }

func TestClassifyTransportError(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(203, 0, 113, 7), Port: 443}, Err: syscall.ECONNREFUSED}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	tests := []struct {
		name    string
		err     error
		wantErr string
	}{
		{"deadline exceeded", context.DeadlineExceeded, "timeout"},
		{"deadline exceeded in url.Error", urlErr(context.DeadlineExceeded), "timeout"},
		{"deadline exceeded wrapped", fmt.Errorf("send: %w", urlErr(context.DeadlineExceeded)), "timeout"},
		{"timeout net.Error", timeoutErr{}, "timeout"},
		{"timeout net.Error in url.Error", urlErr(timeoutErr{}), "timeout"},
		{"dial timeout OpError", urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: timeoutErr{}}), "timeout"},
		{"connection refused", refused, "connection error: dial"},
		{"connection refused in url.Error", urlErr(refused), "connection error: dial"},
		{"connection reset", urlErr(reset), "connection error: read"},
		{"unexpected EOF", urlErr(io.ErrUnexpectedEOF), "connection error"},
		{"canceled", urlErr(context.Canceled), "connection error"},
		{"error text holding the URL", errors.New("Post " + secretURL + ": boom"), "connection error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Classify(0, nil, tt.err, now)
			if got.Class != push.Retryable || got.Status != 0 || got.RetryAfter != 0 {
				t.Errorf("Classify(err) = %v/%d/%v, want retryable/0/0", got.Class, got.Status, got.RetryAfter)
			}
			if got.Err != tt.wantErr {
				t.Errorf("Classify(err).Err = %q, want %q", got.Err, tt.wantErr)
			}
			for _, secret := range []string{"://", "fcm.googleapis.com", "APA91b", "203.0.113.7"} {
				if strings.Contains(got.Err, secret) {
					t.Errorf("Classify(err).Err = %q holds %q", got.Err, secret)
				}
			}
		})
	}
}

func TestParseRetryAfter(t *testing.T) {
	tests := []struct {
		name   string
		v      string
		want   time.Duration
		wantOK bool
	}{
		{"seconds", "7", 7 * time.Second, true},
		{"zero", "0", 0, true},
		{"leading zeros", "0007", 7 * time.Second, true},
		{"surrounding whitespace", " \t120 \r\n", 2 * time.Minute, true},
		{"one day", "86400", 24 * time.Hour, true},
		{"just over a day capped", "86401", 24 * time.Hour, true},
		{"a year capped", "31536000", 24 * time.Hour, true},
		{"max uint64 capped", "18446744073709551615", 24 * time.Hour, true},
		{"beyond uint64 capped", "99999999999999999999999", 24 * time.Hour, true},
		{"leading zeros beyond uint64 capped", "000000000000000000000000000086400", 24 * time.Hour, true},
		{"date in the future", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"date in the future, RFC 850", now.Add(time.Hour).Format(time.RFC850), time.Hour, true},
		{"date in the future, ANSI C", now.Add(10 * time.Second).Format(time.ANSIC), 10 * time.Second, true},
		{"date now", now.Format(http.TimeFormat), 0, true},
		{"date in the past", now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"date long past", "Sun, 06 Nov 1994 08:49:37 GMT", 0, true},
		{"date two days ahead capped", now.Add(48 * time.Hour).Format(http.TimeFormat), 24 * time.Hour, true},
		{"date far ahead capped", "Fri, 31 Dec 9999 23:59:59 GMT", 24 * time.Hour, true},
		{"date with whitespace", "  " + now.Add(5*time.Second).Format(http.TimeFormat) + " ", 5 * time.Second, true},

		{"empty", "", 0, false},
		{"whitespace", " \t ", 0, false},
		{"garbage", "soon", 0, false},
		{"unit", "7s", 0, false},
		{"negative", "-1", 0, false},
		{"plus sign", "+7", 0, false},
		{"fraction", "1.5", 0, false},
		{"exponent", "1e3", 0, false},
		{"hex", "0x10", 0, false},
		{"two numbers", "7 8", 0, false},
		{"digits then garbage beyond uint64", "99999999999999999999999x", 0, false},
		{"date without time", "Sun, 06 Nov 1994", 0, false},
		{"ISO date", "2026-11-21T12:00:10Z", 0, false},
		{"long garbage", strings.Repeat("x", 10_000), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ParseRetryAfter(tt.v, now)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.v, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// FuzzParseRetryAfter feeds push-service-controlled Retry-After values to
// ParseRetryAfter. Seed corpus: testdata/fuzz/FuzzParseRetryAfter.
func FuzzParseRetryAfter(f *testing.F) {
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		at := time.Unix(nowUnix, 0)
		got, ok := ParseRetryAfter(v, at)
		if got < 0 || got > maxRetryAfter {
			t.Fatalf("ParseRetryAfter(%q) = %v, outside [0, %v]", v, got, maxRetryAfter)
		}
		if !ok && got != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, false; want 0 when not ok", v, got)
		}
		if strings.TrimSpace(v) == "" && ok {
			t.Fatalf("ParseRetryAfter(%q) ok for a blank value", v)
		}
		// Classify must carry the same floor for a retryable answer.
		r := Classify(http.StatusTooManyRequests, http.Header{"Retry-After": {v}}, nil, at)
		if r.RetryAfter != got {
			t.Fatalf("Classify RetryAfter = %v, ParseRetryAfter = %v", r.RetryAfter, got)
		}
	})
}
