package faults_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

const (
	group      = "tierpush"
	partitions = 12
	hmacKey    = "fault-suite-hmac-key-0123456789abcdef"
	// poll is how often the suite re-checks a condition it waits for.
	poll = 100 * time.Millisecond
)

var (
	names  = topology.Names{Prefix: topology.DefaultPrefix}
	policy = tiers.DefaultPolicy()
)

var (
	fixedMu    sync.Mutex
	fixedTaken = make(map[int]bool)
)

// fixedListener listens on a loopback port below the ephemeral range, for
// a listener that must be opened again on the same port (the push
// simulator's): no outgoing connection can take it meanwhile. It keeps the
// listener it probed with, so nothing can take the port between the probe
// and the use.
func fixedListener(t *testing.T) net.Listener {
	t.Helper()
	fixedMu.Lock()
	defer fixedMu.Unlock()
	for range 100 {
		port := 20000 + mrand.IntN(12000)
		if fixedTaken[port] {
			continue // handed to a scenario running beside this one
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		fixedTaken[port] = true
		return ln
	}
	t.Fatal("no free port in 20000..31999")
	return nil
}

// fixedAddr is fixedListener's address, closed, for a listener another
// process opens (the broker's, started again on the same port; a
// processor's HTTP server).
func fixedAddr(t *testing.T) string {
	t.Helper()
	ln := fixedListener(t)
	ln.Close()
	return ln.Addr().String()
}

// static reports whether processors are static group members: each runs
// with --instance-id proc-<slot>, kept by the processor started in place of
// a killed one. TIERPUSH_FAULTS_DYNAMIC=1 runs them as dynamic members.
func static() bool { return os.Getenv("TIERPUSH_FAULTS_DYNAMIC") == "" }

// instanceID is the --instance-id of the processors of slot i.
func instanceID(i int) string { return fmt.Sprintf("proc-%d", i) }

// logLevel is the processors' log level: warn, or TIERPUSH_FAULTS_LOG_LEVEL.
func logLevel() string {
	if l := os.Getenv("TIERPUSH_FAULTS_LOG_LEVEL"); l != "" {
		return l
	}
	return "warn"
}

// waitUntil re-checks cond every poll until it holds or ctx ends.
func waitUntil(ctx context.Context, what string, cond func() bool) error {
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-tick.C:
		}
	}
	return nil
}

// pause waits d as part of a fault schedule (an outage that lasts d), or
// until ctx ends. It never stands in for waiting on a condition.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// proc is a subprocess of the processor binary: the broker or a processor.
type proc struct {
	name     string
	args     []string
	cmd      *exec.Cmd
	logPath  string
	httpAddr string // processors: /readyz and /metrics
	started  time.Time

	done chan struct{}
	err  error // Wait's result, once done is closed

	mu      sync.Mutex
	readyAt time.Time
}

