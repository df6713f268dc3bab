package pacing

import "time"

// Signal is what one processor tells the others that send to the same
// origin, through the pacing topic: now and then while it sends, what it
// sends and what the origin accepts of it; at once, a cut (the rate law's
// W and t0, which every processor then computes E from) or a halt; and
// that it leaves. Together the processors hold one estimate of the origin
// and each sends its part of it.
type Signal struct {
	Origin string
	// From names the processor that sent it; Apply ignores its own.
	From string
	At   time.Time
	Kind string
	// Rate is the sender's sends per second over the last second,
	// Accepted what the origin accepted of them; Limited that it had more
	// to send than it sent (requests waited).
	Rate     float64
	Accepted float64
	Limited  bool
	// Ceiling and Epoch are the group's last cut (W and t0); zero while
	// the sender knows none.
	Ceiling float64
	Epoch   time.Time
	// Until ends a halt or an open breaker.
	Until time.Time
}

// Signal kinds.
const (
	SignalRate  = "rate"
	SignalCut   = "cut"
	SignalQueue = "queue" // the origin queues: slow start ends
	SignalLeave = "leave"
)

// Peers report every peerEvery while they send; one not heard of for
// peerFresh has left, and the others take up its part.
const (
	peerEvery = 250 * time.Millisecond
	peerFresh = 750 * time.Millisecond
)

// Apply takes a signal from another processor that sends to s.Origin: the
// newest cut any processor made becomes this one's, a halt holds here
// too, and the sender's rates count in this processor's part. A signal of
// a cut is taken however old (a processor that starts reads the topic's
// last minute: it starts at the group's estimate instead of ramping); its
// rates only while fresh.
func (p *Pacer) Apply(s Signal) {
	if !p.cfg.Enabled || s.Origin == "" {
		return
	}
	now := p.now()
	if l := p.lane(s.Origin, now); l != nil {
		p.emit(l, l.apply(s, now))
	}
}

type peer struct {
	at             time.Time
	sent, accepted float64
	limited        bool
}

type peers map[string]peer

// part is this processor's part of e: peers with nothing waiting keep what
// they send and a tenth more, and the others, this one among them, split
// the rest, an equal part at least. n counts the processors.
func (ps peers) part(now time.Time, e float64) (part float64, n int) {
	n, held, free := 1, 1, 0.0
	for from, p := range ps {
		switch {
		case now.Sub(p.at) > peerFresh:
			delete(ps, from)
		case p.limited:
			n, held = n+1, held+1
		default:
			n, free = n+1, free+1.1*p.sent
		}
	}
	return max(e/float64(n), (e-free)/float64(held)), n
}

// rates are the fresh peers' sends and acceptances per second.
func (ps peers) rates(now time.Time) (sent, accepted float64) {
	for _, p := range ps {
		if now.Sub(p.at) <= peerFresh {
			sent, accepted = sent+p.sent, accepted+p.accepted
		}
	}
	return sent, accepted
}
