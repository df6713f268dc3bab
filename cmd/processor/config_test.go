package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/tiers"
)

// TestInstanceIDSources: --instance-id is read from the flag, from
// TIERPUSH_INSTANCE_ID and from the instance-id key of --config, and is
// empty (dynamic membership) by default.
func TestInstanceIDSources(t *testing.T) {
	yaml := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(yaml, []byte("instance-id: proc-from-yaml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"default", nil, "", ""},
		{"flag", []string{"--instance-id", "proc-0"}, "", "proc-0"},
		{"env", nil, "tierpush-1", "tierpush-1"},
		{"yaml", []string{"--config", yaml}, "", "proc-from-yaml"},
		{"flag over env", []string{"--instance-id", "proc-0"}, "tierpush-1", "proc-0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TIERPUSH_INSTANCE_ID", tt.env)
			if tt.env == "" {
				os.Unsetenv("TIERPUSH_INSTANCE_ID")
			}
			cfg := DefaultConfig()
			fs := newFlagSet("processor run", io.Discard)
			cfg.register(fs)
			if err := parseFlags(fs, tt.args); err != nil {
				t.Fatalf("parseFlags(%q): %v", tt.args, err)
			}
			if got := cfg.InstanceID; got != tt.want {
				t.Errorf("InstanceID = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestValidateInstanceID: Kafka's rules for group.instance.id, each error
// naming the flag.
func TestValidateInstanceID(t *testing.T) {
	tests := []struct {
		id     string
		wantOK bool
	}{
		{"", true},
		{"proc-0", true},
		{"tierpush-2.prod_eu", true},
		{strings.Repeat("a", 249), true},
		{strings.Repeat("a", 250), false},
		{".", false},
		{"..", false},
		{"proc 0", false},
		{"proc/0", false},
		{"pröc", false},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Dev = true // no VAPID or HMAC key needed
			cfg.InstanceID = tt.id
			err := cfg.Validate()
			if gotOK := err == nil; gotOK != tt.wantOK {
				t.Fatalf("Validate() with --instance-id %q = %v, want ok %v", tt.id, err, tt.wantOK)
			}
			if err != nil && !strings.Contains(err.Error(), "--instance-id") {
				t.Errorf("error %q does not name --instance-id", err)
			}
		})
	}
}

// TestInstanceIDExitCode: a bad --instance-id stops the processor at start
// with exit 2, naming the flag.
func TestInstanceIDExitCode(t *testing.T) {
	cmd := exec.Command(binary, "--dev", "--http-addr", "", "--instance-id", "proc 0")
	out, err := cmd.CombinedOutput()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	if code != 2 || !strings.Contains(string(out), "--instance-id") {
		t.Errorf("exit %d, want 2 naming --instance-id; output:\n%s", code, out)
	}
}

// writeConfig writes a --config file and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigFileErrors: every mistake in the --config file — a bad ladder,
// a bad pacing value, a key no flag has — exits 2 naming its key and what
// was wanted, before anything starts.
func TestConfigFileErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"step below 1s", "tiers:\n  tier2:\n    steps: [1s, 500ms]\n", "tiers.tier2.steps[1]: 500ms, want at least 1s"},
		{"step above 24h", "tiers:\n  tier1:\n    steps: [2s, 48h]\n", "tiers.tier1.steps[1]: 48h0m0s, want at most 24h"},
		{"steps not ascending", "tiers:\n  tier3:\n    steps: [60s, 8s]\n", "tiers.tier3.steps[1]: 8s, want longer than steps[0]"},
		{"steps equal", "tiers:\n  tier3:\n    steps: [8s, 8s]\n", "tiers.tier3.steps[1]"},
		{"too many steps", "tiers:\n  tier1:\n    steps: [1s, 2s, 3s, 4s, 5s, 6s, 7s, 8s, 9s, 10s, 11s]\n", "tiers.tier1.steps: 11 steps, want at most 10"},
		{"no steps", "tiers:\n  tier1:\n    steps: []\n", "tiers.tier1.steps: empty"},
		{"fractional step", "tiers:\n  tier1:\n    steps: [1500ms]\n", "tiers.tier1.steps[0]: 1.5s, want whole seconds"},
		{"bad duration", "tiers:\n  tier2:\n    steps: [1s, 5 seconds]\n", `tiers.tier2.steps[1]: want a duration like 5s, got "5 seconds"`},
		{"bare number as a step", "tiers:\n  tier2:\n    steps: [5]\n", "tiers.tier2.steps[0]: want a duration like 5s"},
		{"attempts 0", "tiers:\n  tier2:\n    max_attempts: 0\n", "tiers.tier2.max_attempts: 0, want 1..20"},
		{"attempts 21", "tiers:\n  tier2:\n    max_attempts: 21\n", "tiers.tier2.max_attempts: 21, want 1..20"},
		{"attempts not a number", "tiers:\n  tier2:\n    max_attempts: lots\n", "tiers.tier2.max_attempts: want a whole number"},
		{"weight 0", "tiers:\n  tier3:\n    weight: 0\n", "tiers.tier3.weight: 0, want 1..1000"},
		{"unknown tier", "tiers:\n  tier4:\n    weight: 1\n", "tiers.tier4: unknown tier"},
		{"unknown ladder key", "tiers:\n  tier1:\n    retries: 3\n", "tiers.tier1.retries: unknown key"},
		{"unknown pacing key", "pacing:\n  cut_rat: 0.05\n", "pacing.cut_rat: unknown key, want one of cut_factor, cut_rate, default_pause, "},
		{"bad pacing duration", "pacing:\n  open_for: soon\n", `pacing.open_for: want a duration like 5s, got "soon"`},
		{"bad pacing number", "pacing:\n  cut_rate: high\n", "pacing.cut_rate: want a number like 0.05"},
		{"pacing value out of range", "pacing:\n  cut_rate: 2\n", "--pacing-cut-rate"},
		{"bad flat duration", "send-timeout: 5\n", `send-timeout: want a duration like 5s, got "5"`},
		{"unknown flat key", "max-inflight: 5\n", "max-inflight: unknown key"},
		{"not YAML", "tiers: [\n", "not YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// --dev needs no keys; it would start everything if the file
			// passed.
			cmd := exec.Command(binary, "--dev", "--http-addr", "", "--config", writeConfig(t, tt.yaml))
			out, err := cmd.CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if code != 2 || !strings.Contains(string(out), tt.want) {
				t.Errorf("exit %d, want 2 naming %q; output:\n%s", code, tt.want, out)
			}
			// A mistake the file reading finds says where it is.
			if !strings.HasPrefix(tt.want, "--") && !filePos.MatchString(string(out)) {
				t.Errorf("no --config file:line:column in front of the error:\n%s", out)
			}
			if strings.Contains(string(out), "usage of") {
				t.Errorf("printed the usage page:\n%s", out)
			}
		})
	}
}

