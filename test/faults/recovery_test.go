package faults_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

// Scenario 9: crash recovery, as in production: four processors in one
// group as the Helm chart runs them (dynamic members), a push service
// answering in 100 ms, 6,000 events of the ledger mix over the three
// tiers, and tier-1 events produced to every tier-1 partition throughout;
// once a quarter is answered, three processors get SIGKILL 4 s apart, each
// started again at once. Run once per group protocol.
//
// Must hold: nothing lost; duplicate deliveries at most the sends the killed
// processes had in the air; and every tier partition with records waiting
// at a kill sent from again (the simulator's first request for an event of
// it) within 10 s of the kill. The group's session alone does not make it
// on the classic protocol: a rebalance waits for a killed member's session,
// and a member killed while it waited is given partitions again and kept
// for a second session; the survivors remove a member whose beats stopped
// (internal/members).
//
// A send is in the air at a kill until its result is acknowledged by the
// broker: the simulator's deliveries from the killed process (by its VAPID
// subject) whose event's outcome the suite had not read in the ledger when
// the kill came. The simulator's requests in the push service's latency
// window before the kill are reported beside them: on a machine this
// loaded, a result is acknowledged a second after the answer at times, and
// those sends go again as surely as the unanswered ones.
const (
	recoveryEvents  = 6000
	recoveryLatency = 100 * time.Millisecond
	recoveryResume  = 10 * time.Second
)

func scenarioCrashRecovery(protocol string) func(t *testing.T) row {
	return func(t *testing.T) row {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		simCfg := pushsim.DefaultConfig()
		simCfg.Latency, simCfg.LatencyJitter = recoveryLatency, 0
		c := newCluster(ctx, t, clusterOpts{procs: 4, sim: &simCfg, dynamic: true, subjects: true,
			procArgs: []string{"--group-protocol", protocol}})
		if err := c.waitStable(ctx, 4); err != nil {
			t.Fatal(err)
		}
		evs := c.mix("recover", recoveryEvents)
		c.produce(ctx, records(evs))
		tr := c.startTrickle(t, 10)
		if err := c.sim.WaitFor(ctx, func(s pushsim.Stats) bool { return s.Requests >= recoveryEvents/4 }); err != nil {
			t.Fatal(err)
		}

		type kill struct {
			at   time.Time
			name string
		}
		var ks []kill
		for i := range 3 {
			if i > 0 {
				if err := pause(ctx, 4*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			p := c.current()[i]
			sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := p.stop(sctx, syscall.SIGKILL)
			scancel()
			if err != nil {
				t.Fatal(err)
			}
			ks = append(ks, kill{at: time.Now(), name: p.name})
			t.Logf("SIGKILL %s after %d push requests", p.name, c.sim.Stats().Requests)
			c.restartProc(i)
		}
		if err := pause(ctx, 5*time.Second); err != nil { // trickle past the last kill
			t.Fatal(err)
		}
		trickled := tr.stop()
		all := append(slices.Clone(evs), trickled...)
		if err := c.ledger.waitAll(ctx, all); err != nil {
			t.Errorf("%v (%d missing)", err, c.ledger.missing(all))
		}
		c.checkRunning()
		tl := c.check(t, all)

		// The sends in the air at each kill, and how long each tier
		// partition with records waiting went without a request.
		ds := c.sim.Deliveries()
		slices.SortFunc(ds, func(a, b pushsim.Delivery) int { return a.At.Compare(b.At) })
		partOf := make(map[string]string) // event id → tier topic/partition
		produced := make(map[string]time.Time)
		for _, e := range all {
			partOf[e.id] = fmt.Sprintf("%s/%d", e.rec.Topic, e.rec.Partition)
			produced[e.id] = e.rec.Timestamp
		}
		firstReq := make(map[string]time.Time) // event id → first request
		for _, d := range ds {
			if id := string(d.Payload); id != "" {
				if _, ok := firstReq[id]; !ok {
					firstReq[id] = d.At
				}
			}
		}
		bound, windowed := 0, 0
		var worst time.Duration
		var perKill []string
		for _, k := range ks {
			inAir, inWindow := 0, 0
			counted := make(map[string]bool)
			for _, d := range ds {
				if d.Subject != subjectOf(k.name) {
					continue
				}
				if d.At.After(k.at.Add(-recoveryLatency)) {
					inWindow++
				}
				id := string(d.Payload)
				if at := c.ledger.first(id); d.Status == 201 && !counted[id] && (at.IsZero() || !at.Before(k.at)) {
					counted[id] = true
					inAir++
				}
			}
			bound += inAir
			windowed += inWindow
			// A partition waits at the kill when an event of it was
			// produced before and first requested after.
			waiting := make(map[string]bool)
			for id, at := range firstReq {
				if produced[id].Before(k.at) && at.After(k.at) {
					waiting[partOf[id]] = true
				}
			}
			resumed := make(map[string]time.Time)
			for _, d := range ds {
				if p := partOf[string(d.Payload)]; waiting[p] && d.At.After(k.at) {
					if _, ok := resumed[p]; !ok {
						resumed[p] = d.At
					}
				}
			}
			var slowest time.Duration
			within := 0 // sent from again within recoveryResume of this kill
			for p := range waiting {
				at, ok := resumed[p]
				if !ok {
					t.Errorf("%s: %s never sent from again", k.name, p)
					continue
				}
				slowest = max(slowest, at.Sub(k.at))
				if at.Sub(k.at) <= recoveryResume {
					within++
				}
			}
			worst = max(worst, slowest)
			if slowest > recoveryResume {
				t.Errorf("%s: a partition waited %s after the kill, want at most %s", k.name, secs(slowest), secs(recoveryResume))
			}
			perKill = append(perKill, fmt.Sprintf("%s: %d deliveries in the air (%d requests in the %s before the kill), %d partitions waiting, %d of them sent from again within %s, all within %s",
				k.name, inAir, inWindow, recoveryLatency, len(waiting), within, recoveryResume, secs(slowest)))
		}
		t.Logf("per kill: %s", strings.Join(perKill, "; "))
		if tl.dupSends > 0 {
			t.Logf("duplicates, by the first sender and the second, against the first kill: %s", explainDuplicates(ds, ks[0].at))
		}
		if tl.dupSends > bound {
			t.Errorf("%d duplicate deliveries, want at most the %d deliveries in the air at the kills", tl.dupSends, bound)
		}
		// Tier-1 notifications produced while the processors died: how
		// long they waited for their first send.
		var waits []time.Duration
		for _, e := range trickled {
			if at, ok := firstReq[e.id]; ok && !e.rec.Timestamp.Before(ks[0].at) && !e.rec.Timestamp.After(ks[len(ks)-1].at.Add(recoveryResume)) {
				waits = append(waits, at.Sub(e.rec.Timestamp))
			}
		}
		slices.Sort(waits)
		tier1 := "none"
		if len(waits) > 0 {
			tier1 = fmt.Sprintf("p50 %s, p99 %s, max %s over %d", secs(waits[len(waits)/2]), secs(waits[len(waits)*99/100]), secs(waits[len(waits)-1]), len(waits))
		}
		t.Logf("%s: %d events + %d tier-1 during the kills: lost %d, duplicate deliveries %d (bound %d: the deliveries in the air; %d requests in the latency window), duplicate ledger records %d; slowest partition back %s; tier-1 first send after production during the kills: %s",
			protocol, len(evs), len(trickled), tl.lost, tl.dupSends, bound, windowed, tl.dupOutcomes, secs(worst), tier1)
		return row{
			scenario: "9. processor SIGKILL ×3 in 8 s, " + protocol, events: len(all), lost: tl.lost, dups: tl.dupSends,
			recover: secs(worst) + " (slowest partition)",
			notes: fmt.Sprintf("4 dynamic members, --group-protocol %s, 100 ms push service; duplicate deliveries %d %s %d deliveries in the air at the kills (%d requests in the latency window); duplicate ledger records %d; tier-1 produced during the kills, first send after %s",
				protocol, tl.dupSends, cmpSign(tl.dupSends, bound), bound, windowed, tl.dupOutcomes, tier1),
		}
	}
}

// explainDuplicates sums up the deliveries (201) beyond an event's first:
// who sent the first and the second, and when, relative to ref.
func explainDuplicates(ds []pushsim.Delivery, ref time.Time) string {
	first := make(map[string]pushsim.Delivery)
	pairs := make(map[string]int)
	for _, d := range ds {
		if d.Status != 201 || len(d.Payload) == 0 {
			continue
		}
		id := string(d.Payload)
		f, ok := first[id]
		if !ok {
			first[id] = d
			continue
		}
		k := fmt.Sprintf("%s at %+.1fs then %s at %+.0fs", strings.TrimSuffix(strings.TrimPrefix(f.Subject, "mailto:"), "@tierpush.test"), f.At.Sub(ref).Seconds(),
			strings.TrimSuffix(strings.TrimPrefix(d.Subject, "mailto:"), "@tierpush.test"), d.At.Sub(ref).Seconds())
		pairs[k]++
	}
	keys := make([]string, 0, len(pairs))
	for k := range pairs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return pairs[b] - pairs[a] })
	var out []string
	for _, k := range keys[:min(len(keys), 12)] {
		out = append(out, fmt.Sprintf("%d× %s", pairs[k], k))
	}
	return strings.Join(out, "; ")
}

