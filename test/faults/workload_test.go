package faults_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// kind is one row of the ledger failure mix (pushsim.LedgerMix).
type kind = pushsim.MixKind

// event is one produced event; its payload is its id, so the simulator's
// decrypted payloads count the sends of each event.
type event struct {
	id   string
	kind kind
	tier tiers.Tier
	rec  *kgo.Record
}

// mix makes n events of the ledger mix, tiers in turn, each to its own
// subscription.
func (c *cluster) mix(prefix string, n int) []*event {
	evs := make([]*event, n)
	for i := range n {
		k := pushsim.LedgerMix(i)
		id := fmt.Sprintf("%s-%05d", prefix, i)
		sub := c.sim.Subscribe(k.Script...)
		if k.Malformed {
			sub.Auth = sub.Auth[:16] // 12 bytes
		}
		t := tiers.All[i%len(tiers.All)]
		evs[i] = &event{id: id, kind: k, tier: t, rec: &kgo.Record{
			Topic: names.Tier(t), Key: []byte(sub.ID), Value: testenv.Event(id, sub, id, nil),
		}}
	}
	return evs
}

func records(evs []*event) []*kgo.Record {
	rs := make([]*kgo.Record, len(evs))
	for i, e := range evs {
		rs[i] = e.rec
	}
	return rs
}

// tally is what the ledger and the simulator say about a set of events.
type tally struct {
	events   int
	lost     int // no terminal record, or meant to be delivered and never was
	wrong    int // terminal record other than the mix's
	dupSends int // deliveries (201) beyond the first, per event
	// dupTimedOut counts the dupSends that followed a send which timed
	// out while the push service still took it: the event has a retry
	// record saying push-error=timeout, and at least once sends such a
	// push again, hand-off or not; one duplicate per attempt that timed
	// out. The rest of dupSends are the processors' doing.
	dupTimedOut int
	// dupGone counts the dupTimedOut whose first answer the simulator
	// saw go to a sender that had given up (pushsim.Delivery.ClientGone).
	// It cannot see every one: an answer written as the sender's cancel
	// arrives, most of all from a simulator whose process stalled past
	// the send timeout, reads as one to a sender still there.
	dupGone     int
	dupOutcomes int // terminal records beyond the first, per event
	sends201    int
}

// handOffDups is what a graceful hand-off must keep at zero: duplicate
// deliveries other than after a timed-out send, and duplicate ledger
// records.
func (tl tally) handOffDups() (sends, outcomes int) {
	return tl.dupSends - tl.dupTimedOut, tl.dupOutcomes
}

// timedOutNote says how many duplicates followed a timed-out send, when any
// did.
func (tl tally) timedOutNote() string {
	if tl.dupTimedOut == 0 {
		return ""
	}
	return fmt.Sprintf("; %d of the duplicate deliveries followed a send that timed out while the push service took it (push-error=timeout; %d of them answered to a sender the simulator saw go)", tl.dupTimedOut, tl.dupGone)
}

// deliveries counts the simulator's 201 answers per decrypted payload, and
// in gone those answered to a sender that had given up on the request.
func deliveries(sim *pushsim.Server) (sent, gone map[string]int) {
	sent, gone = make(map[string]int), make(map[string]int)
	for _, d := range sim.Deliveries() {
		if d.Status == 201 && d.Verified {
			sent[string(d.Payload)]++
			if d.ClientGone {
				gone[string(d.Payload)]++
			}
		}
	}
	return sent, gone
}

// timedOut returns, per event of evs, how many of its attempts timed out:
// the distinct push-attempt values of its retry records saying push-error
// "timeout". A deferral carries its attempt's error on without a send, so
// records are not counted.
func (c *cluster) timedOut(evs []*event) (map[string]int, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	attempts := make(map[string]map[string]bool) // event → its timed-out push-attempt values
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The tier topics among the inputs carry no push-error: read with the
	// retry topics rather than listing those again.
	err := c.scan(ctx, names.Inputs(&policy), evs, func(e *event, r *kgo.Record) {
		var timeout bool
		var attempt string
		for _, h := range r.Headers {
			switch h.Key {
			case topology.HeaderError:
				timeout = string(h.Value) == "timeout"
			case topology.HeaderAttempt:
				attempt = string(h.Value)
			}
		}
		if timeout {
			if attempts[e.id] == nil {
				attempts[e.id] = make(map[string]bool)
			}
			attempts[e.id][attempt] = true
		}
	})
	out := make(map[string]int, len(attempts))
	for id, as := range attempts {
		out[id] = len(as)
	}
	return out, err
}

// duplicateTimes returns when the simulator answered 201 to an event it had
// already answered 201, oldest first.
func duplicateTimes(sim *pushsim.Server) []time.Time {
	seen := make(map[string]bool)
	var out []time.Time
	for _, d := range sim.Deliveries() {
		if d.Status != 201 || !d.Verified {
			continue
		}
		if seen[string(d.Payload)] {
			out = append(out, d.At)
		}
		seen[string(d.Payload)] = true
	}
	return out
}

