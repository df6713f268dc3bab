package members

import "time"

// roster is what one processor knows of the others' beats: who is in its
// group, and when it last heard of them, on its own clock.
//
// Silence is measured in this processor's own beats, read back from the
// same partition as everyone's: clock is the time of its newest beat read
// back, and a member last heard before that beat, After earlier or more,
// has stopped beating while this one's beats went through. When the topic
// stalls (a broker restarting, a leader moving) nobody's beats arrive,
// this one's neither, so the clock stops with them; and when they come
// back (this processor's beats two periods apart or more), everyone's
// count starts again, for the members whose producers take longer than
// this one's to find the broker again.
type roster struct {
	group, from  string
	every, after time.Duration
	clock        time.Time // this processor's newest beat read back; zero until one is
	peers        map[string]peer
}

// peer is one member of the group as its beats tell it.
type peer struct {
	from, protocol string
	heard          time.Time // the clock when its newest beat was read
}

func newRoster(group, from string, every, after time.Duration) *roster {
	return &roster{group: group, from: from, every: every, after: after, peers: make(map[string]peer)}
}

// read takes one beat, in the partition's order.
func (r *roster) read(b beat) {
	switch {
	case b.Group != r.group:
	case b.From == r.from:
		at := time.UnixMilli(b.At)
		if !r.clock.IsZero() && at.Sub(r.clock) > 2*r.every {
			for id, p := range r.peers { // a stall: everyone's count starts again
				p.heard = at
				r.peers[id] = p
			}
		}
		r.clock = at
	case b.Member == "", b.Static:
	case b.Left:
		delete(r.peers, b.Member)
	case !r.clock.IsZero(): // a beat read before this processor's first is judged from the next
		r.peers[b.Member] = peer{from: b.From, protocol: b.Protocol, heard: r.clock}
	}
}

// silent returns the members not heard of for After of this processor's
// beats and forgets them: each is removed from the group once.
func (r *roster) silent() map[string]peer {
	var out map[string]peer
	for id, p := range r.peers {
		if r.clock.Sub(p.heard) >= r.after {
			if out == nil {
				out = make(map[string]peer)
			}
			out[id] = p
			delete(r.peers, id)
		}
	}
	return out
}
