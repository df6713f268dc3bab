package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

const (
	fcmEndpoint = "https://fcm.googleapis.com/fcm/send/"
	mozEndpoint = "https://updates.push.services.mozilla.com/wpush/v2/"
)

// fixture is a dead-letter topic with one record of each kind the filters
// tell apart.
var fixture = []dead{
	{id: "fcm-503", endpoint: fcmEndpoint + "a", source: "push.tier1.retry-60s/0/1", reason: topology.ReasonMaxAttempts, status: 503, attempt: 5, at: t0},
	{id: "fcm-429", endpoint: fcmEndpoint + "b", source: "push.tier2.retry-8s/1/2", reason: topology.ReasonMaxAttempts, status: 429, attempt: 5, at: t0.Add(time.Hour)},
	{id: "moz-400", endpoint: mozEndpoint + "c", source: "push.tier1/2/3", reason: topology.ReasonRejected, status: 400, attempt: 1, at: t0.Add(2 * time.Hour)},
	{id: "moz-ttl", endpoint: mozEndpoint + "d", source: "push.tier3.retry-8s/3/4", reason: topology.ReasonTTLExpired, status: 503, attempt: 2, at: t0.Add(3 * time.Hour)},
	{id: "fcm-413", endpoint: fcmEndpoint + "e", source: "push.tier3/0/5", reason: topology.ReasonPayloadTooLarge, status: 413, attempt: 1, at: t0.Add(4 * time.Hour)},
	{id: "forged", endpoint: fcmEndpoint + "f", source: "push.tier1.retry-2s/1/6", reason: topology.ReasonBadSignature, at: t0.Add(5 * time.Hour)},
	{id: "looped", endpoint: fcmEndpoint + "g", source: "push.tier2/2/7", reason: topology.ReasonMaxAttempts, status: 503, attempt: 5, redrives: 3, at: t0.Add(6 * time.Hour)},
}

// kfakeClient returns a plain client of env's broker.
func kfakeClient(t *testing.T, env *testenv.Env) *kgo.Client {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(env.Brokers...), kgo.FetchMaxWait(250 * time.Millisecond)}
	if env.VN != nil {
		opts = append(opts, kgo.Dialer(env.VN.DialContext))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// deadLetter produces ds to the DLQ, keyed so they spread over partitions.
func deadLetter(ctx context.Context, t *testing.T, env *testenv.Env, ds ...dead) {
	t.Helper()
	rs := make([]*kgo.Record, len(ds))
	for i, d := range ds {
		rs[i] = d.record()
	}
	env.Produce(ctx, rs...)
}

func listIDs(ctx context.Context, t *testing.T, cl *kgo.Client, f Filter) []string {
	t.Helper()
	var ids []string
	if err := List(ctx, cl, names, f, func(r *Record) error {
		ids = append(ids, r.EventID)
		return nil
	}); err != nil {
		t.Fatalf("List: %v", err)
	}
	sort.Strings(ids)
	return ids
}

func sorted(ids ...string) []string {
	ids = slices.Clone(ids)
	sort.Strings(ids)
	return ids
}

func TestListEmptyTopicReturns(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if got := listIDs(ctx, t, kfakeClient(t, env), Filter{}); len(got) != 0 {
		t.Errorf("empty DLQ listed %v", got)
	}
}

func TestListFilters(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadLetter(ctx, t, env, fixture...)
	cl := kfakeClient(t, env)
	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"everything", Filter{}, []string{"fcm-503", "fcm-429", "moz-400", "moz-ttl", "fcm-413", "forged", "looped"}},
		{"reason", Filter{Reasons: []topology.Reason{topology.ReasonMaxAttempts}}, []string{"fcm-503", "fcm-429", "looped"}},
		{"two reasons", Filter{Reasons: []topology.Reason{topology.ReasonRejected, topology.ReasonTTLExpired}}, []string{"moz-400", "moz-ttl"}},
		{"status", Filter{Statuses: []int{503}}, []string{"fcm-503", "moz-ttl", "looped"}},
		{"no status", Filter{Statuses: []int{0}}, []string{"forged"}},
		{"tier, retry topics included", Filter{Tiers: []tiers.Tier{tiers.Tier1}}, []string{"fcm-503", "moz-400", "forged"}},
		{"origin", Filter{Origins: []string{"https://updates.push.services.mozilla.com"}}, []string{"moz-400", "moz-ttl"}},
		{"origin bare host", Filter{Origins: []string{"fcm.googleapis.com"}}, []string{"fcm-503", "fcm-429", "fcm-413", "forged", "looped"}},
		{"since", Filter{Since: t0.Add(5 * time.Hour)}, []string{"forged", "looped"}},
		{"until", Filter{Until: t0.Add(time.Hour)}, []string{"fcm-503"}},
		{"time range", Filter{Since: t0.Add(time.Hour), Until: t0.Add(3 * time.Hour)}, []string{"fcm-429", "moz-400"}},
		{"combined", Filter{Reasons: []topology.Reason{topology.ReasonMaxAttempts}, Statuses: []int{503}, Tiers: []tiers.Tier{tiers.Tier1, tiers.Tier3}, Origins: []string{"fcm.googleapis.com"}}, []string{"fcm-503"}},
		{"combined with time", Filter{Statuses: []int{503}, Since: t0.Add(time.Minute)}, []string{"moz-ttl", "looped"}},
		{"nothing", Filter{Tiers: []tiers.Tier{tiers.Tier3}, Reasons: []topology.Reason{topology.ReasonRejected}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := listIDs(ctx, t, cl, tt.f)
			if want := sorted(tt.want...); !slices.Equal(got, want) {
				t.Errorf("listed %v, want %v", got, want)
			}
		})
	}
}

