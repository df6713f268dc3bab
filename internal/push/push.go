// Package push is the vocabulary of one send's result: what a push
// service's answer means for the notification. It is a leaf: dispatch
// classifies into it, pacing learns from it, topology routes by it. It
// must not import anything of the project.
package push

import "time"

// Class is what a push service's answer means for the notification.
type Class uint8

// The classes of a send result (docs/design.md, "Retry, backoff and pacing
// rules").
const (
	// Delivered: 2xx, the push service took the message.
	Delivered Class = iota + 1
	// Gone: 404/410, the subscription no longer exists.
	Gone
	// Retryable: 429, 5xx, WNS throttling, timeouts and connection errors.
	Retryable
	// Rejected: any other 4xx (401 and 403 are VAPIDRejected); sending
	// again cannot help.
	Rejected
	// TooLarge: 413, the payload is too large for the push service.
	TooLarge
	// Deferred: no send was made (breaker open or origin paused); the
	// record waits on the ladder without spending an attempt.
	Deferred
	// Blocked: the endpoint was refused before any byte was sent.
	Blocked
	// VAPIDRejected: 401 or 403, the push service refused the sender's
	// VAPID authorization; for a valid JWT that means the subscription was
	// made with another application server key (FCM answers 403, Mozilla
	// 401). Sending again with the same key cannot help.
	VAPIDRejected
)

var classNames = [...]string{"", "delivered", "gone", "retryable", "rejected", "too_large", "deferred", "blocked", "vapid_rejected"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// Result is the classified outcome of one send.
type Result struct {
	Class      Class
	Status     int           // HTTP status, 0 when none
	RetryAfter time.Duration // Retry-After as a duration from the send; 0 when none
	Err        string        // short cause for push-error, never a secret
}
