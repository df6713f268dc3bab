package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/dlq"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
	"github.com/tierpush/tierpush/topology"
)

// runTool runs the processor binary with args and returns its exit code,
// stdout and stderr.
func runTool(t *testing.T, stdin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("processor %s still running; stderr:\n%s", strings.Join(args, " "), &stderr)
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

var dlqT0 = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)

// deadEvent is a record as the pipeline dead-letters it.
type deadEvent struct {
	id       string
	host     string // push service host of the endpoint
	source   string // push-origin
	reason   topology.Reason
	status   int
	redrives int
	at       time.Time
	app      string // the event's app; "" for none
}

// secretPath is in every fixture endpoint: it must never be printed.
const secretPath = "/fcm/send/SECRET-TOKEN-"

func (d deadEvent) record(sub pushsim.Subscription) *kgo.Record {
	sub.Endpoint = "https://" + d.host + secretPath + d.id
	m := topology.Meta{Attempt: 5, FirstSeen: d.at.Add(-time.Minute), Origin: d.source, Status: d.status,
		Reason: d.reason, Error: "push service said no", RedriveCount: d.redrives}
	hs := append(m.Headers(nil), kgo.RecordHeader{Key: topology.HeaderTraceparent, Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")})
	var extra map[string]any
	if d.app != "" {
		extra = map[string]any{"app": d.app}
	}
	return &kgo.Record{Topic: "push.dlq", Key: []byte(d.id), Value: testenv.Event(d.id, sub, "SECRET-PAYLOAD", extra), Headers: hs, Timestamp: d.at}
}

var dlqFixture = []deadEvent{
	{id: "a-503", host: "fcm.googleapis.com", source: "push.tier1.retry-60s/0/1", reason: topology.ReasonMaxAttempts, status: 503, at: dlqT0},
	{id: "b-429", host: "fcm.googleapis.com", source: "push.tier2/1/2", reason: topology.ReasonMaxAttempts, status: 429, at: dlqT0.Add(time.Hour), app: "shop"},
	{id: "c-400", host: "updates.push.services.mozilla.com", source: "push.tier1/2/3", reason: topology.ReasonRejected, status: 400, at: dlqT0.Add(2 * time.Hour)},
	{id: "d-ttl", host: "web.push.apple.com", source: "push.tier3.retry-8s/3/4", reason: topology.ReasonTTLExpired, status: 503, at: dlqT0.Add(3 * time.Hour), app: "news"},
	{id: "e-sig", host: "fcm.googleapis.com", source: "push.tier1.retry-2s/0/5", reason: topology.ReasonBadSignature, at: dlqT0.Add(4 * time.Hour)},
	{id: "f-loop", host: "fcm.googleapis.com", source: "push.tier2/0/6", reason: topology.ReasonMaxAttempts, status: 503, redrives: 3, at: dlqT0.Add(5 * time.Hour)},
	{id: "\x1b[31mhostile", host: "fcm.googleapis.com", source: "push.tier3/0/7", reason: topology.ReasonInvalidEvent, at: dlqT0.Add(6 * time.Hour)},
}

// dlqEnv is a broker whose DLQ holds dlqFixture.
func dlqEnv(t *testing.T) (*testenv.Env, string, pushsim.Subscription) {
	t.Helper()
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	sub := env.Sim.Subscribe()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, d := range dlqFixture {
		env.Produce(ctx, d.record(sub))
	}
	return env, env.Brokers[0], sub
}

func jsonIDs(t *testing.T, out string) []string {
	t.Helper()
	var ids []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var l listLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		ids = append(ids, l.ID)
	}
	sort.Strings(ids)
	return ids
}

func TestDLQListFilters(t *testing.T) {
	_, brokers, _ := dlqEnv(t)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"all", nil, []string{"a-503", "b-429", "c-400", "d-ttl", "e-sig", "f-loop", "\x1b[31mhostile"}},
		{"reason", []string{"--reason", "max_attempts"}, []string{"a-503", "b-429", "f-loop"}},
		{"reasons comma", []string{"--reason", "rejected,ttl_expired"}, []string{"c-400", "d-ttl"}},
		{"status repeated", []string{"--status", "429", "--status", "400"}, []string{"b-429", "c-400"}},
		{"tier", []string{"--tier", "tier1"}, []string{"a-503", "c-400", "e-sig"}},
		{"origin url", []string{"--origin", "https://updates.push.services.mozilla.com"}, []string{"c-400"}},
		{"origin host", []string{"--origin", "web.push.apple.com"}, []string{"d-ttl"}},
		{"time range", []string{"--since", "2026-11-21T13:00:00Z", "--until", "2026-11-21T15:00:00Z"}, []string{"b-429", "c-400"}},
		{"since a duration ago", []string{"--since", "876000h", "--reason", "rejected"}, []string{"c-400"}},
		{"combined", []string{"--reason", "max_attempts", "--status", "503", "--tier", "tier1", "--origin", "fcm.googleapis.com"}, []string{"a-503"}},
		{"app", []string{"--app", "shop"}, []string{"b-429"}},
		{"apps comma", []string{"--app", "shop,news"}, []string{"b-429", "d-ttl"}},
		{"default app", []string{"--app", "default"}, []string{"a-503", "c-400", "e-sig", "f-loop", "\x1b[31mhostile"}},
		{"app nobody has", []string{"--app", "blog"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"dlq", "list", "--brokers", brokers, "--format", "json"}, tt.args...)
			code, stdout, stderr := runTool(t, "", nil, args...)
			if code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr)
			}
			want := slices.Clone(tt.want)
			sort.Strings(want)
			if got := jsonIDs(t, stdout); !slices.Equal(got, want) {
				t.Errorf("listed %q, want %q", got, want)
			}
			if len(want) > 0 && !strings.Contains(stderr, "count by reason") {
				t.Errorf("no count by reason on stderr:\n%s", stderr)
			}
		})
	}
}

