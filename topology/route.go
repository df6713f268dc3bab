package topology

import (
	"time"

	"github.com/tierpush/tierpush/tiers"
)

// Class is what a push service's answer means for the notification.
type Class uint8

// The classes of a send result (DESIGN §6).
const (
	// ClassDelivered: 2xx, the push service took the message.
	ClassDelivered Class = iota + 1
	// ClassGone: 404/410, the subscription no longer exists.
	ClassGone
	// ClassRetryable: 429, 5xx, WNS throttling, timeouts and connection errors.
	ClassRetryable
	// ClassRejected: any other 4xx; sending again cannot help.
	ClassRejected
	// ClassTooLarge: 413, the payload is too large for the push service.
	ClassTooLarge
	// ClassDeferred: no send was made (breaker open or origin paused); the
	// record waits on the ladder without spending an attempt.
	ClassDeferred
	// ClassBlocked: the endpoint was refused before any byte was sent.
	ClassBlocked
)

var classNames = [...]string{"", "delivered", "gone", "retryable", "rejected", "too_large", "deferred", "blocked"}

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

// Outcome is the terminal state of an event in push.outcomes.
type Outcome string

// Terminal outcomes.
const (
	OutcomeDelivered Outcome = "delivered"
	OutcomeGone      Outcome = "gone"
	OutcomeDead      Outcome = "dead"
	OutcomeExpired   Outcome = "expired"
)

// Action is where a record goes after a send.
type Action uint8

// Actions of a Decision.
const (
	// ActionDone: terminal success or gone; write the outcome (and the
	// unsubscribe event when gone).
	ActionDone Action = iota + 1
	// ActionRetry: produce to a retry step.
	ActionRetry
	// ActionDeadLetter: produce to the DLQ and write the outcome.
	ActionDeadLetter
)

// Input is everything the routing decision depends on.
type Input struct {
	Tier      tiers.Tier
	Attempt   int       // sends made so far, this one included
	Deadline  time.Time // created_at + TTL: the message is worthless after it
	NotBefore time.Time // an earlier floor still in force (Retry-After hop); zero when none
	Result    Result
	Now       time.Time
}

// Decision is the pure routing decision for one send result.
type Decision struct {
	Action    Action
	Outcome   Outcome
	Reason    Reason
	Step      int           // ladder index when ActionRetry
	Delay     time.Duration // the step's delay when ActionRetry
	Due       time.Time     // when the retry may be consumed
	NotBefore time.Time     // floor carried by a hop through the last step
}

// Decide routes a send result. It is a pure function of its inputs.
func Decide(p *tiers.Policy, in Input) Decision {
	switch in.Result.Class {
	case ClassDelivered:
		return Decision{Action: ActionDone, Outcome: OutcomeDelivered, Reason: ReasonDelivered}
	case ClassGone:
		return Decision{Action: ActionDone, Outcome: OutcomeGone, Reason: ReasonGone}
	case ClassRejected:
		return Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonRejected}
	case ClassTooLarge:
		return Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonPayloadTooLarge}
	case ClassBlocked:
		return Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonEndpointBlocked}
	}
	if !in.Deadline.IsZero() && !in.Now.Before(in.Deadline) {
		return expired()
	}
	l := p.Ladder(in.Tier)
	if in.Result.Class == ClassRetryable && in.Attempt >= l.MaxAttempts {
		return Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonMaxAttempts}
	}
	// The ladder's own backoff for the attempts made; a deferral that spent
	// nothing stays where it is.
	step := l.StepFor(max(in.Attempt, 1))
	floor := in.NotBefore
	if ra := in.Result.RetryAfter; ra > 0 {
		if t := in.Now.Add(ra); t.After(floor) {
			floor = t
		}
	}
	if !floor.After(in.Now) {
		floor = time.Time{}
	}
	if !floor.IsZero() {
		if i, ok := l.StepAtLeast(floor.Sub(in.Now)); ok {
			step = max(step, i)
		} else {
			step = len(l.Steps) - 1
		}
	}
	d := Decision{Action: ActionRetry, Step: step, Delay: l.Steps[step], Due: in.Now.Add(l.Steps[step])}
	if floor.After(d.Due) {
		// Retry-After beyond the last step: hop through it; the consumer
		// forwards it again without sending until the floor is reached.
		d.NotBefore = floor
	}
	// The send after the wait must still come before the deadline.
	if !in.Deadline.IsZero() && (d.Due.After(in.Deadline) || floor.After(in.Deadline)) {
		return expired()
	}
	return d
}

func expired() Decision {
	return Decision{Action: ActionDeadLetter, Outcome: OutcomeExpired, Reason: ReasonTTLExpired}
}