func startProc(t *testing.T, logDir, name string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, args: args, cmd: exec.Command(binary, args...), logPath: logPath, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	p.started = time.Now()
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits for the exit; it returns the exit code (-1 when
// killed by a signal).
func (p *proc) stop(ctx context.Context, sig syscall.Signal) (int, error) {
	if err := p.cmd.Process.Signal(sig); err != nil && !p.exited() {
		return 0, fmt.Errorf("signal %s: %w", p.name, err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return 0, fmt.Errorf("%s still running after %v: %w", p.name, sig, context.Cause(ctx))
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, p.err
}

// tail returns the last n lines of the process's output.
func (p *proc) tail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// ready reports whether the processor answered /readyz with 200 (it has
// joined the group and been assigned partitions); the first time it does is
// kept.
func (p *proc) ready(hc *http.Client) bool {
	p.mu.Lock()
	if !p.readyAt.IsZero() {
		p.mu.Unlock()
		return true
	}
	p.mu.Unlock()
	resp, err := hc.Get("http://" + p.httpAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	p.mu.Lock()
	if p.readyAt.IsZero() {
		p.readyAt = time.Now()
	}
	p.mu.Unlock()
	return true
}

func (p *proc) firstReady() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.readyAt
}

// breakerRe matches a breaker that is not closed in /metrics:
// tierpush_pacing_breaker_state 1 (half-open) or 2 (open), or the older
// tierpush_pacing_breaker_open 1.
var breakerRe = regexp.MustCompile(`(?m)^tierpush_pacing_breaker_(?:state\{[^}]*\} [12]|open\{[^}]*\} 1)$`)

// breakerOpen reports whether the processor's /metrics shows an open
// breaker.
func (p *proc) breakerOpen(hc *http.Client) bool {
	resp, err := hc.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return breakerRe.MatchString(b.String())
}

// clusterOpts shape a cluster.
type clusterOpts struct {
	procs    int             // processors started at once
	procArgs []string        // extra flags of every processor
	sim      *pushsim.Config // default: 1–5 ms latency
	// dynamic: processors join without --instance-id, as by default, so a
	// stopped one leaves the group and its partitions move at once.
	dynamic bool
	// subjects gives each processor process its own VAPID subject
	// (mailto:<process name>@tierpush.test), so that the simulator's
	// deliveries tell which process sent them (pushsim.Delivery.Subject).
	subjects bool
}

// cluster is one scenario's world: a broker process with a data dir,
// processor processes in group "tierpush", the push simulator in the test
// process behind an outage switch, and a reader of the ledger.
type cluster struct {
	t          *testing.T
	dir        string
	logDir     string
	brokerAddr string
	broker     *proc
	brokers    []*proc // every broker process, for the logs

	sim     *pushsim.Server
	simLn   *pushsim.OutageListener
	simAddr string

	vapidPub, vapidPriv string
	procArgs            []string
	dynamic             bool // no --instance-id (clusterOpts.dynamic)
	subjects            bool // a VAPID subject per process (clusterOpts.subjects)
	http                *http.Client

	mu      sync.Mutex
	procs   []*proc   // the current process of each slot
	history [][]*proc // every process each slot has had

	cl     *kgo.Client
	adm    *kadm.Client
	ledger *ledger
}

func newCluster(ctx context.Context, t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir(), procArgs: o.procArgs, dynamic: o.dynamic, subjects: o.subjects, http: &http.Client{Timeout: 2 * time.Second}}
	c.logDir = c.dir
	if d := os.Getenv("TIERPUSH_FAULTS_LOGS"); d != "" {
		c.logDir = filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.MkdirAll(c.logDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})

	var err error
	c.vapidPriv, c.vapidPub, err = webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	simCfg := pushsim.DefaultConfig()
	simCfg.Latency, simCfg.LatencyJitter = time.Millisecond, 4*time.Millisecond
	if o.sim != nil {
		simCfg = *o.sim
	}
	simCfg.VAPIDPublicKey = c.vapidPub
	c.sim, err = pushsim.New(simCfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln := fixedListener(t)
	c.simLn = pushsim.NewOutageListener(ln)
	c.simAddr = ln.Addr().String()
	go c.sim.Serve(c.simLn)
	t.Cleanup(func() { c.sim.Close(context.Background()) })

	c.brokerAddr = fixedAddr(t)
	c.startBroker(ctx)

	c.cl, err = kgo.NewClient(kgo.SeedBrokers(c.brokerAddr), kgo.FetchMaxWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.cl.Close)
	c.adm = kadm.NewClient(c.cl)
	c.ledger = startLedger(t, c.brokerAddr)

	for range o.procs {
		c.addProc()
	}
	c.waitReady(ctx, c.current()...)
	c.watchReady()
	return c
}

// current returns the current process of each slot.
func (c *cluster) current() []*proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*proc(nil), c.procs...)
}

// watchReady notes, in the background, when each processor first answers
// /readyz, so recovery times can be read afterwards.
func (c *cluster) watchReady() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(poll)
		defer tick.Stop()
		for {
			c.mu.Lock()
			var todo []*proc
			for _, h := range c.history {
				for _, p := range h {
					if p.firstReady().IsZero() && !p.exited() {
						todo = append(todo, p)
					}
				}
			}
			c.mu.Unlock()
			for _, p := range todo {
				p.ready(c.http)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	c.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// readyAfter returns when a processor started in slot i at or after t first
// answered /readyz, or zero.
func (c *cluster) readyAfter(i int, t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, p := range c.history[i] {
		if r := p.firstReady(); !p.started.Before(t) && !r.IsZero() && (first.IsZero() || r.Before(first)) {
			first = r
		}
	}
	return first
}

// startBroker starts (or restarts) the broker process on the same address
// and data dir, and waits until it serves the topics.
func (c *cluster) startBroker(ctx context.Context) {
	c.t.Helper()
	c.broker = startProc(c.t, c.logDir, fmt.Sprintf("broker-%d", len(c.brokers)), "broker",
		"--embedded-addr", c.brokerAddr,
		"--data-dir", filepath.Join(c.dir, "broker"),
		"--partitions", fmt.Sprint(partitions),
		"--log-level", "warn",
	)
	c.brokers = append(c.brokers, c.broker)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokerAddr))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	want := append(names.Inputs(&policy), names.DLQ(), names.Gone(), names.Outcomes())
	err = waitUntil(ctx, "the broker's topics", func() bool {
		if c.broker.exited() {
			return true
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ts, err := adm.ListTopics(rctx, want...)
		if err != nil {
			return false
		}
		for _, n := range want {
			if !ts.Has(n) || ts[n].Err != nil {
				return false
			}
		}
		return true
	})
	if c.broker.exited() {
		c.t.Fatalf("broker exited at start (%v):\n%s", c.broker.err, c.broker.tail(30))
	}
	if err != nil {
		c.t.Fatal(err)
	}
}

// addProc starts a processor in a new slot.
func (c *cluster) addProc() *proc {
	c.t.Helper()
	c.mu.Lock()
	c.procs = append(c.procs, nil)
	c.history = append(c.history, nil)
	i := len(c.procs) - 1
	c.mu.Unlock()
	return c.restartProc(i)
}

// restartProc starts a new processor in slot i (whose old one has exited).
func (c *cluster) restartProc(i int) *proc {
	c.t.Helper()
	// Below the ephemeral range: a port picked there and closed for the
	// processor to open was taken meanwhile by an outgoing connection of
	// a scenario running beside this one ("bind: address already in use").
	httpAddr := fixedAddr(c.t)
	c.mu.Lock()
	gen := len(c.history[i])
	c.mu.Unlock()
	name := fmt.Sprintf("processor-%d.%d", i, gen)
	subject := "mailto:ops@tierpush.test"
	if c.subjects {
		subject = subjectOf(name)
	}
	args := append([]string{"run",
		"--brokers", c.brokerAddr,
		"--http-addr", httpAddr,
		"--allow-insecure-endpoint", c.simAddr,
		"--vapid-public-key", c.vapidPub, "--vapid-private-key", c.vapidPriv, "--vapid-subject", subject,
		"--hmac-key", hmacKey,
		"--partitions", fmt.Sprint(partitions),
		"--log-level", logLevel(),
	}, c.procArgs...)
	if static() && !c.dynamic {
		args = append(args, "--instance-id", instanceID(i))
	}
	// Extra flags for a diagnostic run, e.g. TIERPUSH_FAULTS_PROCESSOR_ARGS="--pacing=false".
	args = append(args, strings.Fields(os.Getenv("TIERPUSH_FAULTS_PROCESSOR_ARGS"))...)
	p := startProc(c.t, c.logDir, name, args...)
	p.httpAddr = httpAddr
	c.mu.Lock()
	c.procs[i] = p
	c.history[i] = append(c.history[i], p)
	c.mu.Unlock()
	return p
}

// subjectOf is the VAPID subject of the process named name when each has
// its own (clusterOpts.subjects).
func subjectOf(name string) string { return "mailto:" + name + "@tierpush.test" }

// waitReady waits until every p answers /readyz, failing the test at
// once if one exits or ctx ends.
func (c *cluster) waitReady(ctx context.Context, ps ...*proc) {
	c.t.Helper()
	if err := c.ready(ctx, ps...); err != nil {
		c.t.Fatal(err)
	}
}

// ready waits until every p answers /readyz.
func (c *cluster) ready(ctx context.Context, ps ...*proc) error {
	for _, p := range ps {
		err := waitUntil(ctx, p.name+" ready", func() bool { return p.exited() || p.ready(c.http) })
		if p.exited() {
			return fmt.Errorf("%s exited (%v):\n%s", p.name, p.err, p.tail(30))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkRunning fails the test for every processor that exited on its own.
func (c *cluster) checkRunning() {
	c.t.Helper()
	for _, p := range c.current() {
		if p.exited() {
			c.t.Errorf("%s exited by itself (%v):\n%s", p.name, p.err, p.tail(30))
		}
	}
}

// groupMember is a member of the group as the broker describes it.
type groupMember struct {
	id, instance string // instance: --instance-id, empty for a dynamic member
	partitions   int    // input partitions assigned to it
}

// describeGroup returns the group's state and members, whichever protocol
// its members speak.
func (c *cluster) describeGroup(ctx context.Context) (string, []groupMember, error) {
	g, err := testenv.DescribeGroup(ctx, c.cl, group)
	if err != nil {
		return "", nil, err
	}
	var ms []groupMember
	for _, m := range g.Members {
		ms = append(ms, groupMember{id: m.ID, instance: m.Instance, partitions: m.Partitions()})
	}
	return g.State, ms, nil
}

// memberOf returns the member ID of slot i's static member, or "".
func (c *cluster) memberOf(ctx context.Context, i int) string {
	_, ms, err := c.describeGroup(ctx)
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.instance == instanceID(i) {
			return m.id
		}
	}
	return ""
}

// waitStable waits until the group is Stable with exactly n members that
// hold every input partition between them, none of them a member ID in
// gone. With static membership the members must be slots 0..n-1 by their
// instance IDs, so a member that was killed or stopped counts only once a
// process started in its place has taken it over (pass its old member ID
// in gone): a static member does not leave on shutdown, so the group stays
// Stable with n members meanwhile.
func (c *cluster) waitStable(ctx context.Context, n int, gone ...string) error {
	want := partitions * len(names.Inputs(&policy))
	var last string
	err := waitUntil(ctx, fmt.Sprintf("group stable with %d members", n), func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		state, ms, err := c.describeGroup(rctx)
		held := 0
		var desc []string
		ok := err == nil && state == "Stable" && len(ms) == n
		for _, m := range ms {
			held += m.partitions
			id := m.id
			if m.instance != "" {
				id = m.instance + "/" + id
			}
			desc = append(desc, fmt.Sprintf("%s:%d", id, m.partitions))
			if slices.Contains(gone, m.id) {
				ok = false
			}
		}
		if static() && !c.dynamic {
			for i := range n {
				ok = ok && slices.ContainsFunc(ms, func(m groupMember) bool { return m.instance == instanceID(i) })
			}
		}
		last = fmt.Sprintf("state %q, %d members [%s] holding %d of %d input partitions, err %v",
			state, len(ms), strings.Join(desc, " "), held, want, err)
		return ok && held == want
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return nil
}

// lagged returns the input partitions (tier and retry topics) whose
// committed offset is behind their end (where nothing is committed, the
// log's start is).
func (c *cluster) lagged(ctx context.Context) ([]string, error) {
	topics := names.Inputs(&policy)
	committed, err := c.adm.FetchOffsetsForTopics(ctx, group, topics...)
	if err != nil {
		return nil, err
	}
	starts, err := c.adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends, err := c.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	var out []string
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			out = append(out, fmt.Sprintf("%s/%d: %v", e.Topic, e.Partition, e.Err))
			return
		}
		from := int64(0)
		if s, ok := starts.Lookup(e.Topic, e.Partition); ok && s.Err == nil {
			from = s.Offset
		}
		if r, ok := committed.Lookup(e.Topic, e.Partition); ok && r.Err == nil && r.At >= 0 {
			from = r.At
		}
		if lag := e.Offset - from; lag > 0 {
			out = append(out, fmt.Sprintf("%s/%d: lag %d", e.Topic, e.Partition, lag))
		}
	})
	slices.Sort(out)
	return out, nil
}

// produce produces records synchronously, in batches.
func (c *cluster) produce(ctx context.Context, rs []*kgo.Record) {
	c.t.Helper()
	for len(rs) > 0 {
		n := min(len(rs), 2000)
		if err := c.cl.ProduceSync(ctx, rs[:n]...).FirstErr(); err != nil {
			c.t.Fatalf("produce: %v", err)
		}
		rs = rs[n:]
	}
}

// dumpLogs prints the tail of every process's log.
func (c *cluster) dumpLogs() {
	all := append([]*proc(nil), c.brokers...)
	c.mu.Lock()
	for _, h := range c.history {
		all = append(all, h...)
	}
	c.mu.Unlock()
	for _, p := range all {
		if p != nil {
			c.t.Logf("--- %s (log %s), last lines:\n%s", p.name, p.logPath, p.tail(40))
		}
	}
}

// ledger reads push.outcomes from the start, for as long as the test runs,
// across broker restarts.
type ledger struct {
	mu      sync.Mutex
	recs    map[string][]topology.OutcomeRecord
	firstAt map[string]time.Time // when the suite first read each id
	total   int
	bad     []string
	changed chan struct{}
}

func startLedger(t *testing.T, brokerAddr string) *ledger {
	t.Helper()
	l := &ledger{recs: make(map[string][]topology.OutcomeRecord), firstAt: make(map[string]time.Time)}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr), kgo.ConsumeTopics(names.Outcomes()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(250*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				return
			}
			now := time.Now()
			l.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				var o topology.OutcomeRecord
				if err := json.Unmarshal(r.Value, &o); err != nil || o.ID != string(r.Key) {
					l.bad = append(l.bad, fmt.Sprintf("%s/%d@%d: %q", r.Topic, r.Partition, r.Offset, r.Value))
					return
				}
				if _, ok := l.recs[o.ID]; !ok {
					l.firstAt[o.ID] = now
				}
				l.recs[o.ID] = append(l.recs[o.ID], o)
				l.total++
			})
			if l.changed != nil {
				close(l.changed)
				l.changed = nil
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cl.Close()
	})
	return l
}