func TestDLQListJSON(t *testing.T) {
	_, brokers, sub := dlqEnv(t)
	code, stdout, stderr := runTool(t, "", nil, "dlq", "list", "--brokers", brokers, "--format", "json", "--status", "429")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	var got listLine
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%q: %v", stdout, err)
	}
	want := listLine{DLQ: got.DLQ, ID: "b-429", Tier: "tier2", App: "shop", Reason: "max_attempts", Status: 429, Attempts: 5,
		Origin: "https://fcm.googleapis.com", Source: "push.tier2/1/2", DeadLetteredAt: dlqT0.Add(time.Hour),
		FirstSeen: dlqT0.Add(time.Hour - time.Minute), Error: "push service said no"}
	if got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if !strings.HasPrefix(got.DLQ, "push.dlq/") {
		t.Errorf("dlq %q, want push.dlq/partition/offset", got.DLQ)
	}
	assertNoSecrets(t, stdout+stderr, sub)
	if !strings.Contains(stderr, "1 matching record;") || !strings.Contains(stderr, "max_attempts") {
		t.Errorf("count by reason missing from stderr:\n%s", stderr)
	}
}

func assertNoSecrets(t *testing.T, out string, sub pushsim.Subscription) {
	t.Helper()
	for _, secret := range []string{"SECRET-TOKEN", "SECRET-PAYLOAD", sub.P256dh, sub.Auth} {
		if strings.Contains(out, secret) {
			t.Errorf("output holds %q:\n%s", secret, out)
		}
	}
}