// filePos is a --config error's start: the file, the line and (but for a
// YAML syntax error) the column.
var filePos = regexp.MustCompile(`processor: --config \S+config\.yaml:\d+(:\d+)?: `)

// TestConfigFileErrorPositions: each mistake is named at its line and
// column, several at once each on its own line.
func TestConfigFileErrorPositions(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want []string
	}{
		// Mistakes of shape, found as the file is read.
		{"group: tp\ntiers:\n  tier2:\n    steps: [1s, 500ms]\n    weight: 0\nbrokers: [a:9092, {b: c}]\n", []string{
			":4:17: tiers.tier2.steps[1]: 500ms, want at least 1s",
			":5:5: tiers.tier2.weight: 0, want 1..1000",
			":6:19: brokers[1]: want a single value, got a map",
		}},
		// Mistakes of keys and values, found as the flags are set.
		{"group: tp\nmax-in-flight: lots\npacing:\n  cut_rat: 0.05\n", []string{
			`:2:1: max-in-flight: want a whole number, got "lots"`,
			":4:3: pacing.cut_rat: unknown key",
		}},
	} {
		path := writeConfig(t, tt.yaml)
		code, _, stderr := runTool(t, "", nil, "--dev", "--http-addr", "", "--config", path)
		if code != 2 {
			t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
		}
		for _, w := range tt.want {
			if !strings.Contains(stderr, "--config "+path+w) {
				t.Errorf("stderr lacks %q:\n%s", "--config "+path+w, stderr)
			}
		}
	}
}

