package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

func TestParseProm(t *testing.T) {
	const page = `# HELP go_memstats_mallocs_total Total number of mallocs.
# TYPE go_memstats_mallocs_total counter
go_memstats_mallocs_total 1.5e+06
tierpush_retry_lateness_seconds_bucket{step="2s",tier="tier1",le="0.05"} 90
tierpush_retry_lateness_seconds_bucket{step="2s",tier="tier1",le="+Inf"} 100
tierpush_retry_lateness_seconds_bucket{step="8s",tier="tier2",le="0.05"} 9
tierpush_retry_lateness_seconds_bucket{step="8s",tier="tier2",le="+Inf"} 10
tierpush_retry_lateness_seconds_count{step="2s",tier="tier1"} 100
tierpush_retry_lateness_seconds_count{step="8s",tier="tier2"} 10
tierpush_consumer_lag{due="false",topic="push.tier1.retry-2s"} 7
tierpush_consumer_lag{due="true",topic="push.tier1.retry-2s"} 3
`
	ps, err := parseProm(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"counter", ps.sum("go_memstats_mallocs_total", nil), 1.5e6},
		{"histogram count over label sets", ps.sum("tierpush_retry_lateness_seconds_count", nil), 110},
		{"gauge with a label filter", ps.sum("tierpush_consumer_lag", map[string]string{"due": "false"}), 7},
		{"bucket le=0.05", ps.buckets("tierpush_retry_lateness_seconds")[0.05], 99},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
	m := latenessFromMetric(nil, ps)
	if m == nil || m.Count != 110 || m.ShareLE50 != 0.9 || m.P99BoundMS != 50 || !m.P99Beyond {
		// 99 of 110 within 50 ms is 90%, so p99 lies in the +Inf bucket:
		// beyond the last finite bound.
		t.Errorf("latenessFromMetric() = %+v, want count 110, 90%% within 50 ms, p99 beyond 50 ms", m)
	}
}

func TestCPUSecondsAndMemoryOfSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	if _, err := cpuSeconds(os.Getpid()); err != nil {
		t.Errorf("cpuSeconds() error = %v", err)
	}
	rss, peak, err := memory(os.Getpid())
	if err != nil || rss <= 0 || peak < rss {
		t.Errorf("memory() = %d, %d, %v; want 0 < rss <= peak", rss, peak, err)
	}
}

func TestQuantiles(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i) // 100..1, unsorted
	}
	got := quantiles(v)
	if want := (Quantiles{Count: 100, P50: 50, P99: 99, Max: 100}); got != want {
		t.Errorf("quantiles() = %+v, want %+v", got, want)
	}
	if got := quantiles(nil); got != (Quantiles{}) {
		t.Errorf("quantiles(nil) = %+v, want zero", got)
	}
}

func TestLatenessFigures(t *testing.T) {
	l := latenessFigures([]time.Duration{-time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}, 1)
	if l.Count != 3 || l.Early != 1 || l.MinMS != -1 || l.MaxMS != 3 || l.Unsent != 1 {
		t.Errorf("latenessFigures() = %+v, want 3 retries, 1 early, min -1 ms, max 3 ms, 1 unsent", l)
	}
}

func TestRateLimitFigures(t *testing.T) {
	// 60 s offered; the steady state is 20..60 s: 400 more 201s and 10
	// more 429s over 40 s.
	tl := []Sample{
		{T: 0},
		{T: 20, Requests: 1000, OK: 900, Throttled: 100},
		{T: 60, Requests: 21000, OK: 20900, Throttled: 100 + 200},
	}
	f := rateLimitFigures(tl, 60, 500)
	if f.FromS != 20 || f.ToS != 60 || f.GoodputPerSec != 500 || f.Share429 != 0.01 {
		t.Errorf("rateLimitFigures() = %+v, want 20..60 s, 500/s, 1%% 429s", f)
	}
}

