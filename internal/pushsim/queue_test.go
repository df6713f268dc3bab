package pushsim_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/SherClockHolmes/webpush-go"

	"github.com/tierpush/tierpush/internal/pushsim"
)

// bubbleSim serves a simulator for cfg on an in-memory listener inside a synctest bubble and
// returns it with a client of its own connections.
func bubbleSim(t *testing.T, cfg pushsim.Config) (*pushsim.Server, *http.Client) {
	t.Helper()
	sim, err := pushsim.New(cfg, nil)
	if err != nil {
		t.Fatalf("new simulator: %v", err)
	}
	ln := newMemListener()
	served := make(chan error, 1)
	go func() { served <- sim.Serve(ln) }()
	sim.SetBaseURL("http://push.sim")
	tr := &http.Transport{DialContext: ln.DialContext}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		if err := sim.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sim, &http.Client{Transport: tr}
}

// push sends one push to sub with ctx, returning the status (0 after an error).
func push(ctx context.Context, c *http.Client, keys vapidKeys, sub pushsim.Subscription) int {
	resp, err := webpush.SendNotificationWithContext(ctx, []byte("m"), &webpush.Subscription{
		Endpoint: sub.Endpoint, Keys: webpush.Keys{P256dh: sub.P256dh, Auth: sub.Auth},
	}, defaultOptions(c, keys))
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// pushInOrder starts one push per subscription, each after the one before has reached the
// simulator, and returns their statuses once all are answered.
func pushInOrder(ctx context.Context, c *http.Client, keys vapidKeys, subs ...pushsim.Subscription) []int {
	statuses := make([]int, len(subs))
	done := make(chan struct{}, len(subs))
	for i, sub := range subs {
		go func() { statuses[i] = push(ctx, c, keys, sub); done <- struct{}{} }()
		synctest.Wait()
	}
	for range subs {
		<-done
	}
	return statuses
}

// bySub indexes deliveries by subscription.
func bySub(sim *pushsim.Server) map[string]pushsim.Delivery {
	m := make(map[string]pushsim.Delivery)
	for _, d := range sim.Deliveries() {
		m[d.SubID] = d
	}
	return m
}

// TestWorkerPool: two workers per origin, 100 ms a push, five pushes at once: served in the
// order they came, two at a time, the rest waiting (and the wait recorded); another origin has
// a pool of its own.
func TestWorkerPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pushsim.DefaultConfig()
		cfg.Workers, cfg.Latency = 2, 100*time.Millisecond
		sim, c := bubbleSim(t, cfg)
		keys := newVAPID(t)
		subs := make([]pushsim.Subscription, 5)
		for i := range subs {
			subs[i] = sim.Subscribe()
		}
		start := time.Now()
		for i, st := range pushInOrder(t.Context(), c, keys, subs...) {
			if st != http.StatusCreated {
				t.Errorf("push %d: status %d, want 201", i, st)
			}
		}
		ds := bySub(sim)
		wantStart := []time.Duration{0, 0, 100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}
		for i, sub := range subs {
			d := ds[sub.ID]
			if got := d.Started.Sub(start); got != wantStart[i] {
				t.Errorf("push %d started at %v, want %v", i, got, wantStart[i])
			}
			if d.Wait != d.Started.Sub(d.At) {
				t.Errorf("push %d: Wait %v, want Started - At = %v", i, d.Wait, d.Started.Sub(d.At))
			}
		}
		if got, want := sim.Waits(start), []time.Duration{0, 0, 100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}; !slices.Equal(got, want) {
			t.Errorf("Waits = %v, want %v", got, want)
		}

		// Another origin (the same server named otherwise) is not held back.
		sim.SetBaseURL("http://other.sim")
		busy := sim.Subscribe()
		other := sim.Subscribe()
		sim.SetBaseURL("http://push.sim")
		subs = []pushsim.Subscription{sim.Subscribe(), sim.Subscribe(), sim.Subscribe(), busy, other}
		from := time.Now()
		pushInOrder(t.Context(), c, keys, subs...)
		ds = bySub(sim)
		if w := ds[busy.ID].Wait; w != 0 {
			t.Errorf("first push to another origin waited %v behind a busy one", w)
		}
		if w := ds[other.ID].Wait; w != 0 {
			t.Errorf("second push to another origin waited %v", w)
		}
		if w := ds[subs[2].ID].Wait; w != 100*time.Millisecond {
			t.Errorf("third push to the busy origin waited %v, want 100ms", w)
		}
		if got := len(sim.Waits(from)); got != 5 {
			t.Errorf("Waits since the second round: %d, want 5", got)
		}
	})
}