// waitFor waits until cond holds on the ledger (called with the lock held)
// or ctx ends.
func (l *ledger) waitFor(ctx context.Context, what string, cond func(l *ledger) bool) error {
	for {
		l.mu.Lock()
		if cond(l) {
			l.mu.Unlock()
			return nil
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the ledger to hold %s: %w", what, context.Cause(ctx))
		}
	}
}

// waitAll waits until every event has a terminal record.
func (l *ledger) waitAll(ctx context.Context, evs []*event) error {
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.id
	}
	next := 0 // ids before next are known to be there
	return l.waitFor(ctx, fmt.Sprintf("%d events", len(evs)), func(l *ledger) bool {
		for ; next < len(ids); next++ {
			if _, ok := l.recs[ids[next]]; !ok {
				return false
			}
		}
		return true
	})
}

// missing returns how many of evs have no terminal record.
func (l *ledger) missing(evs []*event) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range evs {
		if _, ok := l.recs[e.id]; !ok {
			n++
		}
	}
	return n
}

// records returns a copy of the records of id.
func (l *ledger) records(id string) []topology.OutcomeRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]topology.OutcomeRecord(nil), l.recs[id]...)
}

func (l *ledger) first(id string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstAt[id]
}

func (l *ledger) malformed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.bad...)
}

