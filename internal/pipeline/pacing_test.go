package pipeline_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/benchplot"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
)

var pacingReport = flag.String("pacing.report", "", "run the full-size pacing scenario and write its figures and chart to this directory")

// rateLimitRun is one run of the rate-limited origin scenario.
type rateLimitRun struct {
	limit, offered, seconds int
	pacing                  bool
	// latency of the push service (default 15 ms ± 10 ms); processors
	// in the group sharing it (default 1).
	latency    time.Duration
	processors int
	// from is the first second measured; default a third of the run.
	from int
	// shortfall: the cell's bars are a known shortfall, reported only.
	shortfall bool

	share429 float64 // 429s over attempts, steady state
	goodput  float64 // 201s per second, steady state
	events   int
	terminal int
	timeline []sample
	peers    int // the most peers one processor heard of
}

type sample struct {
	at                  float64 // seconds since start
	limit               float64 // pacer limit of the origin
	sent, ok, throttled float64 // per second
	rate                float64 // the processors' send rates together
}

// runRateLimited offers events at r.offered/s for r.seconds to one origin
// that allows r.limit requests/s (429 + Retry-After: 1 above it), on a
// fake clock, and measures the steady state (after the first third).
func runRateLimited(t *testing.T, r *rateLimitRun) {
	synctest.Test(t, func(t *testing.T) {
		sim := pushsim.DefaultConfig()
		sim.RateLimit, sim.Burst, sim.RetryAfter = float64(r.limit), r.limit, 1 // one second of burst
		sim.Latency, sim.LatencyJitter = 15*time.Millisecond, 10*time.Millisecond
		if r.latency > 0 {
			sim.Latency, sim.LatencyJitter = r.latency, r.latency/5
		}
		sim.VerifyEvery = 50
		sim.KeepDeliveries = 1
		env := testenv.Start(t, testenv.Options{Virtual: true, Sim: &sim, Partitions: 8, Pipeline: func(pc *pipeline.Config) {
			pc.Pacing.Enabled = r.pacing
			pc.MaxInFlight = 4096
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Hour)
		defer cancel()
		procs := []*pipeline.Processor{env.Processor()}
		for range r.processors - 1 {
			p, _ := env.StartMember()
			procs = append(procs, p)
		}
		// The group settles before the traffic starts: every member owns
		// partitions. (A member joining mid-run is the fault suite's case.)
		for deadline := time.Now().Add(time.Minute); len(procs) > 1; time.Sleep(100 * time.Millisecond) {
			owning := 0
			for _, p := range procs {
				if lag, err := p.Lag(ctx); err == nil && len(lag) > 0 {
					owning++
				}
			}
			if owning == len(procs) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after a minute %d of %d processors own partitions", owning, len(procs))
			}
		}
		subs := make([]pushsim.Subscription, 500)
		for i := range subs {
			subs[i] = env.Sim.Subscribe()
		}

		start := time.Now()
		var wg sync.WaitGroup
		done := make(chan struct{})
		wg.Go(func() { // the sampler
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			var last pushsim.Stats
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				st := env.Sim.Stats()
				s := sample{at: time.Since(start).Seconds(), sent: float64(st.Requests - last.Requests),
					ok: float64(st.ByStatus[201] - last.ByStatus[201]), throttled: float64(st.ByStatus[429] - last.ByStatus[429])}
				for _, p := range procs {
					for _, l := range p.Pacer().Lanes() {
						s.limit += float64(l.Limit)
						s.rate += l.Rate
						r.peers = max(r.peers, l.Peers)
					}
				}
				r.timeline = append(r.timeline, s)
				if os.Getenv("PACING_LIVE") != "" {
					t.Logf("t=%3.0f rate=%6.1f sent=%5.0f ok=%5.0f 429=%5.0f", s.at, s.rate, s.sent, s.ok, s.throttled)
				}
				last = st
			}
		})
		n := 0
		for tick := 0; tick < r.seconds*100; tick++ {
			// The offered rate spread over ticks of 10 ms, also below 100/s.
			per := (tick+1)*r.offered/100 - tick*r.offered/100
			recs := make([]*kgo.Record, 0, per)
			for range per {
				sub := subs[n%len(subs)]
				tier := tiers.Tier3
				switch n % 10 {
				case 0, 1:
					tier = tiers.Tier1
				case 2, 3, 4:
					tier = tiers.Tier2
				}
				recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tier), Key: []byte(sub.ID),
					Value: testenv.Event(fmt.Sprintf("rl-%d", n), sub, "x", map[string]any{"ttl": 900})})
				n++
			}
			for _, rec := range recs {
				env.Client.Produce(ctx, rec, nil)
			}
			time.Sleep(10 * time.Millisecond) // the offered rate, on the fake clock
		}
		r.events = n
		got, err := env.ReadOutcomes(ctx, n)
		close(done)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		r.terminal = len(got)
		var sent, ok, thr float64
		steady := 0
		from := float64(r.seconds) / 3
		if r.from > 0 {
			from = float64(r.from)
		}
		for _, s := range r.timeline {
			if s.at > from && s.at <= float64(r.seconds) {
				sent, ok, thr = sent+s.sent, ok+s.ok, thr+s.throttled
				steady++
			}
		}
		if sent > 0 {
			r.share429 = thr / sent
		}
		if steady > 0 {
			r.goodput = ok / float64(steady)
		}
	})
}

