package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tierpush/tierpush/internal/benchplot"
	"github.com/tierpush/tierpush/internal/pushsim"
)

// Result is one scenario's figures, written as bench/results/<scenario>.json.
type Result struct {
	Scenario string `json:"scenario"`
	// Name is the scenario with --tag, and the run's number with --runs:
	// the name of the result and chart files.
	Name string `json:"name"`
	// Run counts the scenario's runs from 1 with --runs (0: one run).
	Run         int         `json:"run,omitempty"`
	Title       string      `json:"title"`
	Date        time.Time   `json:"date"`
	Command     string      `json:"command"`
	Machine     Machine     `json:"machine"`
	LoadBefore  string      `json:"load_before"` // /proc/loadavg 1, 5, 15 min
	LoadAfter   string      `json:"load_after"`
	Events      int         `json:"events"`
	MaxInFlight int         `json:"max_in_flight"`
	Offered     float64     `json:"offered_per_sec,omitempty"` // 0: as fast as the broker takes them
	Sim         SimSettings `json:"simulator"`
	// ProcessorArgs are the processor flags beyond the wiring (brokers,
	// topics, simulator address).
	ProcessorArgs []string `json:"processor_args"`
	ProcessorEnv  []string `json:"processor_env,omitempty"`

	// Incomplete says why the run stopped before every outcome; the
	// figures then count the events that reached one.
	Incomplete string `json:"incomplete,omitempty"`

	ProduceSeconds    float64 `json:"produce_seconds"`
	Seconds           float64 `json:"seconds"`                  // first produce to last outcome read
	EventsPerSec      float64 `json:"events_per_sec,omitempty"` // events over Seconds
	CPUSecPer1k       float64 `json:"cpu_sec_per_1000"`         // the processor's user+system CPU
	CPUCores          float64 `json:"cpu_cores"`                // the processor's average CPU use
	BrokerCPUSecPer1k float64 `json:"broker_cpu_sec_per_1000"`
	BenchCPUSecPer1k  float64 `json:"bench_cpu_sec_per_1000"` // simulator, producer, outcome reader
	PeakRSSMB         float64 `json:"peak_rss_mb"`            // the processor's VmHWM
	AllocsPerEvent    float64 `json:"allocs_per_event"`
	// The processor's read and write system calls per event (sockets
	// to the broker and the push service, the log).
	ReadSyscallsPerEvent  float64 `json:"read_syscalls_per_event"`
	WriteSyscallsPerEvent float64 `json:"write_syscalls_per_event"`
	GCCycles              float64 `json:"gc_cycles"`

	Outcomes   map[string]int `json:"outcomes"` // outcome/reason
	Duplicates int64          `json:"duplicate_outcomes"`
	// Latency is created_at to the outcome record (latency_ms) of
	// delivered events by tier; Processing is first dispatch to outcome.
	Latency    map[string]Quantiles `json:"e2e_latency_ms"`
	Processing map[string]Quantiles `json:"processing_latency_ms"`

	RetryRecords int       `json:"retry_records"`
	Lateness     *Lateness `json:"retry_lateness,omitempty"`
	// LatenessIdle is the lateness of retries due after the last first
	// send, when no backlog of first sends competed with them.
	LatenessIdle   *Lateness       `json:"retry_lateness_after_backlog,omitempty"`
	LatenessMetric *LatenessMetric `json:"retry_lateness_metric,omitempty"`

	SimRequests  int64         `json:"sim_requests"`
	SimDecrypted int64         `json:"sim_decrypted"`
	SimStatus    map[int]int64 `json:"sim_status"`
	// SimWait is how long pushes queued for one of the simulator's
	// workers (--sim-workers), in milliseconds.
	SimWait *Quantiles `json:"sim_wait_ms,omitempty"`

	// Ceiling is webpush-go alone over the same events; DispatchLoop the
	// processor's sender (internal/dispatch) alone. Neither touches Kafka.
	Ceiling      *ceilingResult `json:"ceiling,omitempty"`
	Ratio        float64        `json:"ratio_to_ceiling,omitempty"`
	DispatchLoop *ceilingResult `json:"dispatch_loop,omitempty"`
	// Ramp1k is the seconds from the first produce to the 1,000th
	// outcome (all of them, when fewer): how fast a cold processor gets
	// going.
	Ramp1k float64 `json:"ramp_1000_seconds,omitempty"`
	// Peer is BullMQ + web-push on Redis over the same events (--peer);
	// PeerSkipped says why it did not run.
	Peer        *peerResult `json:"peer_bullmq,omitempty"`
	PeerRatio   float64     `json:"ratio_to_peer,omitempty"`
	PeerSkipped string      `json:"peer_skipped,omitempty"`

	// BodiesVerified are the push requests the simulator decrypted
	// (1 in --verify-every); BodiesMismatched those whose plaintext was
	// not the event's payload byte for byte.
	BodiesVerified   int `json:"bodies_verified"`
	BodiesMismatched int `json:"bodies_mismatched"`

	RateLimited *RateLimitFigures `json:"rate_limited,omitempty"`
	RSS         *RSSFigures       `json:"rss,omitempty"`

	Checks   []Check  `json:"checks"`
	Timeline []Sample `json:"timeline"`
}

