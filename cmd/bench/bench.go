package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

type vapidKeys struct{ pub, priv, subject string }

// bench owns the temp directory, the processor binary and every process of
// a run.
type bench struct {
	cfg     config
	stderr  io.Writer
	tty     bool
	tmp     string
	bin     string
	vapid   vapidKeys
	machine Machine
	command string
}

func newBench(ctx context.Context, cfg config, stderr io.Writer) (*bench, error) {
	tmp, err := os.MkdirTemp("", "tierpush-bench-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	b := &bench{cfg: cfg, stderr: stderr, tmp: tmp, bin: cfg.Processor, machine: readMachine()}
	if f, ok := stderr.(*os.File); ok && !cfg.Quiet {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			b.tty = true
		}
	}
	if b.bin == "" {
		b.bin = filepath.Join(tmp, "processor")
		fmt.Fprintln(stderr, "building ./cmd/processor")
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "./cmd/processor")
		cmd.Stdout, cmd.Stderr = stderr, stderr
		if err := cmd.Run(); err != nil {
			b.Close()
			return nil, fmt.Errorf("build the processor: %w", err)
		}
	}
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("generate vapid keys: %w", err)
	}
	b.vapid = vapidKeys{pub: pub, priv: priv, subject: "mailto:bench@tierpush.invalid"}
	return b, nil
}

// Close removes the temp directory (broker data, logs, the binary), or
// with --keep names it.
func (b *bench) Close() {
	if b.cfg.Keep {
		fmt.Fprintf(b.stderr, "kept the run's logs and broker data in %s\n", b.tmp)
		return
	}
	os.RemoveAll(b.tmp)
}

func (b *bench) logf(format string, args ...any) {
	if b.tty {
		fmt.Fprint(b.stderr, "\r\033[K")
	}
	fmt.Fprintf(b.stderr, format+"\n", args...)
}

// scenarioRun is one scenario's live state.
type scenarioRun struct {
	sc       scenario
	res      *Result
	sim      *pushsim.Server
	arr      *arrivals
	evs      []benchEvent
	names    topology.Names
	policy   tiers.Policy // the ladders of --config
	group    string
	kopts    []kgo.Opt
	proc     *child
	certFile string // the simulator's certificate (PEM), with --push-tls
	metrics  string // the processor's /metrics URL
	pprof    string // the processor's /debug/pprof/ URL

	produced atomic.Int64
	outs     *outcomeReader

	mu       sync.Mutex
	timeline []Sample
}

// configArgs pass --config on to the processor's commands.
func (b *bench) configArgs() []string {
	if b.cfg.Config == "" {
		return nil
	}
	return []string{"--config", b.cfg.Config}
}