// TestPacingRateLimitedOrigin: against an origin limited to L requests/s,
// offered 4L/s, pacing keeps the steady-state 429 share under 5% with
// goodput at least 90% of L, and every event still ends.
func TestPacingRateLimitedOrigin(t *testing.T) {
	on := &rateLimitRun{limit: 200, offered: 800, seconds: 30, pacing: true}
	if *pacingReport == "" {
		testenv.Long(t, "30 s of a limited origin offered four times its limit, pacing on and off")
	} else {
		on = &rateLimitRun{limit: 500, offered: 2000, seconds: 60, pacing: true}
	}
	runRateLimited(t, on)
	if os.Getenv("PACING_TIMELINE") != "" {
		for _, s := range on.timeline {
			t.Logf("t=%3.0f limit=%4.0f sent=%5.0f ok=%5.0f 429=%5.0f", s.at, s.limit, s.sent, s.ok, s.throttled)
		}
	}
	t.Logf("pacing on:  429 share %.2f%%, goodput %.0f/s of %d/s (%.0f%%), %d of %d events terminal",
		100*on.share429, on.goodput, on.limit, 100*on.goodput/float64(on.limit), on.terminal, on.events)
	if on.terminal != on.events {
		t.Errorf("%d of %d events reached an outcome", on.terminal, on.events)
	}
	if on.share429 >= 0.05 {
		t.Errorf("steady-state 429 share %.2f%%, want below 5%%", 100*on.share429)
	}
	if on.goodput < 0.9*float64(on.limit) {
		t.Errorf("steady-state goodput %.0f/s, want at least 90%% of %d/s", on.goodput, on.limit)
	}
	if *pacingReport == "" {
		return
	}
	off := &rateLimitRun{limit: on.limit, offered: on.offered, seconds: on.seconds, pacing: false}
	runRateLimited(t, off)
	t.Logf("pacing off: 429 share %.2f%%, goodput %.0f/s of %d/s (%.0f%%), %d of %d events terminal",
		100*off.share429, off.goodput, off.limit, 100*off.goodput/float64(off.limit), off.terminal, off.events)
	if err := writePacingReport(*pacingReport, on, off); err != nil {
		t.Fatal(err)
	}
}

