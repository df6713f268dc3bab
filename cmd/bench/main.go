// Command bench measures tierpush end to end on one machine: it starts the
// embedded broker (`processor broker`) and the processor (`processor run`) as
// child processes, serves the push simulator in its own process, produces N
// events, reads push.outcomes until every event has its outcome, and reports
// throughput, CPU per 1,000 events, peak RSS, end-to-end latency per tier,
// retry lateness and allocations per event, with a webpush-go-only ceiling
// for comparison. It writes bench/results/<scenario>.json, a Markdown table
// on stdout and SVG charts.
//
// It is a measuring tool, not part of the pipeline: it owns every process it
// starts and stops them before it returns.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tierpush/tierpush/internal/configfile"
	"github.com/tierpush/tierpush/tiers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// config is the bench's configuration, from flags.
type config struct {
	Events      int
	Scenarios   []string
	Brokers     []string
	MaxInFlight int
	Out         string
	Charts      string
	Processor   string
	Profile     string
	// ProfileSeconds is how long the CPU profile of --profile lasts, from
	// the first produce.
	ProfileSeconds int
	// Runs is how many times each scenario runs; with more than one the
	// tables give each figure's median beside every run's value.
	Runs    int
	DEvents int
	// DX shapes scenario dx, a rate-limited origin of the user's own.
	DX          originShape
	RSSEvents   int
	RSSHold     time.Duration
	VerifyEvery int
	// SimWorkers gives every scenario's push service that many workers
	// per origin, queueing past them instead of refusing; 0 = unlimited.
	SimWorkers int
	// PushTLS serves the simulator over HTTPS (HTTP/2), as every real
	// push service is.
	PushTLS bool
	// CeilingSenders is how many sends at once the webpush-go-only loop
	// and the dispatch-alone loop make.
	CeilingSenders int
	// Peer names the peer stack run next to the ceiling ("bullmq"), or
	// "none"; PeerDir caches its npm packages.
	Peer    string
	PeerDir string
	Timeout time.Duration
	Quiet   bool
	// Keep leaves the run's directory (processor and broker logs, broker
	// data) in place and names it.
	Keep bool
	// ProcessorFlags and ProcessorEnv are added to `processor run`'s
	// arguments and environment (and recorded in the results).
	ProcessorFlags []string
	ProcessorEnv   []string
	// Tag names a variant: results and charts go to <scenario>-<tag>.
	Tag string
	// MD is a Markdown file with a section of this run's tables between
	// `<!-- bench:MDSection -->` markers (docs/benchmarks.md), rewritten
	// after the run.
	MD, MDSection string
	// Config is the processor's --config file, given to `processor broker`
	// and `processor run`; Policy are its ladders (the defaults without
	// one), which tell the bench the retry topics.
	Config string
	Policy tiers.Policy
}

func defaultConfig() config {
	return config{
		Events:         100_000,
		Scenarios:      []string{"all"},
		MaxInFlight:    768,
		Out:            "bench/results",
		Charts:         "docs/img",
		DEvents:        30_000,
		DX:             originShape{Limit: 200, Latency: 100 * time.Millisecond, Processors: 1},
		RSSHold:        70 * time.Second,
		VerifyEvery:    50,
		PushTLS:        true,
		CeilingSenders: 64,
		Peer:           "bullmq",
		PeerDir:        ".cache/bench-peer",
		Timeout:        6 * time.Minute,
		Policy:         tiers.DefaultPolicy(),
		ProfileSeconds: 10,
		Runs:           1,
	}
}

