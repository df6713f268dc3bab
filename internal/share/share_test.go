package share_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/internal/share"
	"github.com/tierpush/tierpush/tiers"
)

const origin = "https://push.example.net"

// recorder is an Applier that keeps what it is given.
type recorder struct {
	mu   sync.Mutex
	got  []pacing.Signal
	next share.Applier
}

func (r *recorder) Apply(s pacing.Signal) {
	r.mu.Lock()
	r.got = append(r.got, s)
	r.mu.Unlock()
	if r.next != nil {
		r.next.Apply(s)
	}
}

func (r *recorder) signals() []pacing.Signal {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]pacing.Signal(nil), r.got...)
}

// member is one processor's pacer with its exchange.
type member struct {
	pacer *pacing.Pacer
	ex    *share.Exchange
	rec   *recorder
}

func start(t *testing.T, c *kfake.Cluster, from string) *member {
	t.Helper()
	m := &member{rec: &recorder{}}
	p, err := pacing.New(pacing.DefaultConfig(), pacing.WithSignals(func(s pacing.Signal) { m.ex.Publish(s) }))
	if err != nil {
		t.Fatal(err)
	}
	m.pacer, m.rec.next = p, p
	m.ex, err = share.New(share.Config{Topic: "push.pacing", From: from}, slog.New(slog.NewTextHandler(io.Discard, nil)), m.rec,
		[]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = m.ex.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; p.Close() })
	return m
}

// cluster is an embedded broker with push.pacing, closed when t ends.
func cluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "push.pacing"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestPauseReachesPeers: a storm of 429s seen by one processor pauses the
// origin there, and through push.pacing in the other processors too,
// within a second; its own signals come back to nobody; a processor that
// starts later reads the pause still in force.
func TestPauseReachesPeers(t *testing.T) {
	c := cluster(t)
	a, b := start(t, c, "a"), start(t, c, "b")

	// a sends until paused: every other answer a 429 with Retry-After 5 s.
	for i := range 40 {
		slot, _ := a.pacer.Acquire(context.Background(), pacing.Request{Origin: origin, Sub: string(rune('A' + i)), Tier: tiers.Tier1})
		if slot == nil {
			break
		}
		r := push.Result{Class: push.Delivered, Status: 201}
		if i%2 == 1 {
			r = push.Result{Class: push.Retryable, Status: 429, RetryAfter: 5 * time.Second}
		}
		slot.Done(r)
	}
	paused := func(m *member) time.Time {
		for _, l := range m.pacer.Lanes() {
			if l.Origin == origin {
				return l.PausedUntil
			}
		}
		return time.Time{}
	}
	at := time.Now()
	until := paused(a)
	if !until.After(at) {
		t.Fatalf("a is not paused after a storm of 429s")
	}
	for paused(b).IsZero() {
		if time.Since(at) > 5*time.Second {
			t.Fatalf("b heard nothing in 5 s: %+v", b.rec.signals())
		}
		time.Sleep(10 * time.Millisecond) // polling a deadline, not waiting a fixed time
	}
	took := time.Since(at)
	t.Logf("the pause reached the other processor in %s", took.Round(time.Millisecond))
	if took > time.Second {
		t.Errorf("the pause took %s to reach the other processor, want within 1 s", took)
	}
	if got := paused(b); !got.Equal(until.Truncate(time.Millisecond)) && !got.Equal(until) {
		t.Errorf("b paused until %s, want a's %s", got, until)
	}
	for _, s := range a.rec.signals() {
		if s.From == "a" {
			t.Errorf("a applied its own signal %+v", s)
		}
	}

	// A processor starting now reads the last minute of the topic.
	late := start(t, c, "late")
	for paused(late).IsZero() {
		if time.Since(at) > 10*time.Second {
			t.Fatalf("a late processor did not read the pause in force")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if applied, sent, dropped := a.ex.Counts(); sent == 0 || dropped != 0 {
		t.Errorf("a's exchange: applied %d, sent %d, dropped %d", applied, sent, dropped)
	}
}

// TestSignalCarriesEveryField: a signal reaches a peer through push.pacing
// with every figure it was published with: its rates, and the group's cut
// (W and t0) every processor computes the estimate from.
func TestSignalCarriesEveryField(t *testing.T) {
	c := cluster(t)
	a, b := start(t, c, "a"), start(t, c, "b")
	at := time.Now().Truncate(time.Millisecond)
	want := pacing.Signal{Origin: origin, From: "a", At: at, Kind: pacing.SignalCut, Rate: 12.5, Accepted: 11, Limited: true,
		Ceiling: 11.5, Epoch: at.Add(-time.Second), Until: at.Add(time.Second)}
	a.ex.Publish(want)
	deadline := time.Now().Add(5 * time.Second)
	for len(b.rec.signals()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("b heard nothing in 5 s")
		}
		time.Sleep(10 * time.Millisecond) // polling a deadline, not waiting a fixed time
	}
	got := b.rec.signals()[0]
	if !got.At.Equal(want.At) || !got.Until.Equal(want.Until) || !got.Epoch.Equal(want.Epoch) {
		t.Errorf("times: got at %s until %s epoch %s, want %s, %s and %s", got.At, got.Until, got.Epoch, want.At, want.Until, want.Epoch)
	}
	got.At, got.Until, got.Epoch, want.At, want.Until, want.Epoch = time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}, time.Time{}
	if got != want {
		t.Errorf("b got %+v, want %+v", got, want)
	}
}
