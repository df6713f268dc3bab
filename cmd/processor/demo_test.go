package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/admin"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/netguard"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

func TestDemoScriptsParse(t *testing.T) {
	failing := 0
	for _, s := range demoScripts {
		script, err := pushsim.ParseScript(s)
		if err != nil {
			t.Errorf("demo script %q: %v", s, err)
		}
		if len(script) > 0 && script[0].Status != 201 {
			failing++
		}
	}
	if failing == 0 || failing == len(demoScripts) {
		t.Errorf("%d of %d demo scripts fail their first send, want some but not all", failing, len(demoScripts))
	}
}

func TestDemoTierSpread(t *testing.T) {
	got := map[tiers.Tier]int{}
	for n := range 100 {
		got[demoTier(n)]++
	}
	want := map[tiers.Tier]int{tiers.Tier1: 20, tiers.Tier2: 30, tiers.Tier3: 50}
	for tier, w := range want {
		if got[tier] != w {
			t.Errorf("tier %s got %d of 100 events, want %d", tier, got[tier], w)
		}
	}
}

// runBinary runs the processor binary and returns its exit code, stdout and
// stderr.
func runBinary(t *testing.T, timeout time.Duration, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("processor %s still running after %s; stderr:\n%s", strings.Join(args, " "), timeout, &stderr)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

func TestDemoExitCodes(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     []string
		wantErr string
	}{
		{"zero rate", []string{"--rate", "0"}, nil, "--rate"},
		{"rate not a number", []string{"--rate", "fast"}, nil, "rate"},
		{"no subscriptions", []string{"--subscriptions", "0"}, nil, "--subscriptions"},
		{"negative count", []string{"--count", "-1"}, nil, "--count"},
		{"sim not a URL", []string{"--sim", "pushsim:8443"}, nil, "--sim"},
		{"sim with a query", []string{"--sim", "http://pushsim:8443/?script=503"}, nil, "--sim"},
		{"bad env var", nil, []string{"TIERPUSH_SUBSCRIPTIONS=many"}, "subscriptions"},
		{"unknown flag", []string{"--tier", "tier1"}, nil, "tier"},
		{"stray argument", []string{"now"}, nil, "now"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runBinary(t, 30*time.Second, tt.env, append([]string{"demo"}, tt.args...)...)
			if code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", code, stderr)
			}
			if !strings.Contains(stderr, tt.wantErr) {
				t.Errorf("stderr %q does not name %q", stderr, tt.wantErr)
			}
		})
	}
}

func TestDemoGivesUpOnMissingSimulator(t *testing.T) {
	code, _, stderr := runBinary(t, 30*time.Second, nil, "demo", "--sim", "http://"+freeAddr(t), "--wait", "1s", "--count", "1")
	if code != 1 || !strings.Contains(stderr, "subscribe at http://") {
		t.Errorf("exit code %d, want 1 naming the simulator; stderr:\n%s", code, stderr)
	}
}

// scriptRecorder wraps the simulator's handler and records the script of
// every POST /subscribe.
type scriptRecorder struct {
	next    http.Handler
	mu      sync.Mutex
	scripts []string
}

func (s *scriptRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/subscribe" {
		s.mu.Lock()
		s.scripts = append(s.scripts, r.URL.Query().Get("script"))
		s.mu.Unlock()
	}
	s.next.ServeHTTP(w, r)
}