func (c *config) register(fs *flag.FlagSet) {
	fs.IntVar(&c.Events, "events", c.Events, "events per scenario (a, b, c)")
	fs.Func("scenario", "scenarios to run, comma separated: a (all succeed), b (50 ms per push), c (ledger failure mix), d (rate-limited origin), d100 (100 req/s at 20 ms), d3 (3 processors sharing 300 req/s), e (RSS with every event waiting in retry steps), or all (default all); also dx, a rate-limited origin shaped by --dx-limit, --dx-latency and --dx-processors, and f0 and f3, 300 tier-1 events with or 3 s after 12,000 tier-3 events to a 400 req/s origin", func(v string) error {
		c.Scenarios = strings.Split(v, ",")
		return nil
	})
	fs.Func("brokers", "Kafka seed brokers of an existing cluster, comma separated (default: start `processor broker` per scenario)", func(v string) error {
		c.Brokers = strings.Split(v, ",")
		return nil
	})
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "the processor's --max-in-flight, and the ceiling loop's concurrency")
	fs.StringVar(&c.Out, "out", c.Out, "directory of the JSON results")
	fs.StringVar(&c.Charts, "charts", c.Charts, "directory of the SVG charts (empty: none)")
	fs.StringVar(&c.Processor, "processor", c.Processor, "processor binary (default: go build ./cmd/processor into a temp dir)")
	fs.StringVar(&c.Profile, "profile", c.Profile, "directory for CPU and heap profiles of the processor (adds profiling overhead; empty: none)")
	fs.IntVar(&c.ProfileSeconds, "profile-seconds", c.ProfileSeconds, "length of the CPU profile of --profile, from the first produce")
	fs.IntVar(&c.Runs, "runs", c.Runs, "runs of each scenario, one after another; with more than one the tables give each figure's median and every run's value")
	fs.IntVar(&c.DEvents, "d-events", c.DEvents, "events of scenario d, offered at 2,000/s")
	fs.Float64Var(&c.DX.Limit, "dx-limit", c.DX.Limit, "scenario dx: the origin's limit, requests/s (one second of burst, 429 with Retry-After: 1 above it)")
	fs.DurationVar(&c.DX.Latency, "dx-latency", c.DX.Latency, "scenario dx: time per push (±20% jitter)")
	fs.IntVar(&c.DX.Processors, "dx-processors", c.DX.Processors, "scenario dx: processors in the group, sharing the origin's limit")
	fs.IntVar(&c.DX.Burst, "dx-burst", c.DX.Burst, "scenario dx: the origin's token bucket, in requests (0: a second of the limit)")
	fs.BoolVar(&c.DX.PerSecond, "dx-per-second", c.DX.PerSecond, "scenario dx: count the origin's limit per whole second (a fixed window) instead of by a token bucket")
	fs.IntVar(&c.RSSEvents, "rss-events", c.RSSEvents, "events of scenario e (default: --events)")
	fs.DurationVar(&c.RSSHold, "rss-hold", c.RSSHold, "how long scenario e samples RSS once every event waits in a retry step")
	fs.IntVar(&c.VerifyEvery, "verify-every", c.VerifyEvery, "the simulator decrypts and verifies 1 request in N")
	fs.IntVar(&c.SimWorkers, "sim-workers", c.SimWorkers, "workers per origin of the push simulator in every scenario, each holding one push for its latency; the rest queue for one, as a service that slows down instead of refusing (0 = unlimited)")
	fs.BoolVar(&c.PushTLS, "push-tls", c.PushTLS, "serve the push simulator over HTTPS with HTTP/2, as real push services are (false: plain HTTP/1.1)")
	fs.IntVar(&c.CeilingSenders, "ceiling-senders", c.CeilingSenders, "sends at once in the webpush-go-only ceiling loop, the dispatch-alone loop and the peer's worker")
	fs.StringVar(&c.Peer, "peer", c.Peer, "peer stack measured next to the ceiling in scenarios a and b: bullmq (Redis from Debian, bullmq and web-push from npm, installed when missing; skipped with a message when they cannot be) or none")
	fs.StringVar(&c.PeerDir, "peer-dir", c.PeerDir, "directory caching the peer's npm packages")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "bound on the wait for one scenario's outcomes; past it the scenario reports what it reached")
	fs.Func("processor-flags", "extra flags for `processor run`, space separated (e.g. \"--pacing=false\")", func(v string) error {
		c.ProcessorFlags = strings.Fields(v)
		return nil
	})
	fs.BoolVar(&c.Quiet, "quiet", c.Quiet, "no progress bar")
	fs.BoolVar(&c.Keep, "keep", c.Keep, "keep the run's directory (processor and broker logs, broker data) and print its path; with --processor-flags \"--log-level info\" the processor logs its pacing events")
	fs.Func("processor-env", "extra environment for `processor run`, KEY=VALUE, repeatable (e.g. GOMEMLIMIT=200MiB)", func(v string) error {
		if !strings.Contains(v, "=") {
			return errors.New("want KEY=VALUE")
		}
		c.ProcessorEnv = append(c.ProcessorEnv, v)
		return nil
	})
	fs.StringVar(&c.Tag, "tag", c.Tag, "name of a variant run: results and charts are written as <scenario>-<tag>")
	fs.StringVar(&c.MD, "md", c.MD, "Markdown file whose section --md-section gets this run's tables (docs/benchmarks.md)")
	fs.StringVar(&c.MDSection, "md-section", c.MDSection, "the section of --md, between <!-- bench:NAME --> and <!-- /bench:NAME -->")
	fs.StringVar(&c.Config, "config", c.Config, "the processor's --config YAML (ladders, pacing, flags), for `processor broker` and `processor run`")
}

var allScenarios = []string{"a", "b", "c", "d", "d100", "d3", "e"}

// extraScenarios run only when named: dx (a user's origin), f0 and f3
// (tier 1 behind a flood).
var extraScenarios = []string{"dx", "f0", "f3"}