// TestConfigPrecedence: flags over TIERPUSH_* variables over the --config
// file, for flat keys and for pacing: keys alike; a flag the file does not
// name keeps its default; tiers: come from the file alone.
func TestConfigPrecedence(t *testing.T) {
	yaml := writeConfig(t, `max-in-flight: 300
send-timeout: 3s
pacing-halt-rate: 0.3
pacing:
  cut_rate: 0.07
  open_for: 12s
  max-concurrency: 64
tiers:
  tier2:
    steps: [1s, 5s]
    max_attempts: 3
    weight: 3
`)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		inFly   int
		cutRate float64
		openFor time.Duration
	}{
		{"file", []string{"--config", yaml}, nil, 300, 0.07, 12 * time.Second},
		{"env over file", []string{"--config", yaml}, map[string]string{"TIERPUSH_MAX_IN_FLIGHT": "400", "TIERPUSH_PACING_CUT_RATE": "0.08"}, 400, 0.08, 12 * time.Second},
		{"flag over env and file", []string{"--config", yaml, "--max-in-flight", "500", "--pacing-open-for", "20s"}, map[string]string{"TIERPUSH_MAX_IN_FLIGHT": "400"}, 500, 0.07, 20 * time.Second},
		{"file named by env", nil, map[string]string{"TIERPUSH_CONFIG": yaml}, 300, 0.07, 12 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"TIERPUSH_MAX_IN_FLIGHT", "TIERPUSH_PACING_CUT_RATE", "TIERPUSH_CONFIG"} {
				t.Setenv(k, tt.env[k])
				if tt.env[k] == "" {
					os.Unsetenv(k)
				}
			}
			cfg := DefaultConfig()
			fs := newFlagSet("processor run", io.Discard)
			cfg.register(fs)
			if err := parseFlags(fs, tt.args, withTiers(&cfg.Tiers)); err != nil {
				t.Fatal(err)
			}
			if cfg.MaxInFlight != tt.inFly || cfg.Pacing.CutRate != tt.cutRate || cfg.Pacing.OpenFor != tt.openFor {
				t.Errorf("max-in-flight %d, pacing-cut-rate %g, pacing-open-for %s; want %d, %g, %s",
					cfg.MaxInFlight, cfg.Pacing.CutRate, cfg.Pacing.OpenFor, tt.inFly, tt.cutRate, tt.openFor)
			}
			if cfg.SendTimeout != 3*time.Second || cfg.Pacing.HaltRate != 0.3 || cfg.Pacing.MaxLimit != 64 {
				t.Errorf("send-timeout %s, pacing-halt-rate %g, pacing-max-concurrency %d; want the file's 3s, 0.3, 64", cfg.SendTimeout, cfg.Pacing.HaltRate, cfg.Pacing.MaxLimit)
			}
			if def := DefaultConfig(); cfg.DrainTimeout != def.DrainTimeout || cfg.Pacing.Probes != def.Pacing.Probes {
				t.Errorf("keys the file does not name changed: drain-timeout %s, pacing-probes %d", cfg.DrainTimeout, cfg.Pacing.Probes)
			}
			want := tiers.DefaultPolicy()
			want.Tier2 = tiers.Ladder{Steps: []time.Duration{time.Second, 5 * time.Second}, MaxAttempts: 3, Weight: 3}
			for _, tier := range tiers.All {
				got, w := cfg.Tiers.Ladder(tier), want.Ladder(tier)
				if !slices.Equal(got.Steps, w.Steps) || got.MaxAttempts != w.MaxAttempts || got.Weight != w.Weight {
					t.Errorf("%s: %+v, want %+v", tier, *got, *w)
				}
			}
		})
	}
}