// TestPacingGridKafka runs cells of the pacing grid (internal/pacing's
// TestGrid) end to end: events through Kafka and the push simulator
// limiting the origin with a token bucket. After the first 10 s: under 5%
// 429s, at least 90% of the limit delivered (each the median of three
// draws), every event terminal. (Several
// processors in one group cannot share a synctest bubble for long: a
// rebalance holds kgo's group mutex while a hand-off waits for fake time,
// and a goroutine waiting on a mutex keeps the bubble's clock from moving.
// internal/share's test proves the sharing through Kafka, TestGrid the
// control with three processors.)
func TestPacingGridKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("half a minute of fake time per cell")
	}
	if raceOn {
		t.Skip("minutes with the race detector; make test runs it without (test-pacing-grid)")
	}
	for _, c := range []rateLimitRun{
		{limit: 100, latency: 20 * time.Millisecond, processors: 1},
		// A known shortfall, as the grid's 20/s cells (docs/pacing.md):
		// 429 share 6.5-9.5%.
		{limit: 20, latency: 250 * time.Millisecond, processors: 1, shortfall: true},
		{limit: 500, latency: 5 * time.Millisecond, processors: 1},
	} {
		t.Run(fmt.Sprintf("limit=%d/latency=%s/processors=%d", c.limit, c.latency, c.processors), func(t *testing.T) {
			// Three draws, judged on the median as the model grid is: at
			// 20 req/s the 400 sends measured hold two or three probe
			// cycles, and one draw ranges from 2% to 5% 429s.
			var shares, goodputs []float64
			for draw := range 3 {
				r := c
				r.offered, r.seconds, r.from, r.pacing = 2*c.limit, 30, 10, true
				runRateLimited(t, &r)
				t.Logf("draw %d: 429 share %.2f%%, goodput %.0f/s of %d/s (%.0f%%), %d of %d events terminal, peers heard %d",
					draw+1, 100*r.share429, r.goodput, r.limit, 100*r.goodput/float64(r.limit), r.terminal, r.events, r.peers)
				if r.terminal != r.events {
					t.Errorf("draw %d: %d of %d events reached an outcome", draw+1, r.terminal, r.events)
				}
				if r.processors > 1 && r.peers != r.processors-1 {
					t.Errorf("draw %d: a processor heard of %d peers, want %d: pacing is not shared", draw+1, r.peers, r.processors-1)
				}
				shares, goodputs = append(shares, r.share429), append(goodputs, r.goodput)
			}
			slices.Sort(shares)
			slices.Sort(goodputs)
			fail := bar(t, c.shortfall)
			if share := shares[1]; share >= 0.05 {
				fail("429 share %.2f%% (median of %.2f%%), want below 5%%", 100*share, shares)
			}
			if goodput := goodputs[1]; goodput < 0.9*float64(c.limit) {
				fail("goodput %.0f/s (median of %.0f), want at least 90%% of %d/s", goodput, goodputs, c.limit)
			}
		})
	}
}

func writePacingReport(dir string, on, off *rateLimitRun) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	summary := fmt.Sprintf("rate-limited origin: %d req/s allowed, %d events/s offered for %d s (fake clock)\n"+
		"%-11s %12s %16s %12s\n%-11s %11.2f%% %11.0f/s %3.0f%% %6d/%d\n%-11s %11.2f%% %11.0f/s %3.0f%% %6d/%d\n",
		on.limit, on.offered, on.seconds, "", "429 share", "goodput", "terminal",
		"pacing on", 100*on.share429, on.goodput, 100*on.goodput/float64(on.limit), on.terminal, on.events,
		"pacing off", 100*off.share429, off.goodput, 100*off.goodput/float64(off.limit), off.terminal, off.events)
	fmt.Print(summary)
	if err := os.WriteFile(filepath.Join(dir, "pacing.txt"), []byte(summary), 0o644); err != nil {
		return err
	}
	series := func(r *rateLimitRun, f func(sample) float64) []benchplot.Point {
		var pts []benchplot.Point
		for _, s := range r.timeline {
			pts = append(pts, benchplot.Point{X: s.at, Y: f(s)})
		}
		return pts
	}
	share := func(s sample) float64 {
		if s.sent == 0 {
			return 0
		}
		return 100 * s.throttled / s.sent
	}
	c := benchplot.Chart{
		Title:  fmt.Sprintf("Pacing against a %d req/s push service, %d events/s offered", on.limit, on.offered),
		XLabel: "seconds",
		Panels: []benchplot.Panel{
			{Title: "concurrency limit (pacing on)", YLabel: "requests in flight", Series: []benchplot.Series{{Name: "limit", Color: "#1f77b4", Points: series(on, func(s sample) float64 { return s.limit })}}},
			{Title: "429 share of attempts", YLabel: "%", Series: []benchplot.Series{
				{Name: "pacing on", Color: "#1f77b4", Points: series(on, share)},
				{Name: "pacing off", Color: "#d62728", Points: series(off, share)}}},
			{Title: "goodput (201 per second)", YLabel: "per second", Series: []benchplot.Series{
				{Name: "pacing on", Color: "#1f77b4", Points: series(on, func(s sample) float64 { return s.ok })},
				{Name: "pacing off", Color: "#d62728", Points: series(off, func(s sample) float64 { return s.ok })}}},
		},
	}
	f, err := os.Create(filepath.Join(dir, "pacing.svg"))
	if err != nil {
		return err
	}
	defer f.Close()
	return c.WriteSVG(f)
}

