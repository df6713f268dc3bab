package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Scenario 8: a push service that takes a request and answers it only
// after the sender's --send-timeout. The processor cannot know the push was
// taken: at least once, it sends it again from the retry ladder, its retry
// record saying "timeout". The push is then delivered twice, once to a
// sender that had given up, and nothing else is: this is the one duplicate
// a graceful hand-off may show (tally.dupTimedOut), and here it must be
// told apart exactly, by the retry records and by the simulator alike.
func scenarioTimedOutSend(t *testing.T) row {
	const n, timeout, late = 20, time.Second, 3 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := newCluster(ctx, t, clusterOpts{procs: 1, procArgs: []string{"--send-timeout", timeout.String()}})
	slow := pushsim.MixKind{Name: "answered-late-once", Script: []pushsim.Response{{Latency: late}},
		Outcome: topology.OutcomeDelivered, Reason: topology.ReasonDelivered}
	var evs []*event
	for i := range 2 * n {
		k := pushsim.MixOK
		if i%2 == 0 {
			k = slow
		}
		id := fmt.Sprintf("late-%03d", i)
		sub := c.sim.Subscribe(k.Script...)
		evs = append(evs, &event{id: id, kind: k, tier: tiers.Tier1, rec: &kgo.Record{
			Topic: names.Tier(tiers.Tier1), Key: []byte(sub.ID), Value: testenv.Event(id, sub, id, nil),
		}})
	}
	c.produce(ctx, records(evs))
	if err := c.ledger.waitAll(ctx, evs); err != nil {
		t.Errorf("%v (%d missing)", err, c.ledger.missing(evs))
	}
	c.checkRunning()
	tl := c.check(t, evs)
	sends, outcomes := tl.handOffDups()
	// Alone, the simulator sees every late answer go to a sender gone: the
	// two sides agree on each of the n.
	if tl.dupSends != n || tl.dupTimedOut != n || tl.dupGone != n || sends != 0 || outcomes != 0 {
		t.Errorf("%d events answered %s after a %s send timeout: %d duplicate deliveries, %d of them told as after a timed-out send (%d answered to a sender gone), %d duplicate ledger records; want %d, %d (%d) and 0",
			n, late, timeout, tl.dupSends, tl.dupTimedOut, tl.dupGone, outcomes, n, n, n)
	}
	return row{
		scenario: "8. send timeout (answered after the sender gave up)", events: len(evs), lost: tl.lost, dups: tl.dupSends,
		recover: "—",
		notes: fmt.Sprintf("%d of %d events answered %s after a --send-timeout of %s: sent again from the retry ladder (push-error=timeout); %d duplicate deliveries, all told as after a timed-out send; duplicate ledger records %d",
			n, 2*n, late, timeout, tl.dupSends, tl.dupOutcomes),
	}
}