// explain logs, for each event of evs (at most 10), every record of it in
// every topic (with its routing headers and whether the group committed
// past it) and what the push service answered it: the evidence for a lost
// or wrongly routed event.
func (c *cluster) explain(ctx context.Context, evs []*event) {
	t := c.t
	if len(evs) > 10 {
		evs = evs[:10]
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	commits, err := c.adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Logf("explain: fetch offsets: %v", err)
	}
	lines := make(map[*event][]string)
	err = c.scan(ctx, names.All(&policy), evs, func(e *event, r *kgo.Record) {
		var hs []string
		for _, h := range r.Headers {
			if h.Key != topology.HeaderSig && h.Key != topology.HeaderTraceparent {
				hs = append(hs, h.Key+"="+string(h.Value))
			}
		}
		committed := "no commit"
		if o, ok := commits.Lookup(r.Topic, r.Partition); ok && o.Err == nil {
			committed = fmt.Sprintf("committed %d", o.At)
		}
		lines[e] = append(lines[e], fmt.Sprintf("  %s/%d@%d at %s (%s) %s", r.Topic, r.Partition, r.Offset,
			r.Timestamp.Format("15:04:05.000"), committed, strings.Join(hs, " ")))
	})
	if err != nil {
		t.Logf("explain: %v", err)
	}
	byKey := make(map[string]bool)
	for _, e := range evs {
		byKey[string(e.rec.Key)] = true
	}
	var answers = make(map[string][]string)
	for _, d := range c.sim.Deliveries() {
		if byKey[d.SubID] {
			gone := ""
			if d.ClientGone {
				gone = ", sender gone"
			}
			answers[d.SubID] = append(answers[d.SubID], fmt.Sprintf("%d (TTL %d%s) at %s", d.Status, d.TTL, gone, d.At.Format("15:04:05.000")))
		}
	}
	for _, e := range evs {
		t.Logf("explain %s (%s, %s, key %s): push service answered [%s]; records:\n%s", e.id, e.kind.Name, e.tier, e.rec.Key,
			strings.Join(answers[string(e.rec.Key)], ", "), strings.Join(lines[e], "\n"))
	}
	if lag, err := c.lagged(ctx); err == nil {
		t.Logf("explain: input partitions behind: %v", lag)
	}
}

