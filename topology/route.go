package topology

import (
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/tierpush/tierpush/tiers"
)

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
	Result    push.Result
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
	case push.Delivered:
		return Decision{Action: ActionDone, Outcome: OutcomeDelivered, Reason: ReasonDelivered}
	case push.Gone:
		return Decision{Action: ActionDone, Outcome: OutcomeGone, Reason: ReasonGone}
	case push.Rejected:
		return Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonRejected}
	case push.VAPIDRejected:
		return Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonVAPIDRejected}
	case push.TooLarge:
		return Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonPayloadTooLarge}
	case push.Blocked:
		return Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonEndpointBlocked}
	}
	if !in.Deadline.IsZero() && !in.Now.Before(in.Deadline) {
		return expired()
	}
	l := p.Ladder(in.Tier)
	if in.Result.Class == push.Retryable && in.Attempt >= l.MaxAttempts {
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