// TestDemoProducesEvents runs `processor demo` against an in-process kfake
// cluster and push simulator, addressing the simulator by name as compose
// does (localhost here, pushsim there): the endpoints it mints must carry
// that name, and the events must pass the processor's own validation with
// --allow-insecure-endpoint set to that name.
func TestDemoProducesEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	names := topology.Names{Prefix: "demo."}
	policy := tiers.DefaultPolicy()
	spec := admin.DefaultSpec()
	spec.Partitions = 2
	if _, err := admin.Ensure(ctx, kadm.NewClient(cl), names, &policy, spec); err != nil {
		t.Fatal(err)
	}

	sim, err := pushsim.New(pushsim.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &scriptRecorder{next: sim.Handler()}
	ts := httptest.NewServer(rec)
	defer ts.Close()
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	simHost := "localhost:" + port

	const subs, count = 15, 40
	code, stdout, stderr := runBinary(t, 60*time.Second, nil, "demo",
		"--brokers", strings.Join(c.ListenAddrs(), ","), "--topic-prefix", names.Prefix,
		"--sim", "http://"+simHost, "--rate", "400", "--subscriptions", "15", "--count", "40")
	if code != 0 {
		t.Fatalf("demo exit code %d; stderr:\n%s", code, stderr)
	}
	if want := "produced 40 events (tier1 8, tier2 12, tier3 20) for 15 subscriptions"; !strings.Contains(stdout, want) {
		t.Errorf("stdout %q, want %q", stdout, want)
	}

	// Every subscription was created with its script, in turn.
	rec.mu.Lock()
	gotScripts := slices.Clone(rec.scripts)
	rec.mu.Unlock()
	var wantScripts []string
	for i := range subs {
		wantScripts = append(wantScripts, demoScripts[i%len(demoScripts)])
	}
	if !slices.Equal(gotScripts, wantScripts) {
		t.Errorf("subscribe scripts = %q, want %q", gotScripts, wantScripts)
	}

	// Read back every event.
	guard, err := netguard.New(netguard.AllowInsecure(simHost))
	if err != nil {
		t.Fatal(err)
	}
	rules := event.DefaultRules()
	rules.Guard = guard
	var topics []string
	for _, tier := range tiers.All {
		topics = append(topics, names.Tier(tier))
	}
	consumer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	perTopic := map[string]int{}
	ids := map[string]bool{}
	keys := map[string]bool{}
	for len(ids) < count {
		fs := consumer.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d events: %v", len(ids), count, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			ev, err := event.Decode(r.Value, r.Timestamp, rules)
			if err != nil {
				t.Errorf("event in %s fails the processor's validation: %v", r.Topic, err)
				return
			}
			if !strings.HasPrefix(ev.Endpoint, "http://"+simHost+"/push/") {
				t.Errorf("endpoint of %s is not under http://%s/push/", ev.ID, simHost)
			}
			if ids[ev.ID] {
				t.Errorf("event id %s produced twice", ev.ID)
			}
			ids[ev.ID] = true
			keys[string(r.Key)] = true
			perTopic[r.Topic]++
		})
	}
	wantPerTopic := map[string]int{"demo.tier1": 8, "demo.tier2": 12, "demo.tier3": 20}
	for topic, n := range wantPerTopic {
		if perTopic[topic] != n {
			t.Errorf("%s holds %d events, want %d", topic, perTopic[topic], n)
		}
	}
	if len(keys) != subs {
		t.Errorf("events are keyed by %d subscriptions, want all %d", len(keys), subs)
	}
}

