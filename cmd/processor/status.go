package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// runStatus is `processor status`: a running processor's pacing and lag,
// read from its /metrics.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("processor status", stderr)
	addr := fs.String("http-addr", "127.0.0.1:9464", "the running processor's --http-addr (host:port or URL)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	url := *addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(url, "/")+"/metrics", nil)
	if err != nil {
		return usageError(fmt.Errorf("--http-addr: %w", err))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("read %s: %w", req.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("read %s: %s", req.URL, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("parse %s: %w", req.URL, err)
	}
	fmt.Fprint(stdout, renderProcessorStatus(mfs))
	return nil
}

// series maps a label's value to a gauge's value for one metric family.
func series(mfs map[string]*dto.MetricFamily, name, label string) map[string]float64 {
	return seriesWhere(mfs, name, label, "", "")
}

// seriesWhere is series over the samples whose label only is value (all
// when only is empty).
func seriesWhere(mfs map[string]*dto.MetricFamily, name, label, only, value string) map[string]float64 {
	out := make(map[string]float64)
	mf := mfs[name]
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		key, keep := "", only == ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label {
				key = lp.GetValue()
			}
			if lp.GetName() == only && lp.GetValue() == value {
				keep = true
			}
		}
		if !keep {
			continue
		}
		switch {
		case m.Gauge != nil:
			out[key] += m.GetGauge().GetValue()
		case m.Counter != nil:
			out[key] += m.GetCounter().GetValue()
		}
	}
	return out
}

func renderProcessorStatus(mfs map[string]*dto.MetricFamily) string {
	var b strings.Builder
	limit := series(mfs, "tierpush_pacing_limit", "origin")
	share := series(mfs, "tierpush_pacing_429_share", "origin")
	state := series(mfs, "tierpush_pacing_breaker_state", "origin")
	flight := series(mfs, "tierpush_pacing_in_flight", "origin")
	// tierpush_pacing_rate: this processor's rate (peers="false") and what
	// the others sharing the origin last reported (peers="true").
	own := seriesWhere(mfs, "tierpush_pacing_rate", "origin", "peers", "false")
	all := series(mfs, "tierpush_pacing_rate", "origin")
	total := series(mfs, "tierpush_in_flight", "")
	fmt.Fprintf(&b, "in flight: %.0f\n\n", total[""])
	fmt.Fprintf(&b, "%-40s %8s %10s %7s %9s %10s %9s\n", "push service", "rate/s", "all rate/s", "limit", "429 share", "breaker", "in flight")
	for _, o := range sortedKeys(limit) {
		br := "closed"
		switch state[o] {
		case 1:
			br = "half-open"
		case 2:
			br = "open"
		}
		fmt.Fprintf(&b, "%-40s %8.1f %10.1f %7.0f %8.1f%% %10s %9.0f\n", o, own[o], all[o], limit[o], 100*share[o], br, flight[o])
	}
	due, notDue := map[string]float64{}, map[string]float64{}
	if mf := mfs["tierpush_consumer_lag"]; mf != nil {
		for _, m := range mf.GetMetric() {
			var topic string
			isDue := true
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "topic":
					topic = lp.GetValue()
				case "due":
					isDue = lp.GetValue() == "true"
				}
			}
			if isDue {
				due[topic] += m.GetGauge().GetValue()
			} else {
				notDue[topic] += m.GetGauge().GetValue()
			}
		}
	}
	fmt.Fprintf(&b, "\n%-40s %10s %14s\n", "topic", "lag (due)", "held (not due)")
	for _, t := range sortedKeys(due) {
		fmt.Fprintf(&b, "%-40s %10.0f %14.0f\n", t, due[t], notDue[t])
	}
	// Apps whose key a push service refused (401/403) since the start: a
	// subscription made with another key, or a key rotated too early.
	if rejected := series(mfs, "tierpush_vapid_rejected_total", "app"); len(rejected) > 0 {
		fmt.Fprintf(&b, "\n%-40s %14s\n", "app (VAPID identity)", "key refused")
		for _, a := range sortedKeys(rejected) {
			fmt.Fprintf(&b, "%-40s %14.0f\n", a, rejected[a])
		}
	}
	return b.String()
}

func sortedKeys(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