// TestListStopsAtTheStartingHighWaterMark: a record dead-lettered while
// List runs is left for the next List, and List returns.
func TestListStopsAtTheStartingHighWaterMark(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true, Partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadLetter(ctx, t, env, fixture[:3]...)
	cl := kfakeClient(t, env)
	var got []string
	err := List(ctx, cl, names, Filter{}, func(r *Record) error {
		if len(got) == 0 {
			deadLetter(ctx, t, env, dead{id: "late", endpoint: fcmEndpoint + "z", source: "push.tier1/0/9", reason: topology.ReasonRejected, at: t0})
		}
		got = append(got, r.EventID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"fcm-503", "fcm-429", "moz-400"}; !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	if got := listIDs(ctx, t, cl, Filter{}); !slices.Contains(got, "late") {
		t.Errorf("the next List missed the late record: %v", got)
	}
}

// TestReadEndsAtATransactionMarker: a DLQ written in a transaction ends with
// a commit marker, which takes the last offset but is no record. List and
// Redrive still finish.
func TestReadEndsAtATransactionMarker(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true, Partitions: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := kgo.NewClient(kgo.SeedBrokers(env.Brokers...), kgo.TransactionalID("dlq-writer"))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	if err := tx.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, d := range fixture[:2] {
		if err := tx.ProduceSync(ctx, d.record()).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	cl := kfakeClient(t, env)
	if got, want := listIDs(ctx, t, cl, Filter{}), sorted("fcm-503", "fcm-429"); !slices.Equal(got, want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	rep, err := Redrive(ctx, cl, names, Filter{}, Options{})
	if err != nil || rep.Redriven != 2 {
		t.Errorf("Redrive: %+v, %v; want 2 redriven", rep, err)
	}
}

// tierRecords reads every record of the three tier topics.
func tierRecords(ctx context.Context, t *testing.T, env *testenv.Env) []*kgo.Record {
	t.Helper()
	topics := make([]string, len(tiers.All))
	for i, tr := range tiers.All {
		topics[i] = names.Tier(tr)
	}
	// A new client: env.Client's metadata may predate the topics.
	cl := kfakeClient(t, env)
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topics...)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	ends.Each(func(o kadm.ListedOffset) { n += o.Offset })
	cl.AddConsumeTopics(topics...)
	var all []*kgo.Record
	for int64(len(all)) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read tier topics: %d of %d records: %v", len(all), n, err)
		}
		all = append(all, fs.Records()...)
	}
	return all
}

func ids(rs []*kgo.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, Inspect(r, names).EventID)
	}
	sort.Strings(out)
	return out
}