// TestWorkerPoolRateLimit: the rate limit is judged when a request reaches a worker, so a pool
// that serves one push a second keeps three pushes at once within one request a second.
func TestWorkerPoolRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pushsim.DefaultConfig()
		cfg.Workers, cfg.Latency = 1, time.Second
		cfg.RateLimit, cfg.Burst = 1, 1
		sim, c := bubbleSim(t, cfg)
		keys := newVAPID(t)
		got := pushInOrder(t.Context(), c, keys, sim.Subscribe(), sim.Subscribe(), sim.Subscribe())
		if want := []int{201, 201, 201}; !slices.Equal(got, want) {
			t.Errorf("statuses %v, want %v: the limit was judged on arrival", got, want)
		}
	})
}

// TestWorkerPoolScriptLatency: a scripted answer's latency holds its worker like the
// configured one.
func TestWorkerPoolScriptLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pushsim.DefaultConfig()
		cfg.Workers = 1
		sim, c := bubbleSim(t, cfg)
		keys := newVAPID(t)
		slow := sim.Subscribe(pushsim.Response{Status: 503, Latency: 500 * time.Millisecond})
		next := sim.Subscribe()
		got := pushInOrder(t.Context(), c, keys, slow, next)
		if want := []int{503, 201}; !slices.Equal(got, want) {
			t.Errorf("statuses %v, want %v", got, want)
		}
		if w := bySub(sim)[next.ID].Wait; w != 500*time.Millisecond {
			t.Errorf("push behind a 500 ms scripted answer waited %v, want 500ms", w)
		}
	})
}

// TestWorkerPoolSenderGone: a push whose sender gives up while it waits is dropped without
// work (recorded 499, ClientGone, no worker taken, so the one behind it is not delayed); one
// given up while a worker serves it is served in full (201, ClientGone: a send the sender will
// make again), and its worker stays busy for the whole latency.
func TestWorkerPoolSenderGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := pushsim.DefaultConfig()
		cfg.Workers, cfg.Latency = 1, time.Second
		sim, c := bubbleSim(t, cfg)
		keys := newVAPID(t)
		served, queued, behind := sim.Subscribe(), sim.Subscribe(), sim.Subscribe()
		impatient, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		statuses := make(chan int, 3)
		for _, sub := range []pushsim.Subscription{served, queued} {
			go func() { statuses <- push(impatient, c, keys, sub) }()
			synctest.Wait()
		}
		go func() { statuses <- push(t.Context(), c, keys, behind) }()
		synctest.Wait()
		var got []int
		for range 3 {
			got = append(got, <-statuses)
		}
		slices.Sort(got)
		if want := []int{0, 0, 201}; !slices.Equal(got, want) {
			t.Errorf("statuses %v, want two given up and one 201", got)
		}
		synctest.Wait() // the abandoned push finishes its work
		ds := bySub(sim)
		if d := ds[served.ID]; d.Status != 201 || !d.ClientGone || d.Started != start {
			t.Errorf("push given up while served: %+v, want 201, ClientGone, started at once", d)
		}
		if d := ds[queued.ID]; d.Status != pushsim.StatusClientClosed || !d.ClientGone || !d.Started.IsZero() || d.Wait != 300*time.Millisecond {
			t.Errorf("push given up while queued: status %d, ClientGone %v, Started %v, Wait %v; want 499, true, zero, 300ms",
				d.Status, d.ClientGone, d.Started, d.Wait)
		}
		if d := ds[behind.ID]; d.Status != 201 || d.ClientGone || d.Started.Sub(start) != time.Second {
			t.Errorf("push behind them: status %d, ClientGone %v, started at %v; want 201, false, 1s (the served push's full latency)",
				d.Status, d.ClientGone, d.Started.Sub(start))
		}
		if got, want := sim.Waits(start), []time.Duration{0, 300 * time.Millisecond, time.Second}; !slices.Equal(got, want) {
			t.Errorf("Waits = %v, want %v (the dropped push until it was dropped)", got, want)
		}
		if got := sim.Stats().ByStatus[pushsim.StatusClientClosed]; got != 1 {
			t.Errorf("Stats.ByStatus[499] = %d, want 1", got)
		}
	})
}