// Machine is where the figures come from.
type Machine struct {
	NProc     int     `json:"nproc"`
	CPU       string  `json:"cpu"`
	MemoryGiB float64 `json:"memory_gib"`
	Kernel    string  `json:"kernel"`
	Go        string  `json:"go"`
}

// SimSettings is the simulated push service.
type SimSettings struct {
	LatencyMS       float64 `json:"latency_ms"`
	LatencyJitterMS float64 `json:"latency_jitter_ms"`
	RateLimit       float64 `json:"rate_limit,omitempty"`
	Burst           int     `json:"burst,omitempty"`
	PerSecond       bool    `json:"per_second,omitempty"`
	Workers         int     `json:"workers,omitempty"` // per origin; 0 = unlimited
	Fail503         float64 `json:"fail_503,omitempty"`
	VerifyEvery     int     `json:"verify_every"`
}

func simSettings(c pushsim.Config) SimSettings {
	return SimSettings{
		LatencyMS: ms(c.Latency), LatencyJitterMS: ms(c.LatencyJitter),
		RateLimit: c.RateLimit, Burst: c.Burst, PerSecond: c.PerSecond, Workers: c.Workers, Fail503: c.Fail503, VerifyEvery: c.VerifyEvery,
	}
}

// waitQuantiles are the simulator's queue waits (sorted), in milliseconds.
func waitQuantiles(ws []time.Duration) *Quantiles {
	v := make([]float64, len(ws))
	for i, w := range ws {
		v[i] = ms(w)
	}
	q := quantiles(v)
	return &q
}

func simLimit(s SimSettings) float64 { return s.RateLimit }