// Validate names the flag at fault.
func (c *config) Validate() error {
	var errs []error
	if c.Events < 1 {
		errs = append(errs, fmt.Errorf("--events: %d, want at least 1", c.Events))
	}
	if c.DEvents < 1 {
		errs = append(errs, fmt.Errorf("--d-events: %d, want at least 1", c.DEvents))
	}
	if c.DX.Limit < 1 || c.DX.Limit > 100_000 {
		errs = append(errs, fmt.Errorf("--dx-limit: %g, want 1..100000 requests/s", c.DX.Limit))
	}
	if c.DX.Latency < 0 || c.DX.Latency > 10*time.Second {
		errs = append(errs, fmt.Errorf("--dx-latency: %s, want 0..10s", c.DX.Latency))
	}
	if c.DX.Burst < 0 {
		errs = append(errs, fmt.Errorf("--dx-burst: %d, want 0 or more requests", c.DX.Burst))
	}
	if c.DX.Processors < 1 || c.DX.Processors > 16 {
		errs = append(errs, fmt.Errorf("--dx-processors: %d, want 1..16", c.DX.Processors))
	}
	if c.RSSEvents < 0 {
		errs = append(errs, fmt.Errorf("--rss-events: %d, want at least 0", c.RSSEvents))
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 100_000 {
		errs = append(errs, fmt.Errorf("--max-in-flight: %d, want 1..100000", c.MaxInFlight))
	}
	if c.CeilingSenders < 1 || c.CeilingSenders > 100_000 {
		errs = append(errs, fmt.Errorf("--ceiling-senders: %d, want 1..100000", c.CeilingSenders))
	}
	if c.Peer != "bullmq" && c.Peer != "none" {
		errs = append(errs, fmt.Errorf("--peer: %q, want bullmq or none", c.Peer))
	}
	if c.ProfileSeconds < 1 || c.ProfileSeconds > 600 {
		errs = append(errs, fmt.Errorf("--profile-seconds: %d, want 1..600", c.ProfileSeconds))
	}
	if c.Runs < 1 || c.Runs > 20 {
		errs = append(errs, fmt.Errorf("--runs: %d, want 1..20", c.Runs))
	}
	if c.VerifyEvery < 1 {
		errs = append(errs, fmt.Errorf("--verify-every: %d, want at least 1", c.VerifyEvery))
	}
	if c.SimWorkers < 0 || c.SimWorkers > 100_000 {
		errs = append(errs, fmt.Errorf("--sim-workers: %d, want 0..100000", c.SimWorkers))
	}
	if c.Timeout < time.Minute {
		errs = append(errs, fmt.Errorf("--timeout: %s, want at least 1m", c.Timeout))
	}
	if strings.ContainsAny(c.Tag, "/\\ ") {
		errs = append(errs, fmt.Errorf("--tag: %q, want a name without slashes or spaces", c.Tag))
	}
	if c.Out == "" {
		errs = append(errs, errors.New("--out: empty"))
	}
	var names []string
	for _, s := range c.Scenarios {
		s = strings.TrimSpace(s)
		switch {
		case s == "all":
			names = append(names, allScenarios...)
		case slices.Contains(allScenarios, s) || slices.Contains(extraScenarios, s):
			names = append(names, s)
		default:
			errs = append(errs, fmt.Errorf("--scenario: %q, want a, b, c, d, d100, d3, dx, e, f0, f3 or all", s))
		}
	}
	slices.Sort(names)
	c.Scenarios = slices.Compact(names)
	if c.RSSEvents == 0 {
		c.RSSEvents = c.Events
	}
	return errors.Join(errs...)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.MD != "" {
		// Check the section's markers before a run of minutes.
		if err := writeSection(cfg.MD, cfg.MDSection, nil); err != nil && !errors.Is(err, errNoChange) {
			return err
		}
	}
	if cfg.Config != "" {
		f, err := configfile.Read(cfg.Config)
		if err != nil {
			return fmt.Errorf("--config %s: %w", cfg.Config, err)
		}
		cfg.Policy = f.Tiers
	}
	b, err := newBench(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer b.Close()
	b.command = "go run ./cmd/bench " + strings.Join(args, " ")
	var results []*Result
	var groups [][]*Result // the runs of each scenario
	for _, name := range cfg.Scenarios {
		sc := scenarioNamed(name, cfg)
		var runs []*Result
		for k := 1; k <= cfg.Runs; k++ {
			res, err := b.runScenario(ctx, sc, k)
			if err != nil {
				return fmt.Errorf("scenario %s: %w", name, err)
			}
			if err := writeResult(cfg.Out, res); err != nil {
				return err
			}
			runs = append(runs, res)
			if cfg.Charts != "" {
				if err := writeChart(cfg.Charts, res); err != nil {
					return err
				}
			}
		}
		results = append(results, runs...)
		groups = append(groups, runs)
	}
	writeTables(stdout, b.machine, results)
	if cfg.Runs > 1 {
		writeMedians(stdout, groups)
	}
	if cfg.MD != "" {
		var md bytes.Buffer
		fmt.Fprintf(&md, "`%s` on %s, commit %s:\n", b.command, time.Now().UTC().Format("2006-01-02"), commitOf())
		if cfg.Runs > 1 {
			// Every run's tables are in bench/results; the section keeps
			// the medians.
			writeMachine(&md, b.machine, results)
			writeMedians(&md, groups)
		} else {
			writeTables(&md, b.machine, results)
		}
		return writeSection(cfg.MD, cfg.MDSection, md.Bytes())
	}
	return nil
}

// commitOf is the checkout's commit, or "unknown" outside git.
func commitOf() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
