package pushsim

import "github.com/tierpush/tierpush/topology"

// MixKind is one row of the ledger failure mix: how the simulator answers
// an event's subscription and the terminal record the event must end with.
type MixKind struct {
	Name      string
	Script    []Response // for Subscribe; nil: delivered at once
	Malformed bool       // the event carries a 12-byte auth secret
	Outcome   topology.Outcome
	Reason    topology.Reason
}

// The kinds of the ledger failure mix.
var (
	MixOK        = MixKind{Name: "ok", Outcome: topology.OutcomeDelivered, Reason: topology.ReasonDelivered}
	Mix503Once   = MixKind{Name: "503-once", Script: []Response{{Status: 503}}, Outcome: topology.OutcomeDelivered, Reason: topology.ReasonDelivered}
	Mix429       = MixKind{Name: "429-retry-after", Script: []Response{{Status: 429, RetryAfter: "5"}}, Outcome: topology.OutcomeDelivered, Reason: topology.ReasonDelivered}
	Mix410       = MixKind{Name: "410", Script: []Response{{Status: 410, Repeat: true}}, Outcome: topology.OutcomeGone, Reason: topology.ReasonGone}
	MixAlways500 = MixKind{Name: "always-500", Script: []Response{{Status: 500, Repeat: true}}, Outcome: topology.OutcomeDead, Reason: topology.ReasonMaxAttempts}
	MixMalformed = MixKind{Name: "malformed", Malformed: true, Outcome: topology.OutcomeDead, Reason: topology.ReasonInvalidEvent}
)

// MixKinds lists the kinds in the order reports show them.
var MixKinds = []MixKind{MixOK, Mix503Once, Mix429, Mix410, MixAlways500, MixMalformed}

// LedgerMix is the failure mix the ledger test, the fault suite and the
// benchmark run, by event number: 10% answer 503 once, 5% 429 with
// Retry-After 5 once, 3% 410, 2% 500 for ever, 1% malformed, 79% are
// delivered at once. Each kind is spread over its hundred (37 is prime to
// 100): failures of one kind in a row would look like an outage or a
// sender-wide limit.
func LedgerMix(i int) MixKind {
	switch r := i * 37 % 100; {
	case r < 10:
		return Mix503Once
	case r < 15:
		return Mix429
	case r < 18:
		return Mix410
	case r < 20:
		return MixAlways500
	case r < 21:
		return MixMalformed
	}
	return MixOK
}