// Quantiles of a latency, in milliseconds.
type Quantiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// Lateness is how long after its push-due each retry reached the push
// service: simulator arrival time minus push-due.
type Lateness struct {
	Count  int     `json:"count"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
	MinMS  float64 `json:"min_ms"`
	Early  int     `json:"early"`  // arrivals before push-due
	Unsent int     `json:"unsent"` // retry records with no send after them (expired, deferred at the end)
}

// LatenessMetric is the processor's own tierpush_retry_lateness_seconds
// histogram: lateness when the record was taken up, before the send.
type LatenessMetric struct {
	Count      float64 `json:"count"`
	ShareLE50  float64 `json:"share_le_50ms"`
	P99BoundMS float64 `json:"p99_bucket_bound_ms"` // the bucket bound holding p99
	// P99Beyond: p99 is past the last finite bucket, P99BoundMS.
	P99Beyond bool `json:"p99_beyond_last_bucket,omitempty"`
}

// RateLimitFigures are the pacing issue's measures, over its steady
// state: from a third of the offered period to its end.
type RateLimitFigures struct {
	LimitPerSec   float64 `json:"limit_per_sec"`
	FromS         float64 `json:"from_s"`
	ToS           float64 `json:"to_s"`
	Share429      float64 `json:"share_429"`
	GoodputPerSec float64 `json:"goodput_per_sec"`
	Overall429    float64 `json:"overall_share_429"`
}

// RSSFigures are scenario e's: the processor while every event waits.
type RSSFigures struct {
	HoldSeconds float64 `json:"hold_seconds"`
	RSSMaxMB    float64 `json:"rss_max_mb"`  // VmRSS, highest sample while holding
	HeapMaxMB   float64 `json:"heap_max_mb"` // go_memstats_heap_alloc_bytes, highest sample of the run
	HeldMax     int64   `json:"held_max"`    // retry records held in memory until due
	WaitingMin  int64   `json:"waiting_min"` // uncommitted records in retry topics
	WaitingMax  int64   `json:"waiting_max"`
}

// Sample is one second of the timeline; counts are cumulative.
type Sample struct {
	T         float64 `json:"t"`
	Produced  int64   `json:"produced"`
	Outcomes  int64   `json:"outcomes"`
	Requests  int64   `json:"requests"`
	OK        int64   `json:"ok"`
	Throttled int64   `json:"throttled"`
	Failed    int64   `json:"failed"`
	RSSMB     float64 `json:"rss_mb"`
	CPU       float64 `json:"cpu_s"`
	Waiting   int64   `json:"waiting,omitempty"`
	Held      int64   `json:"held,omitempty"`
	HeapMB    float64 `json:"heap_mb,omitempty"` // the processor's go_memstats_heap_alloc_bytes (scenario e)
}

// Check is one target of the issue.
type Check struct {
	Target string `json:"target"`
	Got    string `json:"got"`
	Pass   bool   `json:"pass"`
}

func newResult(sc scenario, b *bench) *Result {
	return &Result{
		Scenario: sc.Name, Name: sc.Name, Title: sc.Title, Date: time.Now().UTC().Truncate(time.Second), Command: b.command,
		Machine: b.machine, LoadBefore: loadAvg(), Events: sc.Events, MaxInFlight: b.cfg.MaxInFlight, Offered: sc.Offered,
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func quantiles(v []float64) Quantiles {
	if len(v) == 0 {
		return Quantiles{}
	}
	slices.Sort(v)
	q := func(p float64) float64 { return v[min(int(math.Ceil(p*float64(len(v))))-1, len(v)-1)] }
	return Quantiles{Count: len(v), P50: q(0.5), P99: q(0.99), Max: v[len(v)-1]}
}

// summarizeOutcomes counts outcomes and takes latency quantiles of the
// delivered events by tier.
func (res *Result) summarizeOutcomes(outs []*outcome) {
	res.Outcomes = make(map[string]int)
	e2e := make(map[string][]float64)
	proc := make(map[string][]float64)
	for _, o := range outs {
		if o == nil {
			continue
		}
		res.Outcomes[o.Outcome+"/"+o.Reason]++
		if o.Outcome != "delivered" {
			continue
		}
		for _, k := range []string{o.Tier, "all"} {
			e2e[k] = append(e2e[k], float64(o.LatencyMS))
			proc[k] = append(proc[k], float64(o.At-o.FirstSeen))
		}
	}
	res.Latency = make(map[string]Quantiles)
	res.Processing = make(map[string]Quantiles)
	for k, v := range e2e {
		res.Latency[k] = quantiles(v)
		res.Processing[k] = quantiles(proc[k])
	}
}

func latenessFigures(late []time.Duration, unsent int) *Lateness {
	if len(late) == 0 && unsent == 0 {
		return nil
	}
	l := &Lateness{Count: len(late), Unsent: unsent}
	if len(late) == 0 {
		return l
	}
	v := make([]float64, len(late))
	for i, d := range late {
		v[i] = ms(d)
		if d < 0 {
			l.Early++
		}
	}
	q := quantiles(v)
	l.P50MS, l.P99MS, l.MaxMS, l.MinMS = q.P50, q.P99, q.Max, v[0]
	return l
}

func latenessFromMetric(before, after promSamples) *LatenessMetric {
	const name = "tierpush_retry_lateness_seconds"
	count := after.sum(name+"_count", nil) - before.sum(name+"_count", nil)
	if count == 0 {
		return nil
	}
	b0, b1 := before.buckets(name), after.buckets(name)
	var les []float64
	for le := range b1 {
		les = append(les, le)
	}
	slices.Sort(les)
	m := &LatenessMetric{Count: count, ShareLE50: (b1[0.05] - b0[0.05]) / count}
	for _, le := range les {
		if math.IsInf(le, 1) {
			m.P99Beyond = true // JSON has no +Inf: keep the last finite bound
			break
		}
		m.P99BoundMS = le * 1000
		if b1[le]-b0[le] >= 0.99*count {
			break
		}
	}
	return m
}

// rateLimitFigures measures the steady state of scenario d like the
// pacing test: from a third of the offered period to its end.
func rateLimitFigures(tl []Sample, offeredFor, limit float64) *RateLimitFigures {
	if len(tl) < 2 {
		return nil
	}
	at := func(t float64) Sample {
		for _, s := range tl {
			if s.T >= t {
				return s
			}
		}
		return tl[len(tl)-1]
	}
	a, b := at(offeredFor/3), at(offeredFor)
	f := &RateLimitFigures{LimitPerSec: limit, FromS: a.T, ToS: b.T}
	if d := b.Requests - a.Requests; d > 0 {
		f.Share429 = float64(b.Throttled-a.Throttled) / float64(d)
	}
	if d := b.T - a.T; d > 0 {
		f.GoodputPerSec = float64(b.OK-a.OK) / d
	}
	last := tl[len(tl)-1]
	if last.Requests > 0 {
		f.Overall429 = float64(last.Throttled) / float64(last.Requests)
	}
	return f
}

// check compares the figures with the targets.
func (res *Result) check() {
	add := func(target, got string, pass bool) {
		res.Checks = append(res.Checks, Check{Target: target, Got: got, Pass: pass})
	}
	total := 0
	for _, n := range res.Outcomes {
		total += n
	}
	if res.RSS == nil {
		got := fmt.Sprintf("%d of %d, %d duplicates", total, res.Events, res.Duplicates)
		if res.Incomplete != "" {
			got += "; " + res.Incomplete
		}
		add("one outcome per event", got, total == res.Events)
	}
	switch res.Scenario {
	case "a":
		add("≥ 4,000 events/s", fmt.Sprintf("%.0f events/s", res.EventsPerSec), res.EventsPerSec >= 4000)
		if res.Ceiling != nil {
			add("≥ 60% of the webpush-go ceiling", fmt.Sprintf("%.0f%% of %.0f events/s", 100*res.Ratio, res.Ceiling.EventsPerSec), res.Ratio >= 0.6)
			add(fmt.Sprintf("≥ %.1f× the loop of %d webpush-go senders", targetLoopRatio, res.Ceiling.Concurrency), fmt.Sprintf("%.2f×", res.Ratio), res.Ratio >= targetLoopRatio)
		}
		if res.Peer != nil {
			add(fmt.Sprintf("≥ %.0f× BullMQ + web-push", targetPeerRatio), fmt.Sprintf("%.2f× of %.0f events/s", res.PeerRatio, res.Peer.EventsPerSec), res.PeerRatio >= targetPeerRatio)
		}
		add(fmt.Sprintf("≤ %.2f processor CPU s per 1,000 events", targetCPUPer1k), fmt.Sprintf("%.3f", res.CPUSecPer1k), res.CPUSecPer1k <= targetCPUPer1k)
		add("≤ 100 allocations per event", fmt.Sprintf("%.0f", res.AllocsPerEvent), res.AllocsPerEvent <= 100)
	case "b":
		add(fmt.Sprintf("≥ 3,000 events/s at 50 ms per push (max-in-flight %d)", res.MaxInFlight), fmt.Sprintf("%.0f events/s", res.EventsPerSec), res.EventsPerSec >= 3000)
	case "f0", "f3":
		if q, ok := res.Latency["tier1"]; ok {
			add("tier-1 p99 < 250 ms from production to delivery", fmt.Sprintf("p99 %.0f ms (p50 %.0f) over %d", q.P99, q.P50, q.Count), q.P99 < 250)
		}
	case "d", "d100", "d3", "dx":
		if f := res.RateLimited; f != nil {
			add("429 share < 5% (steady state)", fmt.Sprintf("%.2f%%", 100*f.Share429), f.Share429 < 0.05)
			add("goodput ≥ 90% of the limit (steady state)", fmt.Sprintf("%.0f/s of %.0f/s", f.GoodputPerSec, f.LimitPerSec), f.GoodputPerSec >= 0.9*f.LimitPerSec)
		}
	case "e":
		if f := res.RSS; f != nil {
			add(fmt.Sprintf("RSS ≤ 256 MB with %d events waiting in retry steps", res.Events),
				fmt.Sprintf("peak %.0f MB (VmHWM); %.0f MB while %d–%d wait", res.PeakRSSMB, f.RSSMaxMB, f.WaitingMin, f.WaitingMax),
				res.PeakRSSMB <= 256 && f.WaitingMin >= int64(res.Events)*99/100)
		}
	}
	if res.BodiesVerified > 0 || res.BodiesMismatched > 0 {
		add("sampled bodies decrypt to the event's payload byte for byte", fmt.Sprintf("%d of %d", res.BodiesVerified-res.BodiesMismatched, res.BodiesVerified), res.BodiesMismatched == 0)
	}
	if l := res.Lateness; l != nil && l.Count > 0 && res.RSS == nil {
		add("retry lateness p99 ≤ 50 ms", fmt.Sprintf("p99 %.1f ms over %d retries", l.P99MS, l.Count), l.P99MS <= 50)
		add("retries never early", fmt.Sprintf("%d early, min %.1f ms", l.Early, l.MinMS), l.Early == 0)
	}
}

func writeResult(dir string, res *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(dir, res.Name+".json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// writeTables prints the Markdown tables of docs/benchmarks.md.
func writeTables(w io.Writer, m Machine, rs []*Result) {
	if len(rs) == 0 {
		return
	}
	writeMachine(w, m, rs)
	fmt.Fprintln(w, "| scenario | events | processor flags | events/s | webpush-go ceiling | ratio | dispatch alone | processor CPU s / 1k events | processor cores | peak RSS MB | allocs / event | broker CPU s / 1k | bench+sim CPU s / 1k |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		eps, ceil, ratio, alone := "–", "–", "–", "–"
		if r.EventsPerSec > 0 {
			eps = fmt.Sprintf("%.0f", r.EventsPerSec)
		}
		if r.Ceiling != nil {
			ceil, ratio = fmt.Sprintf("%.0f", r.Ceiling.EventsPerSec), fmt.Sprintf("%.0f%%", 100*r.Ratio)
		}
		if r.DispatchLoop != nil {
			alone = fmt.Sprintf("%.0f", r.DispatchLoop.EventsPerSec)
		}
		flags := strings.Join(append(slices.Clone(r.ProcessorEnv), r.ProcessorArgs...), " ")
		fmt.Fprintf(w, "| %s: %s | %d | `%s` | %s | %s | %s | %s | %.3f | %.2f | %.0f | %.0f | %.3f | %.3f |\n",
			r.Name, r.Title, r.Events, flags, eps, ceil, ratio, alone, r.CPUSecPer1k, r.CPUCores, r.PeakRSSMB, r.AllocsPerEvent, r.BrokerCPUSecPer1k, r.BenchCPUSecPer1k)
	}
	fmt.Fprintln(w)
	writeRatios(w, rs)
	fmt.Fprintln(w, "| scenario | e2e p50 / p99 ms, tier1 | tier2 | tier3 | processing p50 / p99 ms | retry lateness p50 / p99 / max ms (count) | after the backlog | early | processor's lateness histogram: ≤ 50 ms |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		lat := func(m map[string]Quantiles, k string) string {
			q, ok := m[k]
			if !ok {
				return "–"
			}
			return fmt.Sprintf("%.0f / %.0f", q.P50, q.P99)
		}
		fmtLate := func(l *Lateness) string {
			if l == nil || l.Count == 0 {
				return "–"
			}
			return fmt.Sprintf("%.1f / %.1f / %.1f (%d)", l.P50MS, l.P99MS, l.MaxMS, l.Count)
		}
		late, idle, early, hist := fmtLate(r.Lateness), fmtLate(r.LatenessIdle), "–", "–"
		if l := r.Lateness; l != nil && l.Count > 0 {
			early = strconv.Itoa(l.Early)
		}
		if h := r.LatenessMetric; h != nil {
			hist = fmt.Sprintf("%.2f%% of %.0f", 100*h.ShareLE50, h.Count)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Name, lat(r.Latency, "tier1"), lat(r.Latency, "tier2"), lat(r.Latency, "tier3"),
			lat(r.Processing, "all"), late, idle, early, hist)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | target | measured | |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range rs {
		for _, c := range r.Checks {
			mark := "✅"
			if !c.Pass {
				mark = "❌"
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.Name, c.Target, c.Got, mark)
		}
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		if f := r.RateLimited; f != nil {
			fmt.Fprintf(w, "Scenario %s: steady state %.0f–%.0f s: 429 share %.2f%%, goodput %.0f/s of %.0f/s allowed; overall 429 share %.2f%%.\n",
				r.Name, f.FromS, f.ToS, 100*f.Share429, f.GoodputPerSec, f.LimitPerSec, 100*f.Overall429)
		}
		if f := r.RSS; f != nil {
			fmt.Fprintf(w, "Scenario %s: over %.0f s with %d–%d events in retry topics (%d at most held in memory until due): RSS at most %.0f MB, VmHWM %.0f MB; Go heap (heap_alloc) at most %.0f MB.\n",
				r.Name, f.HoldSeconds, f.WaitingMin, f.WaitingMax, f.HeldMax, f.RSSMaxMB, r.PeakRSSMB, f.HeapMaxMB)
		}
		fmt.Fprintf(w, "Scenario %s outcomes: %s; simulator: %d requests, %d decrypted and verified, status %v.\n",
			r.Name, fmtOutcomes(r.Outcomes), r.SimRequests, r.SimDecrypted, r.SimStatus)
	}
}

// writeMachine names the machine and the load before each run.
func writeMachine(w io.Writer, m Machine, rs []*Result) {
	fmt.Fprintf(w, "\nMachine: %d CPUs (%s), %.1f GiB, Linux %s, %s. Load before each scenario: %s.\n\n", m.NProc, m.CPU, m.MemoryGiB, m.Kernel, m.Go, loads(rs))
}

func loads(rs []*Result) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.Name+" "+r.LoadBefore)
	}
	return strings.Join(s, "; ")
}

func fmtOutcomes(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var s []string
	for _, k := range keys {
		s = append(s, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// writeChart draws docs/img/bench-<scenario>.svg from the timeline.
func writeChart(dir string, r *Result) error {
	if len(r.Timeline) < 2 {
		return nil
	}
	rate := func(f func(Sample) float64) []benchplot.Point {
		var pts []benchplot.Point
		for i := 1; i < len(r.Timeline); i++ {
			a, b := r.Timeline[i-1], r.Timeline[i]
			if dt := b.T - a.T; dt > 0 {
				pts = append(pts, benchplot.Point{X: b.T, Y: (f(b) - f(a)) / dt})
			}
		}
		return pts
	}
	level := func(f func(Sample) float64) []benchplot.Point {
		var pts []benchplot.Point
		for _, s := range r.Timeline {
			pts = append(pts, benchplot.Point{X: s.T, Y: f(s)})
		}
		return pts
	}
	answers := []benchplot.Series{{Name: "201 delivered", Color: "#1f77b4", Points: rate(func(s Sample) float64 { return float64(s.OK) })}}
	last := r.Timeline[len(r.Timeline)-1]
	if last.Throttled > 0 {
		answers = append(answers, benchplot.Series{Name: "429", Color: "#ff7f0e", Points: rate(func(s Sample) float64 { return float64(s.Throttled) })})
	}
	if last.Failed > 0 {
		answers = append(answers, benchplot.Series{Name: "5xx", Color: "#d62728", Points: rate(func(s Sample) float64 { return float64(s.Failed) })})
	}
	if c := r.Ceiling; c != nil {
		answers = append(answers, benchplot.Series{Name: "webpush-go ceiling", Color: "#2ca02c",
			Points: []benchplot.Point{{X: 0, Y: c.EventsPerSec}, {X: last.T, Y: c.EventsPerSec}}})
	}
	panels := []benchplot.Panel{{Title: "push service answers per second (simulator)", YLabel: "per second", Series: answers}}
	if r.RSS != nil {
		panels = append(panels, benchplot.Panel{Title: "events waiting in retry steps", YLabel: "events", Series: []benchplot.Series{
			{Name: "in retry topics", Color: "#9467bd", Points: level(func(s Sample) float64 { return float64(s.Waiting) })},
			{Name: "held in memory", Color: "#8c564b", Points: level(func(s Sample) float64 { return float64(s.Held) })}}})
	}
	mem := []benchplot.Series{{Name: "RSS", Color: "#9467bd", Points: level(func(s Sample) float64 { return s.RSSMB })}}
	if r.RSS != nil {
		mem = append(mem, benchplot.Series{Name: "Go heap alloc", Color: "#e377c2", Points: level(func(s Sample) float64 { return s.HeapMB })})
	}
	panels = append(panels,
		benchplot.Panel{Title: "processor memory", YLabel: "MB", Series: mem},
		benchplot.Panel{Title: "processor CPU", YLabel: "cores", Series: []benchplot.Series{
			{Name: "user+system", Color: "#17becf", Points: rate(func(s Sample) float64 { return s.CPU })}}},
	)
	title := r.Title
	if len(r.ProcessorArgs) > 2 || len(r.ProcessorEnv) > 0 {
		title += " (" + strings.Join(append(slices.Clone(r.ProcessorEnv), r.ProcessorArgs...), " ") + ")"
	}
	c := benchplot.Chart{Title: fmt.Sprintf("Scenario %s: %s", r.Name, title), XLabel: "seconds since the first produce", Panels: panels}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "bench-"+r.Name+".svg"))
	if err != nil {
		return fmt.Errorf("write chart: %w", err)
	}
	if err := c.WriteSVG(f); err != nil {
		f.Close()
		return fmt.Errorf("write chart: %w", err)
	}
	return f.Close()
}

func readMachine() Machine {
	m := Machine{NProc: runtime.NumCPU(), Go: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64); err == nil {
					m.MemoryGiB = math.Round(kb/(1<<20)*10) / 10
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// writeRatios prints, for the scenarios with a ceiling, tierpush against
// the webpush-go-only loop and the BullMQ peer measured in the same run.
func writeRatios(w io.Writer, rs []*Result) {
	var with []*Result
	for _, r := range rs {
		if r.Ceiling != nil {
			with = append(with, r)
		}
	}
	if len(with) == 0 {
		return
	}
	fmt.Fprintln(w, "| scenario | tierpush events/s | webpush-go loop events/s (senders) | tierpush / webpush-go | BullMQ + web-push events/s | tierpush / BullMQ | processor CPU s / 1k | allocs / event | first 1,000 outcomes |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range with {
		peer, pratio := "skipped", "–"
		if r.Peer != nil {
			peer, pratio = fmt.Sprintf("%.0f", r.Peer.EventsPerSec), fmt.Sprintf("%.2f×", r.PeerRatio)
		}
		fmt.Fprintf(w, "| %s | %.0f | %.0f (%d) | %.2f× | %s | %s | %.3f | %.0f | %.2f s |\n", r.Name, r.EventsPerSec, r.Ceiling.EventsPerSec,
			r.Ceiling.Concurrency, r.Ratio, peer, pratio, r.CPUSecPer1k, r.AllocsPerEvent, r.Ramp1k)
	}
	for _, r := range with {
		if r.PeerSkipped != "" {
			fmt.Fprintf(w, "\nScenario %s: the BullMQ peer was skipped: %s.\n", r.Name, r.PeerSkipped)
		}
	}
	fmt.Fprintln(w)
}

// checkBodies compares the plaintext of every push request the simulator
// decrypted with the payload of the request's event.
func (res *Result) checkBodies(ds []pushsim.Delivery, evs []benchEvent, index map[string]int) {
	for _, d := range ds {
		if !d.Verified {
			continue
		}
		res.BodiesVerified++
		i, ok := index[d.SubID]
		if !ok || i >= len(evs) || !bytes.Equal(d.Payload, evs[i].payload) {
			res.BodiesMismatched++
		}
	}
}
