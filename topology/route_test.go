package topology

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/tierpush/tierpush/tiers"
)

func TestDecide(t *testing.T) {
	p := tiers.DefaultPolicy()
	now := t0
	s := time.Second

	retry := func(step int, delay time.Duration) Decision {
		return Decision{Action: ActionRetry, Step: step, Delay: delay, Due: now.Add(delay)}
	}
	hop := func(step int, delay, notBefore time.Duration) Decision {
		d := retry(step, delay)
		d.NotBefore = now.Add(notBefore)
		return d
	}
	var (
		delivered   = Decision{Action: ActionDone, Outcome: OutcomeDelivered, Reason: ReasonDelivered}
		gone        = Decision{Action: ActionDone, Outcome: OutcomeGone, Reason: ReasonGone}
		rejected    = Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonRejected}
		vapid       = Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonVAPIDRejected}
		tooLarge    = Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonPayloadTooLarge}
		blocked     = Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonEndpointBlocked}
		maxAttempts = Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonMaxAttempts}
		expired     = Decision{Action: ActionDeadLetter, Outcome: OutcomeExpired, Reason: ReasonTTLExpired}
	)
	retryable := func(status int, ra time.Duration) push.Result {
		return push.Result{Class: push.Retryable, Status: status, RetryAfter: ra, Err: "push service answered"}
	}
	deferred := push.Result{Class: push.Deferred}

	// input is an Input with times as offsets from now: deadline none for
	// no deadline (TTL 0), notBefore 0 for no earlier floor.
	const none = time.Duration(math.MinInt64)
	type input struct {
		tier      tiers.Tier
		attempt   int
		deadline  time.Duration
		notBefore time.Duration
		result    push.Result
	}
	tests := []struct {
		name string
		in   input
		want Decision
	}{
		// Terminal classes: no ladder, whatever the attempt or deadline.
		{"delivered 201", input{tiers.Tier1, 1, none, 0, push.Result{Class: push.Delivered, Status: 201}}, delivered},
		{"delivered on the last attempt", input{tiers.Tier1, 5, none, 0, push.Result{Class: push.Delivered, Status: 201}}, delivered},
		{"delivered after the deadline", input{tiers.Tier2, 2, -s, 0, push.Result{Class: push.Delivered, Status: 201}}, delivered},
		{"gone 410", input{tiers.Tier1, 1, none, 0, push.Result{Class: push.Gone, Status: 410}}, gone},
		{"gone 404 tier3", input{tiers.Tier3, 3, time.Hour, 0, push.Result{Class: push.Gone, Status: 404}}, gone},
		{"gone from a tombstone, no send", input{tiers.Tier2, 0, none, 0, push.Result{Class: push.Gone}}, gone},
		{"rejected 400", input{tiers.Tier1, 1, none, 0, push.Result{Class: push.Rejected, Status: 400}}, rejected},
		{"rejected 400 below max attempts", input{tiers.Tier3, 2, time.Hour, 0, push.Result{Class: push.Rejected, Status: 400}}, rejected},
		{"rejected at max attempts", input{tiers.Tier1, 5, none, 0, push.Result{Class: push.Rejected, Status: 405}}, rejected},
		{"vapid rejected 403", input{tiers.Tier1, 1, none, 0, push.Result{Class: push.VAPIDRejected, Status: 403}}, vapid},
		{"vapid rejected 401 on a retry", input{tiers.Tier2, 3, time.Hour, 0, push.Result{Class: push.VAPIDRejected, Status: 401}}, vapid},
		{"vapid rejected after the deadline", input{tiers.Tier3, 1, -s, 0, push.Result{Class: push.VAPIDRejected, Status: 403}}, vapid},
		{"vapid rejected at max attempts", input{tiers.Tier1, 5, none, 0, push.Result{Class: push.VAPIDRejected, Status: 403}}, vapid},
		{"too large 413", input{tiers.Tier2, 1, none, 0, push.Result{Class: push.TooLarge, Status: 413}}, tooLarge},
		{"blocked at dial", input{tiers.Tier1, 1, none, 0, push.Result{Class: push.Blocked}}, blocked},
		{"blocked with Retry-After ignored", input{tiers.Tier1, 1, none, 0, push.Result{Class: push.Blocked, RetryAfter: time.Minute}}, blocked},

		// Retryable: the tier's ladder by attempt, the last step repeating.
		{"tier1 attempt 1", input{tiers.Tier1, 1, none, 0, retryable(503, 0)}, retry(0, 2*s)},
		{"tier1 attempt 2", input{tiers.Tier1, 2, none, 0, retryable(500, 0)}, retry(1, 8*s)},
		{"tier1 attempt 3", input{tiers.Tier1, 3, none, 0, retryable(502, 0)}, retry(2, 60*s)},
		{"tier1 attempt 4 repeats last", input{tiers.Tier1, 4, none, 0, retryable(504, 0)}, retry(2, 60*s)},
		{"tier1 attempt 5 is max", input{tiers.Tier1, 5, none, 0, retryable(503, 0)}, maxAttempts},
		{"tier1 attempt 6 is past max", input{tiers.Tier1, 6, none, 0, retryable(503, 0)}, maxAttempts},
		{"tier2 attempt 1", input{tiers.Tier2, 1, none, 0, retryable(429, 0)}, retry(0, 2*s)},
		{"tier2 attempt 2", input{tiers.Tier2, 2, none, 0, retryable(429, 0)}, retry(1, 8*s)},
		{"tier2 attempt 3", input{tiers.Tier2, 3, none, 0, retryable(429, 0)}, retry(2, 60*s)},
		{"tier2 attempt 4 repeats last", input{tiers.Tier2, 4, none, 0, retryable(429, 0)}, retry(2, 60*s)},
		{"tier2 attempt 5 is max", input{tiers.Tier2, 5, none, 0, retryable(429, 0)}, maxAttempts},
		{"tier3 attempt 1", input{tiers.Tier3, 1, none, 0, retryable(503, 0)}, retry(0, 8*s)},
		{"tier3 attempt 2", input{tiers.Tier3, 2, none, 0, retryable(503, 0)}, retry(1, 60*s)},
		{"tier3 attempt 3 repeats last", input{tiers.Tier3, 3, none, 0, retryable(503, 0)}, retry(1, 60*s)},
		{"tier3 attempt 4 is max", input{tiers.Tier3, 4, none, 0, retryable(503, 0)}, maxAttempts},
		{"transport error, no status", input{tiers.Tier1, 1, none, 0, push.Result{Class: push.Retryable, Err: "timeout"}}, retry(0, 2*s)},

		// Retry-After is a floor: the smallest step at least as long, never
		// below the ladder's own step.
		{"RA below the own step", input{tiers.Tier1, 1, none, 0, retryable(429, s)}, retry(0, 2*s)},
		{"RA equal to the first step", input{tiers.Tier1, 1, none, 0, retryable(429, 2*s)}, retry(0, 2*s)},
		{"RA just above the first step", input{tiers.Tier1, 1, none, 0, retryable(429, 2*s+time.Millisecond)}, retry(1, 8*s)},
		{"RA 7s picks 8s", input{tiers.Tier1, 1, none, 0, retryable(429, 7*s)}, retry(1, 8*s)},
		{"RA equal to the second step", input{tiers.Tier2, 1, none, 0, retryable(429, 8*s)}, retry(1, 8*s)},
		{"RA 30s picks 60s", input{tiers.Tier1, 1, none, 0, retryable(503, 30*s)}, retry(2, 60*s)},
		{"RA equal to the last step, no hop", input{tiers.Tier1, 1, none, 0, retryable(429, 60*s)}, retry(2, 60*s)},
		{"RA below a later own step", input{tiers.Tier1, 2, none, 0, retryable(429, s)}, retry(1, 8*s)},
		{"RA 5s on the last step stays last", input{tiers.Tier1, 3, none, 0, retryable(429, 5*s)}, retry(2, 60*s)},
		{"tier3 RA 3s picks 8s", input{tiers.Tier3, 1, none, 0, retryable(429, 3*s)}, retry(0, 8*s)},
		{"tier3 RA 9s picks 60s", input{tiers.Tier3, 1, none, 0, retryable(429, 9*s)}, retry(1, 60*s)},
		{"RA at max attempts still dead", input{tiers.Tier1, 5, none, 0, retryable(429, 7*s)}, maxAttempts},

		// Retry-After beyond the last step: hop through it with NotBefore.
		{"RA 61s hops", input{tiers.Tier1, 1, none, 0, retryable(429, 61*s)}, hop(2, 60*s, 61*s)},
		{"RA 2m hops", input{tiers.Tier2, 2, none, 0, retryable(429, 2*time.Minute)}, hop(2, 60*s, 2*time.Minute)},
		{"RA 24h hops", input{tiers.Tier1, 1, none, 0, retryable(503, 24*time.Hour)}, hop(2, 60*s, 24*time.Hour)},
		{"tier3 RA 10m hops", input{tiers.Tier3, 1, none, 0, retryable(429, 10*time.Minute)}, hop(1, 60*s, 10*time.Minute)},
		{"earlier floor later than RA", input{tiers.Tier1, 2, none, 5 * time.Minute, retryable(429, 7*s)}, hop(2, 60*s, 5*time.Minute)},
		{"RA later than earlier floor", input{tiers.Tier1, 2, none, 70 * s, retryable(429, 10*time.Minute)}, hop(2, 60*s, 10*time.Minute)},
		{"earlier floor already passed", input{tiers.Tier1, 1, none, -s, retryable(503, 0)}, retry(0, 2*s)},

		// Deferred: no send, no attempt spent; the record keeps its place.
		{"deferred before any send", input{tiers.Tier1, 0, none, 0, deferred}, retry(0, 2*s)},
		{"deferred before any send tier3", input{tiers.Tier3, 0, none, 0, deferred}, retry(0, 8*s)},
		{"deferred after one send", input{tiers.Tier1, 1, none, 0, deferred}, retry(0, 2*s)},
		{"deferred after two sends", input{tiers.Tier2, 2, none, 0, deferred}, retry(1, 8*s)},
		{"deferred after four sends", input{tiers.Tier1, 4, none, 0, deferred}, retry(2, 60*s)},
		{"deferred with Retry-After", input{tiers.Tier1, 0, none, 0, push.Result{Class: push.Deferred, RetryAfter: 30 * s}}, retry(2, 60*s)},
		{"deferred, floor within the ladder", input{tiers.Tier1, 1, none, 5 * s, deferred}, retry(1, 8*s)},
		{"deferred, floor exactly the last step", input{tiers.Tier1, 1, none, 60 * s, deferred}, retry(2, 60*s)},
		{"deferred hop continues", input{tiers.Tier1, 2, none, 100 * s, deferred}, hop(2, 60*s, 100*s)},
		{"deferred hop tier3", input{tiers.Tier3, 1, none, time.Hour, deferred}, hop(1, 60*s, time.Hour)},
		{"deferred, floor passed", input{tiers.Tier3, 2, none, -time.Minute, deferred}, retry(1, 60*s)},

		// Deadline (created_at + TTL).
		{"deadline passed", input{tiers.Tier1, 1, -s, 0, retryable(503, 0)}, expired},
		{"deadline is now", input{tiers.Tier1, 1, 0, 0, retryable(503, 0)}, expired},
		{"deadline is now, deferred", input{tiers.Tier1, 0, 0, 0, deferred}, expired},
		{"deadline passed, deferred", input{tiers.Tier2, 0, -time.Millisecond, 0, deferred}, expired},
		{"deadline passed, at max attempts", input{tiers.Tier3, 4, -time.Hour, 0, retryable(503, 0)}, expired},
		{"next due after deadline", input{tiers.Tier1, 1, s, 0, retryable(503, 0)}, expired},
		{"next due 1ms after deadline", input{tiers.Tier1, 2, 8*s - time.Millisecond, 0, retryable(503, 0)}, expired},
		{"next due at deadline", input{tiers.Tier1, 1, 2 * s, 0, retryable(503, 0)}, retry(0, 2*s)},
		{"next due before deadline", input{tiers.Tier1, 3, time.Hour, 0, retryable(503, 0)}, retry(2, 60*s)},
		{"tier3 first step after deadline", input{tiers.Tier3, 1, 5 * s, 0, retryable(503, 0)}, expired},
		{"deferred due after deadline", input{tiers.Tier1, 0, s, 0, deferred}, expired},
		{"RA step after deadline", input{tiers.Tier1, 1, 7 * s, 0, retryable(429, 5*s)}, expired},
		{"RA step at deadline", input{tiers.Tier1, 1, 8 * s, 0, retryable(429, 5*s)}, retry(1, 8*s)},
		{"hop floor after deadline", input{tiers.Tier1, 1, 90 * s, 0, retryable(429, 2*time.Minute)}, expired},
		{"hop floor at deadline", input{tiers.Tier1, 1, 2 * time.Minute, 0, retryable(429, 2*time.Minute)}, hop(2, 60*s, 2*time.Minute)},
		{"hop floor before deadline", input{tiers.Tier1, 1, time.Hour, 0, retryable(429, 2*time.Minute)}, hop(2, 60*s, 2*time.Minute)},
		{"deferred hop floor after deadline", input{tiers.Tier2, 2, 90 * s, 5 * time.Minute, deferred}, expired},

		// No deadline (TTL 0 or none): never expires.
		{"no deadline, last retry", input{tiers.Tier1, 4, none, 0, retryable(503, 0)}, retry(2, 60*s)},
		{"no deadline, RA 24h", input{tiers.Tier3, 3, none, 0, retryable(429, 24*time.Hour)}, hop(1, 60*s, 24*time.Hour)},
		{"no deadline, deferred hop", input{tiers.Tier2, 1, none, 48 * time.Hour, deferred}, hop(2, 60*s, 48*time.Hour)},
		{"no deadline still has max attempts", input{tiers.Tier3, 4, none, 0, retryable(503, 0)}, maxAttempts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Input{Tier: tt.in.tier, Attempt: tt.in.attempt, Result: tt.in.result, Now: now}
			if tt.in.deadline != none {
				in.Deadline = now.Add(tt.in.deadline)
			}
			if tt.in.notBefore != 0 {
				in.NotBefore = now.Add(tt.in.notBefore)
			}
			if got := Decide(&p, in); got != tt.want {
				t.Errorf("Decide(%+v)\n got %+v\nwant %+v", in, got, tt.want)
			}
		})
	}
}