// TestDemoShowsRetries is the compose scenario in one process tree: a
// processor (on its embedded broker) and the demo against one simulator.
// The demo's scripted subscriptions must drive records onto retry topics,
// an unsubscribe event onto push.gone, and deliveries after a retry.
func TestDemoShowsRetries(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a processor subprocess")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	sim, simAddr := serveSim(t, pushsim.DefaultConfig())
	brokerAddr := freeAddr(t)
	p := startProc(t, procArgs(t, filepath.Join(t.TempDir(), "data"), brokerAddr, simAddr)...)

	// The demo waits for the topics the processor creates at start.
	code, _, stderr := runBinary(t, 60*time.Second, nil, "demo", "--brokers", brokerAddr,
		"--sim", "http://"+simAddr, "--rate", "200", "--subscriptions", "12", "--count", "24")
	if code != 0 {
		t.Fatalf("demo exit code %d; stderr:\n%s\nprocessor stderr:\n%s", code, stderr, p.stderr)
	}

	// 24 events over the 12 scripts, two each: the "503,201" and
	// "429:1,201" subscriptions deliver both their events, one after a retry:
	// 12 deliveries to the unscripted ones plus 4.
	if err := sim.WaitFor(ctx, func(s pushsim.Stats) bool {
		return s.ByStatus[503] >= 2 && s.ByStatus[500] >= 1 && s.ByStatus[410] >= 1 && s.ByStatus[429] >= 2 && s.ByStatus[201] >= 16
	}); err != nil {
		t.Fatalf("simulator never saw the scripted failures and deliveries: %v (stats %+v); processor stderr:\n%s", err, sim.Stats(), p.stderr)
	}

	names := topology.Names{Prefix: topology.DefaultPrefix}
	policy := tiers.DefaultPolicy()
	var retryTopics []string
	for _, tier := range tiers.All {
		for _, d := range policy.Ladder(tier).Steps {
			retryTopics = append(retryTopics, names.Retry(tier, d))
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokerAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The simulator answers before the processor produces what follows
	// from the answer (the retry record, the unsubscribe event): poll.
	adm := kadm.NewClient(cl)
	total := func(ends kadm.ListedOffsets, topics ...string) int64 {
		var n int64
		ends.Each(func(o kadm.ListedOffset) {
			if slices.Contains(topics, o.Topic) {
				n += o.Offset
			}
		})
		return n
	}
	var retried, gone int64
	for {
		ends, err := adm.ListEndOffsets(ctx, append(retryTopics, names.Gone())...)
		if err != nil {
			t.Fatalf("end offsets of the retry topics and %s: %v", names.Gone(), err)
		}
		retried, gone = total(ends, retryTopics...), total(ends, names.Gone())
		if retried >= 4 && gone >= 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("retry topics hold %d records, want at least 4 from the scripted failures; %s holds %d, want the scripted 410's unsubscribe event", retried, names.Gone(), gone)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestTopicsEnsureCommand runs `processor topics ensure` as docker-compose's
// topics service and the Helm chart's hook Job do, against kfake: it creates
// the whole topology, a second run changes nothing, and a spec asking for
// more partitions than the topics have fails (exit 1) without altering them.
func TestTopicsEnsureCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	names := topology.Names{Prefix: "push."}
	policy := tiers.DefaultPolicy()
	all := names.All(&policy)

	ensure := func(partitions string) (int, map[string]string, string) {
		code, stdout, stderr := runBinary(t, 30*time.Second, nil, "topics", "ensure",
			"--brokers", brokers, "--partitions", partitions, "--retention", "24h")
		status := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
			if f := strings.Fields(l); len(f) >= 4 {
				status[f[0]] = strings.Join(f[3:], " ")
			}
		}
		return code, status, stderr
	}
	check := func(run string, status map[string]string, want string) {
		t.Helper()
		if len(status) != len(all) {
			t.Errorf("%s: reported %d topics, want %d: %v", run, len(status), len(all), status)
		}
		for _, topic := range all {
			if !strings.HasPrefix(status[topic], want) {
				t.Errorf("%s: %s is %q, want %s", run, topic, status[topic], want)
			}
		}
	}

	code, status, stderr := ensure("3")
	if code != 0 {
		t.Fatalf("first run: exit %d; stderr:\n%s", code, stderr)
	}
	check("first run", status, "created")

	code, status, stderr = ensure("3")
	if code != 0 {
		t.Fatalf("second run: exit %d; stderr:\n%s", code, stderr)
	}
	check("second run", status, "ok")

	code, status, stderr = ensure("5")
	if code != 1 || !strings.Contains(stderr, "16 topics differ from the spec") {
		t.Errorf("run asking 5 partitions: exit %d, want 1 naming the drift; stderr:\n%s", code, stderr)
	}
	check("run asking 5 partitions", status, "drift: has 3 partitions, spec asks 5")

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	details, err := kadm.NewClient(cl).ListTopics(ctx, all...)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range all {
		if n := len(details[topic].Partitions); n != 3 {
			t.Errorf("%s has %d partitions after the drift run, want the original 3", topic, n)
		}
	}
}

// TestTopicsEnsureFollowsConfig: topics ensure reads the ladders from the
// same --config file as the processor, and creates their step topics
// (push.tier2.retry-1s, push.tier2.retry-5s); its partitions come from the
// file too, unless a flag says otherwise.
func TestTopicsEnsureFollowsConfig(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	config := writeConfig(t, "brokers: ["+c.ListenAddrs()[0]+"]\npartitions: 2\nmax-in-flight: 64\n"+
		"tiers:\n  tier2:\n    steps: [1s, 5s]\n    max_attempts: 3\n    weight: 3\npacing:\n  cut_rate: 0.05\n")
	code, stdout, stderr := runBinary(t, 30*time.Second, nil, "topics", "ensure", "--config", config)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	policy := tiers.DefaultPolicy()
	policy.Tier2.Steps = []time.Duration{time.Second, 5 * time.Second}
	names := topology.Names{Prefix: "push."}
	for _, topic := range names.All(&policy) {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(topic) + ` +2 partitions +created$`).MatchString(stdout) {
			t.Errorf("%s not created with 2 partitions:\n%s", topic, stdout)
		}
	}
	if strings.Contains(stdout, "push.tier2.retry-8s") {
		t.Errorf("created a step of the default tier2 ladder:\n%s", stdout)
	}
}