// scan reads topics from their start to their current end and calls each
// for every record of an event of evs: keyed by its subscription (tier,
// retry and DLQ records) or its id (outcomes).
func (c *cluster) scan(ctx context.Context, topics []string, evs []*event, each func(*event, *kgo.Record)) error {
	byKey := make(map[string]*event)
	for _, e := range evs {
		byKey[string(e.rec.Key)] = e
		byKey[e.id] = e
	}
	ends, err := c.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return fmt.Errorf("list end offsets: %w", err)
	}
	want := make(map[string]map[int32]kgo.Offset)
	left := 0
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic] = make(map[int32]kgo.Offset)
			}
			want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
			left++
		}
	})
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokerAddr), kgo.ConsumePartitions(want), kgo.FetchMaxWait(250*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("read every topic: %w", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := ends.Lookup(r.Topic, r.Partition); ok && r.Offset == end.Offset-1 {
				left--
			}
			if e := byKey[string(r.Key)]; e != nil {
				each(e, r)
			}
		})
	}
	return nil
}

func TestBreakerRe(t *testing.T) {
	tests := []struct {
		metrics string
		want    bool
	}{
		{`tierpush_pacing_breaker_state{origin="http://127.0.0.1:1",otel_scope_name="x"} 2`, true},
		{`tierpush_pacing_breaker_state{origin="http://127.0.0.1:1"} 1`, true},
		{`tierpush_pacing_breaker_state{origin="http://127.0.0.1:1"} 0`, false},
		{`tierpush_pacing_breaker_open{origin="http://127.0.0.1:1"} 1`, true},
		{`tierpush_pacing_breaker_open{origin="http://127.0.0.1:1"} 0`, false},
		{"# HELP tierpush_pacing_breaker_state 0 closed, 1 half-open, 2 open\ntierpush_pacing_limit{origin=\"x\"} 2", false},
	}
	for _, tt := range tests {
		if got := breakerRe.MatchString(tt.metrics); got != tt.want {
			t.Errorf("breakerRe.MatchString(%q) = %v, want %v", tt.metrics, got, tt.want)
		}
	}
}