// TestDecideCustomLadder covers a ladder with long steps and a single step.
func TestDecideCustomLadder(t *testing.T) {
	p := tiers.DefaultPolicy()
	p.Tier1 = tiers.Ladder{Steps: []time.Duration{90 * time.Second, 5 * time.Minute, time.Hour}, MaxAttempts: 10, Weight: 1}
	p.Tier3 = tiers.Ladder{Steps: []time.Duration{time.Minute}, MaxAttempts: 2, Weight: 1}
	now := t0
	tests := []struct {
		name      string
		tier      tiers.Tier
		attempt   int
		ra        time.Duration
		wantStep  int
		wantDelay time.Duration
		wantNB    time.Duration
		wantDead  bool
	}{
		{"long first step", tiers.Tier1, 1, 0, 0, 90 * time.Second, 0, false},
		{"RA 2m picks 5m", tiers.Tier1, 1, 2 * time.Minute, 1, 5 * time.Minute, 0, false},
		{"attempt 9 repeats 1h", tiers.Tier1, 9, 0, 2, time.Hour, 0, false},
		{"attempt 10 is max", tiers.Tier1, 10, 0, 0, 0, 0, true},
		{"RA 2h hops through 1h", tiers.Tier1, 2, 2 * time.Hour, 2, time.Hour, 2 * time.Hour, false},
		{"single step", tiers.Tier3, 1, 0, 0, time.Minute, 0, false},
		{"single step hop", tiers.Tier3, 1, 5 * time.Minute, 0, time.Minute, 5 * time.Minute, false},
		{"single step max", tiers.Tier3, 2, 0, 0, 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(&p, Input{Tier: tt.tier, Attempt: tt.attempt, Now: now,
				Result: push.Result{Class: push.Retryable, Status: 503, RetryAfter: tt.ra}})
			want := Decision{Action: ActionRetry, Step: tt.wantStep, Delay: tt.wantDelay, Due: now.Add(tt.wantDelay)}
			if tt.wantNB != 0 {
				want.NotBefore = now.Add(tt.wantNB)
			}
			if tt.wantDead {
				want = Decision{Action: ActionDeadLetter, Outcome: OutcomeDead, Reason: ReasonMaxAttempts}
			}
			if got != want {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
		})
	}
}