// TestPacingKeysFollowTheFlags: every --pacing-* flag the processor has,
// whatever its name, is settable as a key of pacing:, with '_' for '-',
// and an enabled key sets --pacing itself.
func TestPacingKeysFollowTheFlags(t *testing.T) {
	var yaml strings.Builder
	yaml.WriteString("pacing:\n  enabled: false\n")
	var names []string
	runFlags().VisitAll(func(f *flag.Flag) {
		if sub, ok := strings.CutPrefix(f.Name, "pacing-"); ok {
			names = append(names, f.Name)
			// The flag's own default is a valid value of its type.
			fmt.Fprintf(&yaml, "  %s: %q\n", strings.ReplaceAll(sub, "-", "_"), f.DefValue)
		}
	})
	if len(names) < 10 {
		t.Fatalf("only %d --pacing-* flags: %v", len(names), names)
	}
	cfg := DefaultConfig()
	fs := newFlagSet("processor run", io.Discard)
	cfg.register(fs)
	if err := parseFlags(fs, []string{"--config", writeConfig(t, yaml.String())}); err != nil {
		t.Fatalf("%v\n%s", err, yaml.String())
	}
	set := setFlags(fs)
	for _, n := range append(names, "pacing") {
		if !set[n] {
			t.Errorf("--%s was not set from pacing:", n)
		}
	}
	if cfg.Pacing.Enabled {
		t.Error("pacing: {enabled: false} left pacing on")
	}
}

// TestTopicFlags: --partitions and --replication-factor default to the
// spec's values (which --help and the reference show), take what Kafka
// allows and refuse the rest naming the flag.
func TestTopicFlags(t *testing.T) {
	fs := runFlags()
	if got := fs.Lookup("partitions").DefValue; got != "12" {
		t.Errorf("--partitions default %q, want 12", got)
	}
	if got := fs.Lookup("replication-factor").DefValue; got != "-1" {
		t.Errorf("--replication-factor default %q, want -1", got)
	}
	tests := []struct {
		args   []string
		want   string // the error, or "" for none
		wantP  int32
		wantRF int16
	}{
		{[]string{"--partitions", "24", "--replication-factor", "3"}, "", 24, 3},
		{[]string{"--replication-factor", "-1"}, "", 12, -1},
		{[]string{"--partitions", "0"}, "--partitions: want 1..10000", 0, 0},
		{[]string{"--partitions", "twelve"}, "--partitions: want 1..10000", 0, 0},
		{[]string{"--replication-factor", "0"}, "--replication-factor: want -1 or 1..32", 0, 0},
		{[]string{"--replication-factor", "33"}, "--replication-factor: want -1 or 1..32", 0, 0},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			cfg := DefaultConfig()
			fs := newFlagSet("processor run", io.Discard)
			cfg.register(fs)
			err := parseFlags(fs, tt.args)
			switch {
			case tt.want != "":
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("err = %v, want %q", err, tt.want)
				}
			case err != nil:
				t.Errorf("err = %v", err)
			case cfg.Topics.Partitions != tt.wantP || cfg.Topics.ReplicationFactor != tt.wantRF:
				t.Errorf("partitions %d, replication factor %d; want %d, %d", cfg.Topics.Partitions, cfg.Topics.ReplicationFactor, tt.wantP, tt.wantRF)
			}
		})
	}
}

// TestMembershipFlags: --group-protocol takes consumer, classic or auto, and
// the classic session's flags their ranges; a bad one exits 2 naming it.
func TestMembershipFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string // in the error; empty: valid
	}{
		{nil, ""},
		{[]string{"--group-protocol", "consumer"}, ""},
		{[]string{"--group-protocol", "classic", "--session-timeout", "10s", "--heartbeat-interval", "3s"}, ""},
		{[]string{"--group-protocol", "eager"}, "--group-protocol"},
		{[]string{"--session-timeout", "500ms"}, "--session-timeout"},
		{[]string{"--heartbeat-interval", "6s"}, "--heartbeat-interval"},
	} {
		m := defaultMembership(pipeline.DefaultConfig())
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		m.register(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		errs := m.validate()
		switch {
		case tt.want == "" && len(errs) > 0:
			t.Errorf("%v: %v, want valid", tt.args, errs)
		case tt.want != "" && (len(errs) == 0 || !strings.HasPrefix(errs[0].Error(), tt.want+":")):
			t.Errorf("%v: %v, want an error naming %s first", tt.args, errs, tt.want)
		}
	}
}