// runScenario runs sc once; run counts its runs from 1 (--runs).
func (b *bench) runScenario(ctx context.Context, sc scenario, run int) (*Result, error) {
	// --timeout bounds the wait for outcomes; the rest (set-up, reading
	// the retry topics, the ceiling) gets a few minutes more.
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout+5*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp(b.tmp, "scenario-"+sc.Name+"-")
	if err != nil {
		return nil, err
	}
	r := &scenarioRun{sc: sc, res: newResult(sc, b)}
	if b.cfg.Tag != "" {
		r.res.Name = sc.Name + "-" + b.cfg.Tag
	}
	if b.cfg.Runs > 1 {
		r.res.Run = run
		r.res.Name += fmt.Sprintf("-%d", run)
	}
	b.logf("scenario %s: %s; %d events; load %s", r.res.Name, sc.Title, sc.Events, r.res.LoadBefore)

	// The push simulator, in this process.
	simCfg := pushsim.DefaultConfig()
	simCfg.VerifyEvery = b.cfg.VerifyEvery
	// Every delivery is kept, so the bench can compare each decrypted
	// body with the payload of its event.
	simCfg.KeepDeliveries = max(sc.Events, 1)
	simCfg.TLS = b.cfg.PushTLS
	simCfg.VAPIDPublicKey = b.vapid.pub
	simCfg.Workers = b.cfg.SimWorkers
	if sc.Sim != nil {
		sc.Sim(&simCfg)
	}
	r.res.Sim = simSettings(simCfg)
	if r.sim, err = pushsim.New(simCfg, nil); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("push simulator: %w", err)
	}
	simAddr := ln.Addr().String()
	r.arr = newArrivals(sc.Events)
	srv := &http.Server{Handler: r.arr.wrap(r.sim.Handler()), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	if b.cfg.PushTLS {
		// HTTPS with HTTP/2, like FCM, autopush, APNs and WNS: the
		// processor trusts the simulator's certificate via SSL_CERT_FILE,
		// the peer via NODE_EXTRA_CA_CERTS, the ceiling loops via a pool.
		r.certFile = filepath.Join(dir, "pushsim.pem")
		if err := os.WriteFile(r.certFile, r.sim.CertPEM(), 0o644); err != nil {
			return nil, err
		}
		r.sim.SetBaseURL("https://" + simAddr)
		srv.TLSConfig = r.sim.TLSConfig()
		go srv.ServeTLS(ln, "", "")
	} else {
		r.sim.SetBaseURL("http://" + simAddr)
		go srv.Serve(ln)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		r.sim.Close(sctx) // cuts simulated latency short
		srv.Shutdown(sctx)
	}()

	// One subscription per event.
	r.names = topology.Names{Prefix: fmt.Sprintf("bench-%d-%s.", time.Now().Unix(), sc.Name)}
	r.group = strings.TrimSuffix(r.names.Prefix, ".")
	r.policy = b.cfg.Policy
	r.evs = make([]benchEvent, sc.Events)
	for i := range r.evs {
		var script []pushsim.Response
		malformed := false
		if sc.Script != nil {
			script, malformed = sc.Script(i)
		}
		sub := r.sim.Subscribe(script...)
		r.arr.index[sub.ID] = i
		r.evs[i] = newEvent(sc.Name, i, sub, sc.tierOfEvent(i), r.names, malformed)
	}

	// The broker, unless one was given.
	brokers := b.cfg.Brokers
	var broker *child
	if len(brokers) == 0 {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		broker, err = startChild("broker", filepath.Join(dir, "broker.log"), b.bin, nil,
			append([]string{"broker", "--embedded-addr", addr, "--data-dir", filepath.Join(dir, "data"),
				"--topic-prefix", r.names.Prefix, "--log-level", "warn"}, b.configArgs()...)...)
		if err != nil {
			return nil, err
		}
		defer broker.stop(30 * time.Second)
		brokers = []string{addr}
	}
	r.kopts = []kgo.Opt{kgo.SeedBrokers(brokers...)}
	if err := waitBroker(ctx, r.kopts, broker); err != nil {
		return nil, err
	}

	// The processor.
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	rand.Read(key)
	env := []string{
		"VAPID_PUBLIC_KEY=" + b.vapid.pub, "VAPID_PRIVATE_KEY=" + b.vapid.priv, "VAPID_SUBJECT=" + b.vapid.subject,
		"TIERPUSH_HMAC_KEY=" + hex.EncodeToString(key),
	}
	if b.cfg.Profile != "" {
		env = append(env, "TIERPUSH_PPROF=1")
	}
	if r.certFile != "" {
		env = append(env, "SSL_CERT_FILE="+r.certFile)
	}
	r.res.ProcessorEnv = b.cfg.ProcessorEnv
	env = append(env, b.cfg.ProcessorEnv...)
	r.res.ProcessorArgs = append(append([]string{"--max-in-flight", fmt.Sprint(b.cfg.MaxInFlight)}, b.configArgs()...), b.cfg.ProcessorFlags...)
	args := append([]string{"run", "--brokers", strings.Join(brokers, ","), "--topic-prefix", r.names.Prefix, "--group", r.group,
		"--allow-insecure-endpoint", simAddr, "--http-addr", httpAddr, "--log-level", "warn"}, r.res.ProcessorArgs...)
	r.proc, err = startChild("processor", filepath.Join(dir, "processor.log"), b.bin, env, args...)
	if err != nil {
		return nil, err
	}
	defer r.proc.stop(30 * time.Second)
	for i := 1; i < sc.Processors; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		more := append([]string(nil), args...)
		for j := range more {
			if more[j] == "--http-addr" {
				more[j+1] = addr
			}
		}
		c, err := startChild(fmt.Sprintf("processor-%d", i+1), filepath.Join(dir, fmt.Sprintf("processor-%d.log", i+1)), b.bin, env, more...)
		if err != nil {
			return nil, err
		}
		defer c.stop(30 * time.Second)
		if err := waitReady(ctx, "http://"+addr+"/readyz", c); err != nil {
			return nil, err
		}
	}
	r.metrics = "http://" + httpAddr + "/metrics"
	r.pprof = "http://" + httpAddr + "/debug/pprof/"
	if err := waitReady(ctx, "http://"+httpAddr+"/readyz", r.proc); err != nil {
		return nil, err
	}

	if err := b.measure(ctx, r, broker); err != nil {
		return nil, err
	}

	// Retry lateness from the retry records' push-due and the simulator's
	// arrival times, read while the broker is still up.
	if err := r.lateness(ctx); err != nil {
		return nil, err
	}
	if err := r.proc.stop(30 * time.Second); err != nil {
		b.logf("scenario %s: %v", sc.Name, err)
	}
	if broker != nil {
		broker.stop(30 * time.Second)
	}
	// Each push request of the run so far was checked; the loops below
	// send the same events again.
	r.res.checkBodies(r.sim.Deliveries(), r.evs, r.arr.index)
	if sc.Ceiling {
		conc := b.cfg.CeilingSenders
		b.logf("scenario %s: ceiling: webpush-go alone, %d events, %d at once", sc.Name, len(r.evs), conc)
		c, err := ceiling(ctx, r.evs, conc, b.vapid, r.sim.CertPool())
		if err != nil {
			return nil, err
		}
		r.res.Ceiling = &c
		r.res.Ratio = r.res.EventsPerSec / c.EventsPerSec
		b.logf("scenario %s: dispatch loop: internal/dispatch alone, %d events, %d at once", sc.Name, len(r.evs), conc)
		d, err := dispatchLoop(ctx, r.evs, conc, b.vapid, r.sim.CertPool())
		if err != nil {
			return nil, err
		}
		r.res.DispatchLoop = &d
		if b.cfg.Peer == "bullmq" {
			p, skipped := b.runPeer(ctx, r, dir)
			switch {
			case skipped != "":
				b.logf("scenario %s: peer BullMQ + web-push skipped: %s", sc.Name, skipped)
				r.res.PeerSkipped = skipped
			default:
				r.res.Peer = p
				r.res.PeerRatio = r.res.EventsPerSec / p.EventsPerSec
			}
		}
	}
	r.res.LoadAfter = loadAvg()
	r.res.Timeline = r.timeline
	r.res.check()
	return r.res, nil
}

