package members

import (
	"slices"
	"testing"
	"time"
)

// feed gives r this processor's beats from..to every 500 ms and the
// peers' beats at their times, in time order, and returns the members r
// finds silent after each of its own beats, as Watch asks after each fetch.
func feed(r *roster, from, to time.Duration, peers map[time.Duration][]beat) []string {
	at := func(d time.Duration) int64 { return time.Unix(1e6, 0).Add(d).UnixMilli() }
	var ts []time.Duration
	for d := from; d <= to; d += 500 * time.Millisecond {
		ts = append(ts, d)
	}
	for d := range peers {
		ts = append(ts, d)
	}
	slices.Sort(ts)
	var silent []string
	for _, d := range slices.Compact(ts) {
		for _, b := range peers[d] {
			b.At = at(d)
			r.read(b)
		}
		if d >= from && d <= to && (d-from)%(500*time.Millisecond) == 0 {
			r.read(beat{From: "me", Group: "g", Member: "m0", Protocol: Classic, At: at(d)})
			for id := range r.silent() {
				silent = append(silent, id)
			}
		}
	}
	slices.Sort(silent)
	return silent
}

func TestRosterSilence(t *testing.T) {
	alive := func(id string) beat { return beat{From: "p-" + id, Group: "g", Member: id, Protocol: Classic} }
	peers := make(map[time.Duration][]beat)
	for d := time.Duration(0); d <= 10*time.Second; d += 500 * time.Millisecond {
		peers[d+100*time.Millisecond] = append(peers[d+100*time.Millisecond], alive("a"))
		if d < 4*time.Second {
			peers[d+200*time.Millisecond] = append(peers[d+200*time.Millisecond], alive("b")) // killed at 4 s
		}
	}
	r := newRoster("g", "me", 500*time.Millisecond, 3*time.Second)
	if got := feed(r, 0, 6*time.Second, peers); len(got) != 0 {
		t.Fatalf("by 6 s: silent %v, want none (b's last beat at 3.7 s, heard at this processor's beat of 3.5 s)", got)
	}
	if got := feed(r, 6500*time.Millisecond, 10*time.Second, peers); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("by 10 s: silent %v, want [b] once", got)
	}
}

// A stalled topic (a broker restarting) stops everyone's beats, this
// processor's too: nobody is silent for it, however long it lasts.
func TestRosterStall(t *testing.T) {
	a := beat{From: "p-a", Group: "g", Member: "a", Protocol: Classic}
	// 30 s with nothing read after 1 s; then this processor's beats come
	// back at 31 s, a's only at 33.5 s (its producer slower to reconnect),
	// and on.
	peers := map[time.Duration][]beat{900 * time.Millisecond: {a}}
	for d := 33500 * time.Millisecond; d <= 40*time.Second; d += 500 * time.Millisecond {
		peers[d+100*time.Millisecond] = []beat{a}
	}
	r := newRoster("g", "me", 500*time.Millisecond, 3*time.Second)
	feed(r, 0, time.Second, peers)
	if got := feed(r, 31*time.Second, 40*time.Second, peers); len(got) != 0 {
		t.Fatalf("after a stall: silent %v, want none", got)
	}
	// Killed during the stall, a is silent 3 s after the beats came back.
	r = newRoster("g", "me", 500*time.Millisecond, 3*time.Second)
	feed(r, 0, time.Second, peers)
	if got := feed(r, 31*time.Second, 35*time.Second, nil); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a killed in the stall: silent %v by 35 s, want [a]", got)
	}
}

func TestRosterIgnores(t *testing.T) {
	r := newRoster("g", "me", 500*time.Millisecond, time.Second)
	bs := map[time.Duration][]beat{
		100 * time.Millisecond: {
			{From: "p-x", Group: "other", Member: "x", Protocol: Classic}, // another group
			{From: "p-y", Group: "g", Protocol: Classic},                  // not joined yet
			{From: "p-s", Group: "g", Member: "s", Static: true},          // holds its place
			{From: "p-z", Group: "g", Member: "z", Protocol: Classic},
		},
		200 * time.Millisecond: {{From: "p-z", Group: "g", Member: "z", Protocol: Classic, Left: true}}, // stopped cleanly
	}
	if got := feed(r, 0, 5*time.Second, bs); len(got) != 0 {
		t.Fatalf("silent %v, want none", got)
	}
	// A beat read before this processor's own first is judged from the
	// next one.
	r = newRoster("g", "me", 500*time.Millisecond, time.Second)
	r.read(beat{From: "p-a", Group: "g", Member: "a", Protocol: Classic})
	if got := feed(r, 0, 5*time.Second, nil); len(got) != 0 {
		t.Fatalf("a beat from before the clock started: silent %v, want none", got)
	}
}
