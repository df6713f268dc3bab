package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// The targets of scenario a against the alternatives, each measured in one
// run beside the others on the same cores.
const (
	targetLoopRatio = 1.5  // × the loop of webpush-go senders
	targetPeerRatio = 7.0  // × BullMQ + web-push
	targetCPUPer1k  = 0.15 // processor CPU s per 1,000 events
)

// writeMedians prints, for the scenarios with a ceiling run more than once
// (--runs), each figure's median in bold and every run's value in run
// order: the ratios are taken within each run, where the three stacks
// shared the machine's load, and their medians then. The targets are
// judged on the medians.
func writeMedians(w io.Writer, groups [][]*Result) {
	var with [][]*Result
	for _, g := range groups {
		if len(g) > 1 && g[0].Ceiling != nil {
			with = append(with, g)
		}
	}
	if len(with) == 0 {
		return
	}
	fmt.Fprintf(w, "Median of %d runs (every run's value in brackets, in run order):\n\n", len(with[0]))
	fmt.Fprintln(w, "| scenario | tierpush events/s | webpush-go loop events/s | tierpush / webpush-go | BullMQ + web-push events/s | tierpush / BullMQ | processor CPU s / 1k | allocs / event |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, g := range with {
		col := func(format string, f func(*Result) (float64, bool)) string {
			var vs []float64
			var each []string
			for _, r := range g {
				v, ok := f(r)
				if !ok {
					each = append(each, "–")
					continue
				}
				vs = append(vs, v)
				each = append(each, fmt.Sprintf(format, v))
			}
			if len(vs) == 0 {
				return "–"
			}
			return fmt.Sprintf("**"+format+"** (%s)", median(vs), strings.Join(each, ", "))
		}
		peer := func(f func(*Result) float64) func(*Result) (float64, bool) {
			return func(r *Result) (float64, bool) {
				if r.Peer == nil {
					return 0, false
				}
				return f(r), true
			}
		}
		always := func(f func(*Result) float64) func(*Result) (float64, bool) {
			return func(r *Result) (float64, bool) { return f(r), true }
		}
		fmt.Fprintf(w, "| %s (%d events, %d senders) | %s | %s | %s | %s | %s | %s | %s |\n", g[0].Scenario, g[0].Events, g[0].Ceiling.Concurrency,
			col("%.0f", always(func(r *Result) float64 { return r.EventsPerSec })),
			col("%.0f", always(func(r *Result) float64 { return r.Ceiling.EventsPerSec })),
			col("%.2f×", always(func(r *Result) float64 { return r.Ratio })),
			col("%.0f", peer(func(r *Result) float64 { return r.Peer.EventsPerSec })),
			col("%.2f×", peer(func(r *Result) float64 { return r.PeerRatio })),
			col("%.3f", always(func(r *Result) float64 { return r.CPUSecPer1k })),
			col("%.0f", always(func(r *Result) float64 { return r.AllocsPerEvent })))
	}
	fmt.Fprintln(w)
	for _, g := range with {
		var verified, mismatched, outcomes, events int
		var dups int64
		var loads []string
		for _, r := range g {
			verified += r.BodiesVerified
			mismatched += r.BodiesMismatched
			for _, n := range r.Outcomes {
				outcomes += n
			}
			events += r.Events
			dups += r.Duplicates
			loads = append(loads, strings.Fields(r.LoadBefore + " ?")[0])
		}
		fmt.Fprintf(w, "Scenario %s: load (1 min) before each run %s; %d of %d events reached one outcome, %d duplicates; %d of %d sampled bodies decrypted to their payload byte for byte.\n\n",
			g[0].Scenario, strings.Join(loads, ", "), outcomes, events, dups, verified-mismatched, verified)
		if g[0].Scenario != "a" {
			continue
		}
		ratios, cpus, peers := make([]float64, 0, len(g)), make([]float64, 0, len(g)), []float64(nil)
		for _, r := range g {
			ratios, cpus = append(ratios, r.Ratio), append(cpus, r.CPUSecPer1k)
			if r.Peer != nil {
				peers = append(peers, r.PeerRatio)
			}
		}
		judge := func(target string, got float64, format string, pass bool) {
			mark := "✅"
			if !pass {
				mark = "❌"
			}
			fmt.Fprintf(w, "- %s: median "+format+" %s\n", target, got, mark)
		}
		judge(fmt.Sprintf("≥ %.1f× the loop", targetLoopRatio), median(ratios), "%.2f×", median(ratios) >= targetLoopRatio)
		if len(peers) > 0 {
			judge(fmt.Sprintf("≥ %.0f× BullMQ + web-push", targetPeerRatio), median(peers), "%.2f×", median(peers) >= targetPeerRatio)
		}
		judge(fmt.Sprintf("≤ %.2f processor CPU s per 1,000 events", targetCPUPer1k), median(cpus), "%.3f", median(cpus) <= targetCPUPer1k)
		fmt.Fprintln(w)
	}
}

// median is the middle value of vs, or the mean of the two middle ones.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