func TestEventValue(t *testing.T) {
	sim, err := pushsim.New(pushsim.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	sim.SetBaseURL("http://127.0.0.1:1")
	now := time.Date(2026, 11, 21, 12, 0, 0, 123456789, time.UTC)
	tests := []struct {
		name      string
		malformed bool
		wantErr   bool
	}{
		{"valid", false, false},
		{"malformed auth", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEvent("x", 42, sim.Subscribe(), tiers.Tier3, topology.Names{Prefix: "push."}, tt.malformed)
			ev, err := event.Decode(e.value(now), time.Time{}, event.DefaultRules())
			if tt.wantErr {
				if err == nil {
					t.Fatal("Decode() = nil error, want invalid_event")
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode() error = %v", err)
			}
			if ev.ID != "bench-x-0000042" || !ev.CreatedAt.Equal(now) || ev.TTL != ttlSeconds*time.Second {
				t.Errorf("Decode() = id %q, created_at %v, ttl %v", ev.ID, ev.CreatedAt, ev.TTL)
			}
			if i, ok := eventIndex(ev.ID); !ok || i != 42 {
				t.Errorf("eventIndex(%q) = %d, %v; want 42", ev.ID, i, ok)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(*config)
		wantFlag string // "" for valid
	}{
		{"defaults", func(*config) {}, ""},
		{"all expands", func(c *config) { c.Scenarios = []string{"all"} }, ""},
		{"unknown scenario", func(c *config) { c.Scenarios = []string{"z"} }, "--scenario"},
		{"no events", func(c *config) { c.Events = 0 }, "--events"},
		{"in flight too large", func(c *config) { c.MaxInFlight = 200_000 }, "--max-in-flight"},
		{"tag with a slash", func(c *config) { c.Tag = "a/b" }, "--tag"},
		{"negative sim workers", func(c *config) { c.SimWorkers = -1 }, "--sim-workers"},
		{"short timeout", func(c *config) { c.Timeout = time.Second }, "--timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := defaultConfig()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.wantFlag == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantFlag != "" && (err == nil || !strings.Contains(err.Error(), tt.wantFlag)):
				t.Errorf("Validate() = %v, want an error naming %s", err, tt.wantFlag)
			}
		})
	}
	c := defaultConfig()
	c.Validate()
	if got := strings.Join(c.Scenarios, ","); got != "a,b,c,d,d100,d3,e" {
		t.Errorf("default scenarios = %s, want a,b,c,d,d100,d3,e", got)
	}
}

// TestTierIndependentOfMix: every tier gets the ledger mix in the same
// proportions, so per-tier figures compare like with like.
func TestTierIndependentOfMix(t *testing.T) {
	type key struct {
		tier string
		kind int // i % 100 bucket of ledgerMix
	}
	count := make(map[key]int)
	perTier := make(map[string]int)
	for i := range 10_000 {
		k := key{tierOf(i).String(), i % 100}
		count[k]++
		perTier[k.tier]++
	}
	for k, n := range count {
		if want := perTier[k.tier] / 100; n != want {
			t.Fatalf("tier %s, mix bucket %d: %d events, want %d", k.tier, k.kind, n, want)
		}
	}
	if perTier["tier1"] != 2000 || perTier["tier2"] != 3000 || perTier["tier3"] != 5000 {
		t.Errorf("events per tier = %v, want 2000, 3000, 5000", perTier)
	}
}

// writeSection replaces its section alone, and refuses a file without the
// markers rather than rewrite what a person wrote.
func TestWriteSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.md")
	doc := "# B\n\nby hand\n<!-- bench:cpu -->\nold\n<!-- /bench:cpu -->\nafter\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeSection(path, "cpu", []byte("| new |")); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if want := "# B\n\nby hand\n<!-- bench:cpu -->\n| new |\n<!-- /bench:cpu -->\nafter\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if err := writeSection(path, "all", []byte("x")); err == nil {
		t.Error("a file without the section's markers was written")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 4, 2, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// TestWriteMedians: the medians table takes the ratios within each run and
// judges the targets on their medians.
func TestWriteMedians(t *testing.T) {
	var runs []*Result
	for i, v := range []struct{ eps, loop, peer, cpu float64 }{
		{6000, 4000, 800, 0.14}, {5000, 4000, 1000, 0.16}, {7000, 4000, 900, 0.12},
	} {
		runs = append(runs, &Result{Scenario: "a", Name: fmt.Sprintf("a-%d", i+1), Run: i + 1, Events: 30000, LoadBefore: "0.50 0.40 0.30",
			EventsPerSec: v.eps, CPUSecPer1k: v.cpu, AllocsPerEvent: 80, Outcomes: map[string]int{"delivered/delivered": 30000},
			Ceiling: &ceilingResult{EventsPerSec: v.loop, Concurrency: 64}, Ratio: v.eps / v.loop,
			Peer: &peerResult{EventsPerSec: v.peer}, PeerRatio: v.eps / v.peer, BodiesVerified: 600})
	}
	var b strings.Builder
	writeMedians(&b, [][]*Result{runs})
	out := b.String()
	for _, want := range []string{
		"| a (30000 events, 64 senders) | **6000** (6000, 5000, 7000) | **4000** (4000, 4000, 4000) | **1.50×** (1.50×, 1.25×, 1.75×) |",
		"**7.50×** (7.50×, 5.00×, 7.78×)",
		"**0.140** (0.140, 0.160, 0.120)",
		"90000 of 90000 events reached one outcome, 0 duplicates; 1800 of 1800 sampled bodies",
		"- ≥ 1.5× the loop: median 1.50× ✅",
		"- ≥ 7× BullMQ + web-push: median 7.50× ✅",
		"- ≤ 0.15 processor CPU s per 1,000 events: median 0.140 ✅",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("writeMedians() lacks %q:\n%s", want, out)
		}
	}
	// One run: no medians.
	b.Reset()
	writeMedians(&b, [][]*Result{runs[:1]})
	if b.Len() > 0 {
		t.Errorf("writeMedians() of one run = %q, want nothing", b.String())
	}
}
