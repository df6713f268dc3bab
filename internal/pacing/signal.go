package pacing

import "time"

// Signal is what one processor tells the others that send to the same
// origin: a change of its pacing (a cut, a pause, the breaker) or, while
// the origin is paced, its send rate now and then. Processors sharing an
// origin share its limit; what one learns the others apply (Apply), so
// that together they stay under it and a pause seen by one holds for all.
type Signal struct {
	Origin string
	// From names the processor that sent it; Apply ignores its own.
	From string
	At   time.Time
	// Kind: "rate" (a periodic report), "cut", "pause", "open", "closed".
	Kind string
	// Rate is the sender's send rate after the change (sends/s);
	// Accepted what the origin accepted from it over the last second.
	Rate     float64
	Accepted float64
	// Until ends a pause or an open breaker.
	Until time.Time
	// Storms is the sender's count of cuts and pauses in a row whose 429s
	// did not follow the rate; the count is the origin's, shared like its
	// pauses, and the breaker opens when it reaches four.
	Storms int
	// Answers and Throttled count the sender's answers from the origin,
	// and the 429s among them, over the rolling window since its pacing
	// settled: the breaker opens when, together, more than HaltRate of
	// them are 429s.
	Answers, Throttled int
	// Judged and JudgedThrottled are the answers a cut was judged on, and
	// the 429s among them: a peer pools them with its own (Apply).
	Judged, JudgedThrottled int
}

// Signal kinds.
const (
	SignalRate   = "rate"
	SignalCut    = "cut"
	SignalPause  = "pause"
	SignalOpen   = "open"
	SignalClosed = "closed"
)

// peerFresh is how long a peer's last report counts: peers report at least
// every peerEvery while they send to a paced origin.
const (
	peerEvery = time.Second
	peerFresh = 5 * time.Second
)

// Apply takes a signal from another processor that sends to s.Origin:
//   - a cut: this processor cuts too, to what the origin accepted from it
//     (unless it cut within a round trip): the origin's limit is shared, and
//     a cut by one alone would leave the others over their part of it; the
//     storms it counted count here too. A cut judged on few answers (Judged)
//     is pooled with this processor's own first: where together they show
//     no limit, a rate probing past the ceiling only steps back under it.
//     Either way, the 429s of the last three seconds here are not learnt
//     as background: they may be the shared limit's, overrun by the peer;
//   - a pause or an open breaker: the same holds here until s.Until;
//   - a rate: remembered as the peer's part of the origin's rate; a lane
//     still in slow start takes an equal part at once instead of probing
//     into a limit the others have already found.
//
// Signals older than peerFresh are ignored, except that a pause or breaker
// still in force applies.
func (p *Pacer) Apply(s Signal) {
	if !p.cfg.Enabled || s.Origin == "" {
		return
	}
	now := p.now()
	if now.Sub(s.At) > peerFresh && !s.Until.After(now) {
		return
	}
	l := p.lane(s.Origin, now)
	if l == nil {
		return
	}
	l.apply(p, s, now)
}