func committed(ctx context.Context, t *testing.T, env *testenv.Env, group string) map[int32]int64 {
	t.Helper()
	os, err := kadm.NewClient(kfakeClient(t, env)).FetchOffsets(ctx, group)
	got := make(map[int32]int64)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return got
	}
	if err != nil {
		t.Fatal(err)
	}
	os.Each(func(o kadm.OffsetResponse) {
		if o.Topic == names.DLQ() && o.Err == nil {
			got[o.Partition] = o.At
		}
	})
	return got
}

func TestRedriveDryRun(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadLetter(ctx, t, env, fixture...)
	cl := kfakeClient(t, env)
	f := Filter{Origins: []string{"fcm.googleapis.com"}}
	var would []string
	rep, err := Redrive(ctx, cl, names, f, Options{DryRun: true, Rate: 0.001, OnRecord: func(r Result) {
		if r.Action == ActionWouldRedrive {
			would = append(would, r.Record.EventID)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(would)
	if want := sorted("fcm-503", "fcm-429"); !slices.Equal(would, want) {
		t.Errorf("dry run would redrive %v, want %v", would, want)
	}
	wantSkipped := map[Skip]int{SkipFiltered: 2, SkipBadSignature: 1, SkipLoopGuard: 1, SkipWouldFail: 1}
	if rep.Total != int64(len(fixture)) || rep.Scanned != len(fixture) || rep.Redriven != 2 || !mapsEqual(rep.Skipped, wantSkipped) {
		t.Errorf("report %+v, want total and scanned %d, 2 redriven, skipped %v", rep, len(fixture), wantSkipped)
	}
	if got := tierRecords(ctx, t, env); len(got) != 0 {
		t.Errorf("dry run produced %d records", len(got))
	}
	if got := committed(ctx, t, env, DefaultGroup); len(got) != 0 {
		t.Errorf("dry run committed %v", got)
	}

	// The real run does what the dry run said.
	rep, err = Redrive(ctx, cl, names, f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redriven != 2 || !mapsEqual(rep.Skipped, wantSkipped) {
		t.Errorf("real run: %+v", rep)
	}
	if got := ids(tierRecords(ctx, t, env)); !slices.Equal(got, would) {
		t.Errorf("redrove %v, dry run said %v", got, would)
	}
}

func mapsEqual[K comparable](a, b map[K]int) bool {
	for k, v := range a {
		if v != 0 && b[k] != v {
			return false
		}
	}
	for k, v := range b {
		if v != 0 && a[k] != v {
			return false
		}
	}
	return true
}

func TestRedrive(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadLetter(ctx, t, env, fixture...)
	cl := kfakeClient(t, env)
	rep, err := Redrive(ctx, cl, names, Filter{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		topic string
		count string
	}{
		"fcm-503": {"push.tier1", "1"},
		"fcm-429": {"push.tier2", "1"},
		"moz-ttl": {"push.tier3", "1"},
	}
	wantFail := map[topology.Reason]int{topology.ReasonRejected: 1, topology.ReasonPayloadTooLarge: 1}
	if rep.Redriven != len(want) || rep.Skipped[SkipBadSignature] != 1 || rep.Skipped[SkipLoopGuard] != 1 ||
		rep.Skipped[SkipWouldFail] != 2 || !maps.Equal(rep.WouldFail, wantFail) {
		t.Errorf("report %+v, want %d redriven, would_fail %v", rep, len(want), wantFail)
	}
	byID := make(map[string]dead)
	for _, d := range fixture {
		byID[d.id] = d
	}
	got := tierRecords(ctx, t, env)
	if len(got) != len(want) {
		t.Fatalf("%d records in the tier topics, want %d", len(got), len(want))
	}
	for _, r := range got {
		rec := Inspect(r, names)
		w, ok := want[rec.EventID]
		if !ok {
			t.Errorf("%s redriven", rec.EventID)
			continue
		}
		src := byID[rec.EventID].record()
		if r.Topic != w.topic || string(r.Key) != string(src.Key) || string(r.Value) != string(src.Value) {
			t.Errorf("%s: in %s with key %q; want %s, key and value intact", rec.EventID, r.Topic, r.Key, w.topic)
		}
		hs := make(map[string]string)
		for _, h := range r.Headers {
			hs[h.Key] = string(h.Value)
		}
		wantHs := map[string]string{topology.HeaderRedriveCount: w.count, topology.HeaderTraceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
		if len(hs) != len(wantHs) || hs[topology.HeaderRedriveCount] != w.count || hs[topology.HeaderTraceparent] != wantHs[topology.HeaderTraceparent] {
			t.Errorf("%s: headers %v, want %v", rec.EventID, hs, wantHs)
		}
	}

	// Everything is committed past: the next run has nothing to do.
	rep, err = Redrive(ctx, cl, names, Filter{}, Options{IncludeBadSignature: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total != 0 || rep.Scanned != 0 {
		t.Errorf("second run: %+v, want nothing left", rep)
	}

	// Another group has its own position; bad signatures pass when asked.
	rep, err = Redrive(ctx, cl, names, Filter{Reasons: []topology.Reason{topology.ReasonBadSignature}}, Options{Group: "forensics", IncludeBadSignature: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redriven != 1 || rep.ByTier[tiers.Tier1] != 1 {
		t.Errorf("bad-signature run: %+v", rep)
	}

	// A reason that would fail again is redriven when the filter names it.
	rep, err = Redrive(ctx, cl, names, Filter{Reasons: []topology.Reason{topology.ReasonRejected}}, Options{Group: "after-the-fix"})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redriven != 1 || rep.ByTier[tiers.Tier1] != 1 || rep.Skipped[SkipWouldFail] != 0 {
		t.Errorf("named-reason run: %+v, want moz-400 redriven", rep)
	}
}

// TestRedriveResume interrupts a redrive after K records and runs it again:
// every selected record is redriven exactly once.
func TestRedriveResume(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ds []dead
	var selected []string
	for i := range 30 {
		d := dead{id: fmt.Sprintf("evt-%02d", i), endpoint: fmt.Sprintf("%s%d", fcmEndpoint, i), source: fmt.Sprintf("push.tier%d/0/%d", 1+i%3, i),
			reason: topology.ReasonMaxAttempts, status: 503, attempt: 5, at: t0}
		if i%4 == 3 {
			d.reason, d.status = topology.ReasonRejected, 400 // filtered out
		} else {
			selected = append(selected, d.id)
		}
		ds = append(ds, d)
	}
	deadLetter(ctx, t, env, ds...)
	cl := kfakeClient(t, env)
	f := Filter{Reasons: []topology.Reason{topology.ReasonMaxAttempts}}

	const k = 7
	runCtx, interrupt := context.WithCancel(ctx)
	n := 0
	first, err := Redrive(runCtx, cl, names, f, Options{OnRecord: func(r Result) {
		if r.Action == ActionRedriven {
			if n++; n == k {
				interrupt()
			}
		}
	}})
	interrupt()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run returned %v, want context.Canceled", err)
	}
	if first.Redriven != k {
		t.Errorf("interrupted run redrove %d, want %d", first.Redriven, k)
	}
	if got := tierRecords(ctx, t, env); len(got) != k {
		t.Errorf("%d records in the tier topics after the interrupt, want %d", len(got), k)
	}

	// A limited run stops at its limit and keeps its place too.
	second, err := Redrive(ctx, cl, names, f, Options{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	if second.Redriven != 5 || !second.LimitReached {
		t.Errorf("limited run: %+v, want 5 redriven and LimitReached", second)
	}

	third, err := Redrive(ctx, cl, names, f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Redriven + second.Redriven + third.Redriven; got != len(selected) {
		t.Errorf("redriven %d+%d+%d, want %d in all", first.Redriven, second.Redriven, third.Redriven, len(selected))
	}
	if got, want := ids(tierRecords(ctx, t, env)), sorted(selected...); !slices.Equal(got, want) {
		t.Errorf("tier topics hold %v, want each of %v once", got, want)
	}
	ends, err := kadm.NewClient(kfakeClient(t, env)).ListEndOffsets(ctx, names.DLQ())
	if err != nil {
		t.Fatal(err)
	}
	pos := committed(ctx, t, env, DefaultGroup)
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 && pos[o.Partition] != o.Offset {
			t.Errorf("partition %d committed at %d, want the end %d", o.Partition, pos[o.Partition], o.Offset)
		}
	})
}

// countingLimiter counts the records it paced.
type countingLimiter struct{ n int }

func (l *countingLimiter) Wait(context.Context) error { l.n++; return nil }

func TestRedriveLimiterPacesOnlyRedrivenRecords(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	deadLetter(ctx, t, env, fixture...)
	l := &countingLimiter{}
	rep, err := Redrive(ctx, kfakeClient(t, env), names, Filter{Tiers: []tiers.Tier{tiers.Tier1, tiers.Tier2}}, Options{Limiter: l, Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Redriven != 2 || l.n != rep.Redriven {
		t.Errorf("%d redriven, limiter waited %d times; want 2 and 2 (moz-400 would fail again)", rep.Redriven, l.n)
	}
}

// TestRedriveRate checks the pace on a fake clock.
func TestRedriveRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true, NoProcessor: true, Partitions: 2})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var ds []dead
		for i := range 9 {
			ds = append(ds, dead{id: fmt.Sprintf("r%d", i), endpoint: fmt.Sprintf("%s%d", fcmEndpoint, i), source: "push.tier1/0/1", reason: topology.ReasonMaxAttempts, at: t0})
		}
		deadLetter(ctx, t, env, ds...)
		const rate = 4 // records per second
		rep, err := Redrive(ctx, kfakeClient(t, env), names, Filter{}, Options{Rate: rate})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Redriven != len(ds) {
			t.Fatalf("redrove %d, want %d", rep.Redriven, len(ds))
		}
		// Each redriven record is stamped when it is produced, on the
		// bubble's clock, to the millisecond.
		var at []time.Time
		for _, r := range tierRecords(ctx, t, env) {
			at = append(at, r.Timestamp)
		}
		slices.SortFunc(at, time.Time.Compare)
		const tick = time.Millisecond
		for i := 1; i < len(at); i++ {
			if gap := at[i].Sub(at[i-1]); gap < time.Second/rate-tick {
				t.Errorf("record %d produced %s after the one before, want at least %s", i, gap, time.Second/rate)
			}
		}
		if took, least := at[len(at)-1].Sub(at[0]), time.Duration(len(ds)-1)*time.Second/rate; took < least-tick {
			t.Errorf("%d records took %s, want at least %s", len(ds), took, least)
		}
	})
}

// TestRedriveLoopGuardAcrossCycles runs an event that always fails through
// the real processor: each redrive comes back to the DLQ with its
// push-redrive-count one higher, straight from the tier topic or through
// the signed retry ladder, and the guard refuses the fourth.
func TestRedriveLoopGuardAcrossCycles(t *testing.T) {
	tests := []struct {
		name   string
		answer pushsim.Response
		tier   tiers.Tier
		reason topology.Reason
	}{
		{"rejected from the tier topic", pushsim.Response{Status: 400, Repeat: true}, tiers.Tier2, topology.ReasonRejected},
		{"max attempts through the retry ladder", pushsim.Response{Status: 503, Repeat: true}, tiers.Tier3, topology.ReasonMaxAttempts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1})
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				defer cancel()
				sub := env.Sim.Subscribe(tt.answer)
				env.Produce(ctx, &kgo.Record{Topic: names.Tier(tt.tier), Key: []byte(sub.ID), Value: testenv.Event("boomerang", sub, "hi", nil)})
				cl := kfakeClient(t, env)
				lastDead := func(n int) *Record {
					t.Helper()
					rs, err := env.ReadRecords(ctx, names.DLQ(), n)
					if err != nil {
						t.Fatal(err)
					}
					return Inspect(rs[n-1], names)
				}
				for cycle := range DefaultMaxRedrives + 1 {
					d := lastDead(cycle + 1)
					if d.EventID != "boomerang" || d.Meta.Reason != tt.reason || d.Meta.RedriveCount != cycle || d.Tier != tt.tier {
						t.Fatalf("cycle %d: DLQ record %s %s redrive count %d tier %v, want boomerang %s count %d %v",
							cycle, d.EventID, d.Meta.Reason, d.Meta.RedriveCount, d.Tier, tt.reason, cycle, tt.tier)
					}
					// Named, so that a rejected event is redriven too.
					rep, err := Redrive(ctx, cl, names, Filter{Reasons: []topology.Reason{tt.reason}}, Options{})
					if err != nil {
						t.Fatal(err)
					}
					if cycle < DefaultMaxRedrives && rep.Redriven != 1 {
						t.Fatalf("cycle %d: %+v, want 1 redriven", cycle, rep)
					}
					if cycle == DefaultMaxRedrives && (rep.Redriven != 0 || rep.Skipped[SkipLoopGuard] != 1) {
						t.Errorf("after %d redrives: %+v, want the loop guard to refuse it", cycle, rep)
					}
				}
			})
		})
	}
}

// TestRedriveKeepsApp: an app's event dead-lettered by the processor is
// listed by its app, and redriven intact: the processor signs the replay
// with the same app's key.
func TestRedriveKeepsApp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := testenv.Start(t, testenv.Options{Virtual: true, Partitions: 1, Apps: []string{"shop"}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		shopKey := env.Apps["shop"].PublicKey
		sub := env.Sim.SubscribeWithKey(shopKey, pushsim.Response{Status: 400})
		other := env.Sim.SubscribeWithKey(env.VAPID.PublicKey, pushsim.Response{Status: 400})
		env.Produce(ctx,
			&kgo.Record{Topic: names.Tier(tiers.Tier1), Key: []byte(sub.ID), Value: testenv.Event("shop-evt", sub, "hi", map[string]any{"app": "shop"})},
			&kgo.Record{Topic: names.Tier(tiers.Tier1), Key: []byte(other.ID), Value: testenv.Event("default-evt", other, "hi", nil)},
		)
		if _, err := env.ReadRecords(ctx, names.DLQ(), 2); err != nil {
			t.Fatal(err)
		}
		cl := kfakeClient(t, env)
		for app, want := range map[string][]string{"shop": {"shop-evt"}, "default": {"default-evt"}, "news": nil} {
			if got := listIDs(ctx, t, cl, Filter{Apps: []string{app}}); !slices.Equal(got, want) {
				t.Errorf("--app %s lists %v, want %v", app, got, want)
			}
		}
		rep, err := Redrive(ctx, cl, names, Filter{Apps: []string{"shop"}, Reasons: []topology.Reason{topology.ReasonRejected}}, Options{})
		if err != nil || rep.Redriven != 1 {
			t.Fatalf("Redrive = %+v, %v; want 1 redriven", rep, err)
		}
		// Two dead outcomes, then the redriven event's.
		outs, err := env.ReadRecords(ctx, names.Outcomes(), 3)
		if err != nil {
			t.Fatal(err)
		}
		var o topology.OutcomeRecord
		if err := json.Unmarshal(outs[2].Value, &o); err != nil || o.ID != "shop-evt" || o.Outcome != "delivered" || o.App != "shop" {
			t.Errorf("redriven outcome %+v (%v), want shop-evt delivered for app shop", o, err)
		}
		var pushes int
		for _, d := range env.Sim.Deliveries() {
			if d.SubID == sub.ID {
				pushes++
				if d.VAPIDKey != shopKey {
					t.Errorf("push %d of the shop event signed with another key", pushes)
				}
			}
		}
		if pushes != 2 {
			t.Errorf("%d pushes of the shop event, want 2 (before and after the redrive)", pushes)
		}
	})
}