// TestPerDeviceThrottling: the ledger mix against a healthy push service
// (5% of its subscriptions answer 429 once, each its own device) must not
// make pacing the bound. The origin is never paused as a whole, and its
// limit never falls below the processor's window: a cut that does not
// lower the 429 share is not repeated — while the first sends are under
// way (45 s). Repeated cuts once took one processor from 492 to 28
// requests/s.
func TestPerDeviceThrottling(t *testing.T) {
	if raceOn {
		t.Skip("6,000 events on the fake clock, CPU-bound: make test runs it without the race detector (test-pacing-small)")
	}
	synctest.Test(t, func(t *testing.T) {
		const n, window = 6000, 32
		sim := pushsim.DefaultConfig()
		sim.Latency = 50 * time.Millisecond
		log := &pacingLog{}
		env := testenv.Start(t, testenv.Options{Virtual: true, Sim: &sim,
			Pipeline:         func(c *pipeline.Config) { c.MaxInFlight = window },
			ProcessorOptions: []pipeline.Option{pipeline.WithPacingObserver(log.add)}})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var recs []*kgo.Record
		for i := range n {
			c := ledgerMix(i)
			sub := env.Sim.Subscribe(c.Script...)
			if c.Malformed {
				sub.Auth = sub.Auth[:16]
			}
			recs = append(recs, &kgo.Record{Topic: env.Names.Tier(tiers.All[i%3]), Key: []byte(sub.ID),
				Value: testenv.Event(fmt.Sprintf("pd-%05d", i), sub, "x", nil)})
		}
		start := time.Now()
		env.Produce(ctx, recs...)
		if _, err := env.ReadOutcomes(ctx, n); err != nil {
			t.Fatal(err)
		}
		var kinds []string
		pauses := 0
		for _, e := range log.of("http://" + env.SimAddr) {
			if e.At.Sub(start) > 45*time.Second {
				// The first sends are done; what is left is a trickle of
				// retries, which Little's law may well cut the limit to.
				break
			}
			kinds = append(kinds, fmt.Sprintf("%s@%s limit %d (%.1f%%)", e.Kind, e.At.Sub(start).Round(time.Millisecond), e.Limit, 100*e.Rate))
			switch e.Kind {
			case "open":
				t.Errorf("breaker opened at %s", e.At.Sub(start))
			case "pause":
				pauses++
			}
			if e.Limit < window {
				t.Errorf("limit %d after a %s at %s, below the window of %d", e.Limit, e.Kind, e.At.Sub(start), window)
			}
		}
		t.Logf("pacing events: %v", kinds)
		// A few throttled devices close together early on can pass for
		// a sender limit once: one Retry-After (5 s), and a cap learnt
		// from the lane's first second, which lapses after 30 s. Not more.
		if pauses > 1 {
			t.Errorf("origin paused %d times, want at most once", pauses)
		}
		// First sends at the window's pace: n / (window / 50 ms) = 9.4 s.
		first := 0
		for _, d := range env.Sim.Deliveries() {
			if d.At.Sub(start) < 45*time.Second {
				first++
			}
		}
		if first < n {
			t.Errorf("%d requests in the first 45 s, want at least %d: pacing held sends back", first, n)
		}
	})
}

// bar is how a pacing test reports a bar it misses: t.Errorf, or for a
// known shortfall (docs/pacing.md lists them) a line in the log, so the
// figure is still read but fails nothing.
func bar(t *testing.T, shortfall bool) func(format string, args ...any) {
	if !shortfall {
		return t.Errorf
	}
	return func(format string, args ...any) {
		t.Helper()
		t.Logf("a known shortfall: "+format, args...)
	}
}