// describeTimes summarises ts relative to ref: "n between +a and +b".
func describeTimes(ts []time.Time, ref time.Time) string {
	if len(ts) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d, from %+.1f s to %+.1f s", len(ts), ts[0].Sub(ref).Seconds(), ts[len(ts)-1].Sub(ref).Seconds())
}

// check compares the ledger and the simulator with what each event of evs
// should have come to, failing t for each event lost or wrongly routed.
func (c *cluster) check(t *testing.T, evs []*event) tally {
	t.Helper()
	sent, gone := deliveries(c.sim)
	var tl tally
	tl.events = len(evs)
	var bad, dup []*event // dup: sent or recorded more than once
	var untold []*event   // of dup, more than their timed-out sends explain
	defer func() {
		switch {
		case len(bad) > 0:
			c.explain(context.Background(), bad)
		case len(untold) > 0:
			t.Logf("the first events sent or recorded more than once, beyond their timed-out sends:")
			c.explain(context.Background(), untold[:min(len(untold), 5)])
		case len(dup) > 0:
			t.Logf("the first events sent or recorded more than once:")
			c.explain(context.Background(), dup[:min(len(dup), 5)])
		}
	}()
	report := func(format string, args ...any) {
		if tl.lost+tl.wrong <= 10 {
			t.Errorf(format, args...)
		}
	}
	var ambiguous []*event // delivered more than once: read their retry records
	for _, e := range evs {
		recs := c.ledger.records(e.id)
		n := sent[e.id]
		tl.sends201 += n
		tl.dupSends += max(n-1, 0)
		if n > 1 {
			ambiguous = append(ambiguous, e)
		}
		switch {
		case len(recs) == 0:
			tl.lost++
			bad = append(bad, e)
			report("%s (%s, %s): no terminal record in %s", e.id, e.kind.Name, e.tier, names.Outcomes())
			continue
		case e.kind.Outcome == topology.OutcomeDelivered && n == 0:
			tl.lost++
			bad = append(bad, e)
			report("%s (%s, %s): ledger says %s but the push service never got it", e.id, e.kind.Name, e.tier, recs[0].Outcome)
			continue
		}
		tl.dupOutcomes += len(recs) - 1
		if n > 1 || len(recs) > 1 {
			dup = append(dup, e)
		}
		for _, r := range recs {
			if topology.Outcome(r.Outcome) != e.kind.Outcome || topology.Reason(r.Reason) != e.kind.Reason {
				tl.wrong++
				bad = append(bad, e)
				report("%s (%s, %s): outcome %s/%s after %d attempts (status %d), want %s/%s",
					e.id, e.kind.Name, e.tier, r.Outcome, r.Reason, r.Attempts, r.Status, e.kind.Outcome, e.kind.Reason)
				break
			}
		}
	}
	timeouts, err := c.timedOut(ambiguous)
	if err != nil {
		t.Errorf("reading the retry records of %d events sent twice: %v", len(ambiguous), err)
	}
	for _, e := range ambiguous {
		told := min(sent[e.id]-1, timeouts[e.id])
		tl.dupTimedOut += told
		tl.dupGone += min(gone[e.id], told)
	}
	for _, e := range dup {
		if sent[e.id]-1 > timeouts[e.id] || len(c.ledger.records(e.id)) > 1 {
			untold = append(untold, e)
		}
	}
	type kindStat struct {
		n, maxAttempts      int
		dups                int // 201 answers beyond the first
		maxLatency, maxSpan time.Duration
	}
	byKind := make(map[string]*kindStat)
	for _, e := range evs {
		recs := c.ledger.records(e.id)
		if len(recs) == 0 {
			continue
		}
		ks := byKind[e.kind.Name]
		if ks == nil {
			ks = new(kindStat)
			byKind[e.kind.Name] = ks
		}
		ks.n++
		ks.dups += max(sent[e.id]-1, 0)
		ks.maxAttempts = max(ks.maxAttempts, recs[0].Attempts)
		ks.maxLatency = max(ks.maxLatency, time.Duration(recs[0].LatencyMS)*time.Millisecond)
		if recs[0].FirstSeen > 0 {
			ks.maxSpan = max(ks.maxSpan, time.Duration(recs[0].At-recs[0].FirstSeen)*time.Millisecond)
		}
	}
	var parts []string
	for _, k := range pushsim.MixKinds {
		if ks := byKind[k.Name]; ks != nil {
			parts = append(parts, fmt.Sprintf("%s %d (%d duplicates, ≤%d attempts, latency_ms ≤%s, at−first_seen ≤%s)",
				k.Name, ks.n, ks.dups, ks.maxAttempts, ks.maxLatency.Round(100*time.Millisecond), ks.maxSpan.Round(100*time.Millisecond)))
		}
	}
	t.Logf("ledger by kind: %s", strings.Join(parts, "; "))
	if bad := c.ledger.malformed(); len(bad) > 0 {
		t.Errorf("%d malformed outcome records, first %s", len(bad), bad[0])
	}
	if tl.lost+tl.wrong > 10 {
		t.Errorf("... %d lost and %d wrongly routed in all", tl.lost, tl.wrong)
	}
	return tl
}