func TestDLQListTable(t *testing.T) {
	_, brokers, sub := dlqEnv(t)
	code, stdout, stderr := runTool(t, "", nil, "dlq", "list", "--brokers", brokers)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	assertNoSecrets(t, stdout+stderr, sub)
	if strings.ContainsRune(stdout, '\x1b') {
		t.Errorf("a terminal escape from a record reached the table:\n%q", stdout)
	}
	lines := strings.Split(stdout, "\n")
	if h := strings.Fields(lines[0]); !slices.Equal(h, []string{"ID", "TIER", "APP", "REASON", "STATUS", "ATTEMPTS", "REDRIVES", "ORIGIN", "DEAD-LETTERED", "ERROR"}) {
		t.Errorf("header %q", lines[0])
	}
	var row []string
	for _, l := range lines {
		if strings.HasPrefix(l, "c-400") {
			row = strings.Fields(l)
		}
	}
	if want := []string{"c-400", "tier1", "default", "rejected", "400", "5", "0", "updates.push.services.mozilla.com", "2026-11-21T14:00:00Z", "push", "service", "said", "no"}; !slices.Equal(row, want) {
		t.Errorf("row %q, want %q", row, want)
	}
	if !strings.Contains(stdout, "\n7 matching records; count by reason:\n") {
		t.Errorf("no count by reason:\n%s", stdout)
	}
	counts := make(map[string]string)
	for _, l := range lines[slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, "count by reason") })+1:] {
		if f := strings.Fields(l); len(f) == 2 {
			counts[f[0]] = f[1]
		}
	}
	wantCounts := map[string]string{"max_attempts": "3", "rejected": "1", "ttl_expired": "1", "bad_signature": "1", "invalid_event": "1"}
	if !maps.Equal(counts, wantCounts) {
		t.Errorf("count by reason %v, want %v", counts, wantCounts)
	}

	code, stdout, _ = runTool(t, "", nil, "dlq", "list", "--brokers", brokers, "--limit", "2")
	if code != 0 || !strings.Contains(stdout, "showing 2 of 7 matching records") || strings.Count(stdout, "push service said no") != 2 {
		t.Errorf("--limit 2: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = runTool(t, "", nil, "dlq", "list", "--brokers", brokers, "--reason", "payload_too_large")
	if code != 0 || !strings.Contains(stdout, "no records match") {
		t.Errorf("no match: exit %d\n%s", code, stdout)
	}
}

func TestDLQRedriveCLI(t *testing.T) {
	env, brokers, sub := dlqEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	filter := []string{"--brokers", brokers, "--origin", "fcm.googleapis.com", "--reason", "max_attempts,bad_signature"}

	code, stdout, stderr := runTool(t, "", nil, append([]string{"dlq", "redrive", "--dry-run"}, filter...)...)
	if code != 0 {
		t.Fatalf("dry run: exit %d; stderr:\n%s", code, stderr)
	}
	assertNoSecrets(t, stdout+stderr, sub)
	for _, want := range []string{"a-503", "b-429", "dry run: would redrive 2 records (tier1 1, tier2 1) of 7", "nothing produced, nothing committed",
		"passed over 5: bad_signature 1, filtered 3, loop_guard 1"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "f-loop") || strings.Contains(stdout, "e-sig") {
		t.Errorf("dry run lists a refused record:\n%s", stdout)
	}
	if strings.Contains(stderr, "[=") {
		t.Errorf("progress bar drawn on a stderr that is no terminal:\n%s", stderr)
	}

	code, stdout, stderr = runTool(t, "", nil, append([]string{"dlq", "redrive", "--rate", "0"}, filter...)...)
	if code != 0 || !strings.Contains(stdout, "redrove 2 records (tier1 1, tier2 1) of 7; position committed in group tierpush-redrive") {
		t.Fatalf("redrive: exit %d\n%s\n%s", code, stdout, stderr)
	}
	rs, err := env.ReadRecords(ctx, "push.tier1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if string(rs[0].Value) != string(dlqFixture[0].record(sub).Value) {
		t.Errorf("push.tier1 holds %q, want the event intact", rs[0].Value)
	}

	code, stdout, _ = runTool(t, "", nil, append([]string{"dlq", "redrive"}, filter...)...)
	if code != 0 || !strings.Contains(stdout, "redrove 0 records of 0") {
		t.Errorf("second redrive: exit %d\n%s", code, stdout)
	}
}

// TestDLQRedriveWouldFail: by default a redrive passes over the reasons
// that would fail again and says how many, why, and how to redrive them;
// naming the reason redrives them.
func TestDLQRedriveWouldFail(t *testing.T) {
	_, brokers, sub := dlqEnv(t)
	code, stdout, stderr := runTool(t, "", nil, "dlq", "redrive", "--dry-run", "--brokers", brokers)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	assertNoSecrets(t, stdout+stderr, sub)
	for _, want := range []string{
		"would redrive 3 records (tier1 1, tier2 1, tier3 1) of 7",
		"passed over 4: bad_signature 1, loop_guard 1, would_fail 2",
		"1 invalid_event record would fail again, not redriven: the event does not decode",
		"1 rejected record would fail again, not redriven: the push service refused the request itself",
		"name the reason to redrive them (--reason invalid_event) with another --group",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "c-400") {
		t.Errorf("the dry run lists a rejected record it passes over:\n%s", stdout)
	}
	code, stdout, stderr = runTool(t, "", nil, "dlq", "redrive", "--dry-run", "--brokers", brokers, "--reason", "rejected")
	if code != 0 || !strings.Contains(stdout, "c-400") || !strings.Contains(stdout, "would redrive 1 record (tier1 1) of 7") || strings.Contains(stdout, "would fail again") {
		t.Errorf("--reason rejected: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

func TestDLQBadFlags(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"no verb", nil, []string{"dlq"}, "dlq list|redrive"},
		{"unknown verb", nil, []string{"dlq", "purge"}, "dlq list|redrive"},
		{"unknown reason", nil, []string{"dlq", "list", "--reason", "delivered"}, "--reason"},
		{"bad status", nil, []string{"dlq", "list", "--status", "5xx"}, "--status"},
		{"bad tier", nil, []string{"dlq", "list", "--tier", "tier9"}, "--tier"},
		{"bad origin", nil, []string{"dlq", "list", "--origin", "ftp://fcm.googleapis.com"}, "--origin"},
		{"bad app", nil, []string{"dlq", "list", "--app", "shop/eu"}, "--app"},
		{"redrive bad app", nil, []string{"dlq", "redrive", "--app", "shop eu"}, "--app"},
		{"bad since", nil, []string{"dlq", "list", "--since", "yesterday"}, "--since"},
		{"until before since", nil, []string{"dlq", "list", "--since", "1h", "--until", "2h"}, "--until"},
		{"bad format", nil, []string{"dlq", "list", "--format", "xml"}, "--format"},
		{"negative limit", nil, []string{"dlq", "list", "--limit", "-1"}, "--limit"},
		{"negative rate", nil, []string{"dlq", "redrive", "--rate", "-1"}, "--rate"},
		{"rate not a number", nil, []string{"dlq", "redrive", "--rate", "fast"}, "rate"},
		{"zero max redrives", nil, []string{"dlq", "redrive", "--max-redrives", "0"}, "--max-redrives"},
		{"processor group", nil, []string{"dlq", "redrive", "--group", "tierpush"}, "--group"},
		{"processor group from env", []string{"TIERPUSH_GROUP=tierpush-prod"}, []string{"dlq", "redrive"}, "--group"},
		{"redrive filter", nil, []string{"dlq", "redrive", "--reason", "gone"}, "--reason"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runTool(t, "", tt.env, tt.args...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, want 2 naming %q; stderr:\n%s", code, tt.want, stderr)
			}
		})
	}
}

func TestProgressBar(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	if b := newProgressBar(new(bytes.Buffer), false, clock); b.w != nil {
		t.Error("progress bar on a buffer, which is no terminal")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if b := newProgressBar(w, false, clock); b.w != nil {
		t.Error("progress bar on a pipe, which is no terminal")
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if b := newProgressBar(tty, true, clock); b.w != nil {
			t.Error("progress bar with --quiet")
		}
	}

	var out bytes.Buffer
	b := &progressBar{w: &out, now: clock}
	b.start(4)
	b.add(dlq.Result{Action: dlq.ActionRedriven})
	b.add(dlq.Result{Action: dlq.ActionSkipped}) // within 100 ms: not drawn
	now = now.Add(time.Second)
	b.add(dlq.Result{Action: dlq.ActionRedriven})
	b.finish()
	want := "\r[                              ] 0/4  0 redriven  0 passed over" +
		"\r[======================        ] 3/4  2 redriven  1 passed over" +
		"\r[======================        ] 3/4  2 redriven  1 passed over\n"
	if got := out.String(); got != want {
		t.Errorf("drew\n%q\nwant\n%q", got, want)
	}
}

func TestTableCell(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "-"},
		{"evt-01", "evt-01"},
		{"a\tb\nc", "a b c"},
		{"\x1b[31mred\x07", "?[31mred?"},
		{"caf\xe9", "caf?"},
		{strings.Repeat("x", 50), strings.Repeat("x", 40) + "…"},
	}
	for _, tt := range tests {
		if got := tableCell(tt.in, 40); got != tt.want {
			t.Errorf("tableCell(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