// trickle produces tier-1 events to every tier-1 partition in turn, perSec
// per partition, until stop.
type trickle struct {
	mu     sync.Mutex
	evs    []*event
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *cluster) startTrickle(t *testing.T, perSec int) *trickle {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokerAddr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &trickle{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		defer cl.Close()
		tick := time.NewTicker(time.Second / time.Duration(perSec*partitions))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				cl.Flush(context.Background())
				return
			case <-tick.C:
			}
			id := fmt.Sprintf("trickle-%05d", i)
			sub := c.sim.Subscribe()
			e := &event{id: id, kind: pushsim.MixOK, tier: tiers.Tier1, rec: &kgo.Record{
				Topic: names.Tier(tiers.Tier1), Partition: int32(i % partitions), Key: []byte(sub.ID),
				Value: testenv.Event(id, sub, id, nil), Timestamp: time.Now(),
			}}
			tr.mu.Lock()
			tr.evs = append(tr.evs, e)
			tr.mu.Unlock()
			cl.Produce(context.Background(), e.rec, func(r *kgo.Record, err error) {
				if err != nil && ctx.Err() == nil {
					t.Errorf("produce %s: %v", id, err)
				}
			})
		}
	}()
	t.Cleanup(func() { tr.stop() })
	return tr
}

// stop stops producing and returns the events produced. It is safe twice.
func (tr *trickle) stop() []*event {
	tr.cancel()
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.evs
}