// TestDecideInvariants checks, over a grid of inputs, what every retry
// decision must satisfy whatever the case.
func TestDecideInvariants(t *testing.T) {
	p := tiers.DefaultPolicy()
	now := t0
	offsets := []time.Duration{0, -time.Second, time.Millisecond, time.Second, 2 * time.Second, 7 * time.Second,
		8 * time.Second, 30 * time.Second, time.Minute, 61 * time.Second, 10 * time.Minute, 24 * time.Hour}
	classes := []push.Class{push.Delivered, push.Gone, push.Retryable, push.Rejected, push.TooLarge, push.Deferred, push.Blocked, push.VAPIDRejected}
	for _, tier := range tiers.All {
		l := p.Ladder(tier)
		for attempt := 0; attempt <= l.MaxAttempts+1; attempt++ {
			for _, class := range classes {
				for _, ra := range offsets {
					for _, nb := range offsets {
						for _, dl := range offsets {
							in := Input{Tier: tier, Attempt: attempt, Now: now, Result: push.Result{Class: class, RetryAfter: ra}}
							if nb != 0 {
								in.NotBefore = now.Add(nb)
							}
							if dl != 0 {
								in.Deadline = now.Add(dl)
							}
							name := fmt.Sprintf("%v/attempt %d/%v/ra %v/nb %v/deadline %v", tier, attempt, class, ra, nb, dl)
							checkDecision(t, name, l, in, Decide(&p, in))
						}
					}
				}
			}
		}
	}
}

