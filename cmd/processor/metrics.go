package main

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/pipeline"
)

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// metricsHandler serves the processor's counters in the Prometheus text
// format.
func metricsHandler(p *pipeline.Processor) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s := p.Stats().Snapshot()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprintf(w, "# TYPE tierpush_outcomes_total counter\n")
		fmt.Fprintf(w, "tierpush_outcomes_total{outcome=\"delivered\"} %d\n", s.Delivered)
		fmt.Fprintf(w, "tierpush_outcomes_total{outcome=\"gone\"} %d\n", s.Gone)
		fmt.Fprintf(w, "# TYPE tierpush_dlq_total counter\n")
		for _, r := range pipeline.SortedKeys(s.DLQ) {
			fmt.Fprintf(w, "tierpush_dlq_total{reason=%q} %d\n", r, s.DLQ[r])
		}
		fmt.Fprintf(w, "# TYPE tierpush_retries_total counter\n")
		for _, t := range pipeline.SortedKeys(s.Retries) {
			fmt.Fprintf(w, "tierpush_retries_total{topic=%q} %d\n", t, s.Retries[t])
		}
		fmt.Fprintf(w, "# TYPE tierpush_sends_total counter\n")
		for _, o := range pipeline.SortedKeys(s.Origins) {
			for st, n := range s.Origins[o].Status {
				fmt.Fprintf(w, "tierpush_sends_total{origin=%q,status=%q} %d\n", o, strconv.Itoa(st), n)
			}
			fmt.Fprintf(w, "tierpush_sends_total{origin=%q,status=\"error\"} %d\n", o, s.Origins[o].Errors)
		}
		fmt.Fprintf(w, "# TYPE tierpush_pacing_limit gauge\n")
		for _, l := range p.Pacer().Lanes() {
			fmt.Fprintf(w, "tierpush_pacing_limit{origin=%q} %d\n", l.Origin, l.Limit)
			fmt.Fprintf(w, "tierpush_pacing_429_share{origin=%q} %g\n", l.Origin, l.Rate429)
			fmt.Fprintf(w, "tierpush_pacing_breaker_open{origin=%q} %d\n", l.Origin, b2i(l.Breaker != pacing.Closed))
		}
	})
}