// measure produces the events and follows the run to its end: every
// outcome read or, for HoldRSS, the hold time over.
func (b *bench) measure(ctx context.Context, r *scenarioRun, broker *child) error {
	sc := r.sc
	pcl, err := kgo.NewClient(append(r.kopts, kgo.MaxBufferedRecords(50_000), kgo.ProducerLinger(2*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer pcl.Close()
	// The Later events come from an upstream service of their own, as a
	// transactional service's would: a client of their own, not queued
	// behind the others in one producer's buffers.
	lcl, err := kgo.NewClient(append(r.kopts, kgo.ProducerLinger(2*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer lcl.Close()
	ocl, err := kgo.NewClient(append(r.kopts, kgo.ConsumeTopics(r.names.Outcomes()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer ocl.Close()
	r.outs = newOutcomeReader(sc.Events)
	rctx, stopReader := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopReader()
	wg.Go(func() { r.outs.run(rctx, ocl) })

	before, err := scrape(ctx, r.metrics)
	if err != nil {
		return err
	}
	pid := r.proc.pid()
	cpu0, err := cpuSeconds(pid)
	if err != nil {
		return err
	}
	brokerCPU := func() float64 {
		if broker == nil {
			return 0
		}
		s, _ := cpuSeconds(broker.pid())
		return s
	}
	bcpu0, self0 := brokerCPU(), selfCPUSeconds()
	sysr0, sysw0, _ := syscalls(pid)

	var profiled chan struct{}
	if b.cfg.Profile != "" && !sc.HoldRSS {
		// The whole run, from before the first produce: a short run ends
		// inside the profile, whose rest is idle and adds no samples.
		profiled = make(chan struct{})
		go func() { defer close(profiled); b.profile(ctx, r, "profile", b.cfg.ProfileSeconds) }()
		// And this process over the same span: the simulator, the
		// producer and the outcome reader share the cores.
		stop := b.profileSelf(r)
		defer stop()
	}
	start := time.Now()
	prodErr := make(chan error, 1)
	go func() {
		first, later := r.evs[:len(r.evs)-sc.Later], r.evs[len(r.evs)-sc.Later:]
		laterErr := make(chan error, 1)
		go func() {
			if len(later) == 0 {
				laterErr <- nil
				return
			}
			select {
			case <-ctx.Done():
				laterErr <- ctx.Err()
			case <-time.After(sc.After):
				laterErr <- produce(ctx, lcl, later, 0, &r.produced)
			}
		}()
		err := produce(ctx, pcl, first, sc.Offered, &r.produced)
		prodErr <- errors.Join(err, <-laterErr)
	}()

	sampler := time.NewTicker(time.Second)
	defer sampler.Stop()
	bar := time.NewTicker(250 * time.Millisecond)
	defer bar.Stop()
	if !b.tty {
		bar.Stop()
	}
	wait := time.NewTimer(b.cfg.Timeout)
	defer wait.Stop()
	var held *holdState
	if sc.HoldRSS {
		held = &holdState{}
		defer held.close()
	}
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d outcomes after %s: %w", r.outs.total.Load(), sc.Events, time.Since(start).Round(time.Second), ctx.Err())
		case <-wait.C:
			// Report what the run reached rather than nothing.
			r.res.Incomplete = fmt.Sprintf("stopped by --timeout %s with %d of %d outcomes", b.cfg.Timeout, r.outs.total.Load(), sc.Events)
			b.logf("scenario %s: %s", sc.Name, r.res.Incomplete)
			done = true
		case err := <-prodErr:
			if err != nil {
				return fmt.Errorf("produce: %w", err)
			}
			r.res.ProduceSeconds = time.Since(start).Seconds()
			prodErr = nil
		case <-bar.C:
			b.progress(r, start, held)
		case <-sampler.C:
			if err := r.proc.exited(); err != nil {
				return err
			}
			s := r.sample(ctx, start, pid)
			if held != nil {
				done, err = held.step(ctx, r, &s, prodErr == nil, b.cfg.RSSHold)
				if err != nil {
					return err
				}
				if b.cfg.Profile != "" && s.HeapMB > 1.2*held.heapProfiled {
					// The heap when it peaks (the burst), not only at the end.
					held.heapProfiled = s.HeapMB
					b.profileAs(ctx, r, "heap", 0, "heap-peak")
				}
				if done && b.cfg.Profile != "" {
					b.profile(ctx, r, "heap", 0)
					b.profile(ctx, r, "allocs", 0)
				}
			}
			r.mu.Lock()
			r.timeline = append(r.timeline, s)
			r.mu.Unlock()
		case <-r.outs.done:
			done = true
		}
	}
	end := time.Now()
	if !sc.HoldRSS && r.res.Incomplete == "" {
		r.outs.mu.Lock()
		end = r.outs.last
		r.outs.mu.Unlock()
	}
	cpu1, _ := cpuSeconds(pid)
	bcpu1, self1 := brokerCPU(), selfCPUSeconds()
	sysr1, sysw1, _ := syscalls(pid)
	_, peak, _ := memory(pid)
	after, err := scrape(ctx, r.metrics)
	if err != nil {
		return err
	}
	if profiled != nil {
		<-profiled
	}
	if b.cfg.Profile != "" && !sc.HoldRSS {
		b.profile(ctx, r, "heap", 0)
		b.profile(ctx, r, "allocs", 0)
	}
	if prodErr != nil {
		if err := <-prodErr; err != nil {
			return fmt.Errorf("produce: %w", err)
		}
	}
	b.logf("scenario %s: %d outcomes in %s", sc.Name, r.outs.total.Load(), end.Sub(start).Round(time.Millisecond))

	res := r.res
	n := float64(sc.Events)
	if !sc.HoldRSS {
		n = float64(max(r.outs.total.Load(), 1)) // fewer when incomplete
	}
	res.Seconds = end.Sub(start).Seconds()
	if !sc.HoldRSS {
		res.EventsPerSec = n / res.Seconds
		if t := r.outs.nth(1000); !t.IsZero() {
			res.Ramp1k = t.Sub(start).Seconds()
			b.logf("scenario %s: the first 1,000 outcomes after %.2f s", sc.Name, res.Ramp1k)
		}
	}
	res.CPUSecPer1k = (cpu1 - cpu0) / n * 1000
	res.BrokerCPUSecPer1k = (bcpu1 - bcpu0) / n * 1000
	res.BenchCPUSecPer1k = (self1 - self0) / n * 1000
	res.CPUCores = (cpu1 - cpu0) / res.Seconds
	res.PeakRSSMB = float64(peak) / (1 << 20)
	res.AllocsPerEvent = (after.sum("go_memstats_mallocs_total", nil) - before.sum("go_memstats_mallocs_total", nil)) / n
	res.ReadSyscallsPerEvent, res.WriteSyscallsPerEvent = float64(sysr1-sysr0)/n, float64(sysw1-sysw0)/n
	res.GCCycles = after.sum("go_gc_duration_seconds_count", nil) - before.sum("go_gc_duration_seconds_count", nil)
	res.LatenessMetric = latenessFromMetric(before, after)
	st := r.sim.Stats()
	res.SimRequests, res.SimDecrypted, res.SimStatus = st.Requests, st.Decrypted, st.ByStatus
	if res.Sim.Workers > 0 {
		res.SimWait = waitQuantiles(r.sim.Waits(time.Time{}))
	}
	res.Duplicates = r.outs.dups.Load()
	res.summarizeOutcomes(r.outs.outs)
	if sc.Offered > 0 {
		res.RateLimited = rateLimitFigures(r.timeline, float64(sc.Events)/sc.Offered, simLimit(r.res.Sim))
	}
	if held != nil {
		res.RSS = held.figures()
	}
	return nil
}

// sample takes one point of the timeline.
func (r *scenarioRun) sample(ctx context.Context, start time.Time, pid int) Sample {
	st := r.sim.Stats()
	s := Sample{T: time.Since(start).Seconds(), Produced: r.produced.Load(), Outcomes: r.outs.total.Load(),
		Requests: st.Requests, OK: st.ByStatus[201], Throttled: st.ByStatus[429]}
	for code, n := range st.ByStatus {
		if code >= 500 {
			s.Failed += n
		}
	}
	rss, _, _ := memory(pid)
	s.RSSMB = float64(rss) / (1 << 20)
	s.CPU, _ = cpuSeconds(pid)
	return s
}

// holdState follows scenario e: first until every event has left its tier
// topic for a retry step, then for the hold time.
type holdState struct {
	adm       *kadm.Client
	admCl     *kgo.Client
	holdStart time.Time
	rssMax    float64
	heapMax   float64 // over the whole run, the burst included
	// heapProfiled is the heap of the last peak profile (--profile).
	heapProfiled float64
	heldMax      int64
	waitMin      int64
	waitMax      int64
	samples      int
}

func (h *holdState) step(ctx context.Context, r *scenarioRun, s *Sample, produced bool, hold time.Duration) (bool, error) {
	if h.adm == nil {
		cl, err := kgo.NewClient(r.kopts...)
		if err != nil {
			return false, err
		}
		h.admCl, h.adm = cl, kadm.NewClient(cl)
	}
	lags, err := h.adm.Lag(ctx, r.group)
	if err != nil {
		return false, nil // try again next second
	}
	gl := lags[r.group]
	if gl.Error() != nil {
		return false, nil
	}
	var tierLag, retryLag int64
	policy := r.policy
	for topic, parts := range gl.Lag {
		src, err := r.names.Parse(topic, &policy)
		if err != nil {
			continue
		}
		for _, l := range parts {
			if l.Lag < 0 {
				continue
			}
			if src.Retry {
				retryLag += l.Lag
			} else {
				tierLag += l.Lag
			}
		}
	}
	s.Waiting = retryLag
	if m, err := scrape(ctx, r.metrics); err == nil {
		s.Held = int64(m.sum("tierpush_retry_held", nil))
		s.HeapMB = m.sum("go_memstats_heap_alloc_bytes", nil) / (1 << 20)
		h.heapMax = max(h.heapMax, s.HeapMB)
	}
	if h.holdStart.IsZero() {
		if !produced || tierLag > 0 || retryLag < int64(r.sc.Events)*99/100 {
			return false, nil
		}
		h.holdStart = time.Now()
		h.waitMin = retryLag
	}
	h.samples++
	h.rssMax = max(h.rssMax, s.RSSMB)
	h.heldMax = max(h.heldMax, s.Held)
	h.waitMin, h.waitMax = min(h.waitMin, retryLag), max(h.waitMax, retryLag)
	return time.Since(h.holdStart) >= hold, nil
}

func (h *holdState) close() {
	if h.admCl != nil {
		h.admCl.Close()
	}
}

func (h *holdState) figures() *RSSFigures {
	return &RSSFigures{HoldSeconds: float64(h.samples), RSSMaxMB: h.rssMax, HeapMaxMB: h.heapMax, HeldMax: h.heldMax, WaitingMin: h.waitMin, WaitingMax: h.waitMax}
}

// lateness matches each retry record's push-due with the simulator arrival
// of the send it led to: a retry record with push-attempt k (0 when pacing
// deferred the first send) leads to the event's (k+1)-th send. A record the
// pipeline deferred again without a send comes back with the same attempt
// and a later due, so the latest due per attempt is the one that was sent.
func (r *scenarioRun) lateness(ctx context.Context) error {
	policy := r.policy
	var topics []string
	for _, t := range r.names.Inputs(&policy) {
		if src, err := r.names.Parse(t, &policy); err == nil && src.Retry {
			topics = append(topics, t)
		}
	}
	dues := make([][]int64, len(r.evs)) // by event, by attempt: unix ms
	records := 0
	err := readToEnd(ctx, r.kopts, topics, func(rec *kgo.Record) {
		i, ok := r.arr.index[string(rec.Key)]
		if !ok {
			return
		}
		m, err := topology.DecodeMeta(rec.Headers)
		if err != nil || m.Attempt < 0 || m.Attempt > 32 {
			return
		}
		records++
		for len(dues[i]) <= m.Attempt {
			dues[i] = append(dues[i], 0)
		}
		dues[i][m.Attempt] = max(dues[i][m.Attempt], m.Due.UnixMilli())
	})
	if err != nil {
		return err
	}
	r.arr.mu.Lock()
	defer r.arr.mu.Unlock()
	// Retries due after the last first send met no backlog of first
	// sends competing for the window and the pacer's slots.
	var lastFirst int64
	for _, at := range r.arr.at {
		if len(at) > 0 {
			lastFirst = max(lastFirst, at[0])
		}
	}
	var late, idle []time.Duration
	unsent := 0
	for i, ds := range dues {
		for k, due := range ds {
			if due == 0 {
				continue
			}
			if k >= len(r.arr.at[i]) {
				unsent++ // expired, or still waiting when the run ended
				continue
			}
			dueNS := due * int64(time.Millisecond)
			d := time.Duration(r.arr.at[i][k] - dueNS)
			late = append(late, d)
			if dueNS > lastFirst {
				idle = append(idle, d)
			}
		}
	}
	r.res.RetryRecords = records
	r.res.Lateness = latenessFigures(late, unsent)
	r.res.LatenessIdle = latenessFigures(idle, 0)
	return nil
}

// waitBroker waits until the broker answers metadata.
func waitBroker(ctx context.Context, kopts []kgo.Opt, broker *child) error {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := cl.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		if broker != nil {
			if e := broker.exited(); e != nil {
				return e
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("broker not reachable: %w", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitReady waits until the processor has joined its group.
func waitReady(ctx context.Context, url string, proc *child) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if e := proc.exited(); e != nil {
			return e
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("processor not ready after 90s\n%s", tail(proc.log, 20))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// profileSelf starts a CPU profile of the bench process into
// <name>-bench-cpu.pprof; the function returned stops it.
func (b *bench) profileSelf(r *scenarioRun) func() {
	path := filepath.Join(b.cfg.Profile, r.res.Name+"-bench-cpu.pprof")
	f, err := func() (*os.File, error) {
		if err := os.MkdirAll(b.cfg.Profile, 0o755); err != nil {
			return nil, err
		}
		f, err := os.Create(path)
		if err != nil {
			return nil, err
		}
		return f, pprof.StartCPUProfile(f)
	}()
	if err != nil {
		b.logf("scenario %s: bench profile: %v", r.sc.Name, err)
		if f != nil {
			f.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		b.logf("scenario %s: wrote %s", r.sc.Name, path)
	}
}

// profile saves a profile of the processor: a CPU profile of seconds, or a
// heap profile.
func (b *bench) profile(ctx context.Context, r *scenarioRun, kind string, seconds int) {
	b.profileAs(ctx, r, kind, seconds, kind)
}

// profileAs saves a profile under <name>-<as>.pprof.
func (b *bench) profileAs(ctx context.Context, r *scenarioRun, kind string, seconds int, as string) {
	url := r.pprof + kind
	if seconds > 0 {
		url += fmt.Sprintf("?seconds=%d", seconds)
	}
	name := as
	if name == "profile" {
		name = "cpu"
	}
	path := filepath.Join(b.cfg.Profile, r.res.Name+"-"+name+".pprof")
	err := func() error {
		if err := os.MkdirAll(b.cfg.Profile, 0o755); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, resp.Body); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}()
	if err != nil {
		b.logf("scenario %s: %s profile: %v", r.sc.Name, kind, err)
		return
	}
	b.logf("scenario %s: wrote %s", r.sc.Name, path)
}

// progress redraws the progress bar on a terminal.
func (b *bench) progress(r *scenarioRun, start time.Time, held *holdState) {
	n := r.sc.Events
	got := int(r.outs.total.Load())
	label := "outcomes"
	if held != nil {
		r.mu.Lock()
		if len(r.timeline) > 0 {
			got = int(min(r.timeline[len(r.timeline)-1].Waiting, int64(n)))
		}
		r.mu.Unlock()
		label = "waiting"
		if !held.holdStart.IsZero() {
			label = fmt.Sprintf("holding %.0fs", time.Since(held.holdStart).Seconds())
		}
	}
	const width = 30
	fill := width * got / max(n, 1)
	el := time.Since(start)
	fmt.Fprintf(b.stderr, "\r\033[K%s [%s%s] %d/%d %s, produced %d, %.0f/s, %s",
		r.sc.Name, strings.Repeat("#", fill), strings.Repeat(".", width-fill), got, n, label, r.produced.Load(),
		float64(got)/el.Seconds(), el.Round(time.Second))
}