func checkDecision(t *testing.T, name string, l *tiers.Ladder, in Input, d Decision) {
	t.Helper()
	if again := Decide(&tiers.Policy{Tier1: *l, Tier2: *l, Tier3: *l}, in); again != d {
		t.Fatalf("%s: Decide is not a pure function of its input: %+v then %+v", name, d, again)
	}
	switch d.Action {
	case ActionDone, ActionDeadLetter:
		if d.Outcome == "" || d.Reason == "" {
			t.Fatalf("%s: terminal decision %+v lacks outcome or reason", name, d)
		}
		if d.Step != 0 || d.Delay != 0 || !d.Due.IsZero() || !d.NotBefore.IsZero() {
			t.Fatalf("%s: terminal decision %+v carries retry fields", name, d)
		}
		if d.Reason == ReasonMaxAttempts && (in.Result.Class != push.Retryable || in.Attempt < l.MaxAttempts) {
			t.Fatalf("%s: max_attempts with %d of %d attempts", name, in.Attempt, l.MaxAttempts)
		}
	case ActionRetry:
		if in.Result.Class != push.Retryable && in.Result.Class != push.Deferred {
			t.Fatalf("%s: retry of a %v result", name, in.Result.Class)
		}
		if in.Result.Class == push.Retryable && in.Attempt >= l.MaxAttempts {
			t.Fatalf("%s: retry after %d of %d attempts", name, in.Attempt, l.MaxAttempts)
		}
		if d.Outcome != "" || d.Reason != "" {
			t.Fatalf("%s: retry decision %+v has an outcome", name, d)
		}
		if d.Step < 0 || d.Step >= len(l.Steps) || d.Delay != l.Steps[d.Step] || !d.Due.Equal(in.Now.Add(d.Delay)) {
			t.Fatalf("%s: retry decision %+v is not a step of %v", name, d, l.Steps)
		}
		if d.Step < l.StepFor(max(in.Attempt, 1)) {
			t.Fatalf("%s: step %d is below the ladder's own step %d", name, d.Step, l.StepFor(in.Attempt))
		}
		floor := in.NotBefore
		if ra := in.Now.Add(in.Result.RetryAfter); in.Result.RetryAfter > 0 && ra.After(floor) {
			floor = ra
		}
		if floor.After(in.Now) && d.Due.Before(floor) && !d.NotBefore.Equal(floor) {
			t.Fatalf("%s: due %v is before the floor %v, and no NotBefore carries it: %+v", name, d.Due, floor, d)
		}
		if !d.NotBefore.IsZero() && !d.NotBefore.After(d.Due) {
			t.Fatalf("%s: NotBefore %v is not after Due %v", name, d.NotBefore, d.Due)
		}
		if !in.Deadline.IsZero() && (d.Due.After(in.Deadline) || d.NotBefore.After(in.Deadline)) {
			t.Fatalf("%s: retry due %v (not before %v) after the deadline %v", name, d.Due, d.NotBefore, in.Deadline)
		}
	default:
		t.Fatalf("%s: unknown action in %+v", name, d)
	}
}
