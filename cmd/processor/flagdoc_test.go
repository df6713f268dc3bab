package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFlagGroups: every flag of processor run has a group of run --help,
// and the metadata names no flag that does not exist.
func TestFlagGroups(t *testing.T) {
	fs := runFlags()
	fs.String("config", "", configUsage)
	var groups []string
	for _, g := range runGroups {
		groups = append(groups, g.name)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if g := groupOf(f.Name); !slices.Contains(groups, g) {
			t.Errorf("--%s has no group of run --help (got %q): add it to flagGroups or groupPrefixes", f.Name, g)
		}
	})
	for name := range flagGroups {
		if fs.Lookup(name) == nil {
			t.Errorf("flagGroups names --%s, which processor run does not have", name)
		}
	}
	for name := range deprecatedFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("deprecatedFlags names --%s, which processor run does not have", name)
		}
	}
}

// TestRunHelp: run --help lists every current flag once, under its group,
// groups in order, and none of the deprecated ones.
func TestRunHelp(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"run", "--help"}, &out, &out); err != flag.ErrHelp {
		t.Fatalf("run --help = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	last := -1
	for _, g := range runGroups {
		i := strings.Index(help, "\n"+g.name+":")
		if i < 0 || i < last {
			t.Errorf("group %s missing or out of order in:\n%s", g.name, help)
		}
		last = i
	}
	fs := runFlags()
	fs.VisitAll(func(f *flag.Flag) {
		n := strings.Count(help, "  --"+f.Name+" ") + strings.Count(help, "  --"+f.Name+"\n")
		_, deprecated := deprecatedFlags[f.Name]
		switch {
		case deprecated && n != 0:
			t.Errorf("deprecated --%s listed in run --help", f.Name)
		case !deprecated && n != 1:
			t.Errorf("--%s listed %d times in run --help, want once", f.Name, n)
		}
	})
	// Under its own group: the first heading above the flag.
	for _, name := range []string{"brokers", "kafka-tls", "vapid-keys", "max-in-flight", "pacing-cut-rate", "partitions", "log-level"} {
		i := strings.Index(help, "  --"+name)
		heading := help[strings.LastIndex(help[:i], "\n\n")+2:]
		heading = heading[:strings.Index(heading, ":")]
		if want := groupOf(name); heading != want {
			t.Errorf("--%s is under %q, want %q", name, heading, want)
		}
	}
	hidden := fmt.Sprintf("Not listed: %d deprecated flags", len(deprecatedFlags))
	if !strings.Contains(help, "[TIERPUSH_MAX_IN_FLIGHT]") || !strings.Contains(help, hidden) {
		t.Errorf("help lacks the variables or the deprecated count:\n%s", help)
	}
}

// TestDeprecatedFlags: a deprecated flag still parses, from the command
// line, its variable or the config file, and the processor warns that it
// is ignored.
func TestDeprecatedFlags(t *testing.T) {
	k := newKeyPair(t)
	base := []string{"--brokers", "127.0.0.1:1", "--hmac-key", strings.Repeat("k", 32),
		"--vapid-public-key", k.pub, "--vapid-private-key", k.priv, "--vapid-subject", "mailto:ops@example.com"}
	file := filepath.Join(t.TempDir(), "old.yaml")
	if err := os.WriteFile(file, []byte("pacing:\n  raise_every: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  string
		flag string
	}{
		{"command line", []string{"--pacing-calm-rate", "0.01"}, "", "--pacing-calm-rate"},
		{"variable", nil, "TIERPUSH_PACING_SENDER_WIDE_SUBS=5", "--pacing-sender-wide-subs"},
		{"config file", []string{"--config", file}, "", "--pacing-raise-every"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				name, value, _ := strings.Cut(tt.env, "=")
				t.Setenv(name, value)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // stop right after start-up: the warning comes before
			var stderr bytes.Buffer
			err := runProcessor(ctx, append(slices.Clone(base), tt.args...), &bytes.Buffer{}, &stderr)
			if err != nil && strings.Contains(err.Error(), "usage") {
				t.Fatalf("refused: %v", err)
			}
			if got := stderr.String(); !strings.Contains(got, "deprecated flag ignored") || !strings.Contains(got, "flag="+tt.flag) {
				t.Errorf("no warning naming %s:\n%s", tt.flag, got)
			}
		})
	}
}

// TestFlagReference: the reference lists every flag with its group,
// variable, config key and default, deprecated ones marked, by group.
func TestFlagReference(t *testing.T) {
	docs := FlagReference()
	fs := runFlags()
	n := 1 // --config
	fs.VisitAll(func(*flag.Flag) { n++ })
	if len(docs) != n {
		t.Fatalf("%d flags, want %d", len(docs), n)
	}
	by := make(map[string]FlagDoc)
	lastGroup := 0
	for _, d := range docs {
		by[d.Name] = d
		i := slices.IndexFunc(runGroups, func(g struct{ name, about string }) bool { return g.name == d.Group })
		if i < lastGroup {
			t.Errorf("--%s (%s) out of group order", d.Name, d.Group)
		}
		lastGroup = i
	}
	want := map[string]FlagDoc{
		"max-in-flight":    {Group: "Delivery", Env: "TIERPUSH_MAX_IN_FLIGHT", ConfigKey: "max-in-flight", Type: "int", Default: by["max-in-flight"].Default},
		"pacing-cut-rate":  {Group: "Pacing", Env: "TIERPUSH_PACING_CUT_RATE", ConfigKey: "pacing-cut-rate", Section: "pacing.cut_rate", Type: "float"},
		"pacing":           {Group: "Pacing", Env: "TIERPUSH_PACING", ConfigKey: "pacing", Section: "pacing.enabled", Default: "true"},
		"pacing-calm-rate": {Group: "Pacing", Deprecated: deprecatedFlags["pacing-calm-rate"]},
		"config":           {Group: "General", Env: "TIERPUSH_CONFIG", Type: "string"},
	}
	for name, w := range want {
		d := by[name]
		if d.Group != w.Group || (w.Env != "" && d.Env != w.Env) || (w.ConfigKey != "" && d.ConfigKey != w.ConfigKey) ||
			d.Section != w.Section && w.Section != "" || (w.Type != "" && d.Type != w.Type) || (w.Default != "" && d.Default != w.Default) ||
			d.Deprecated != w.Deprecated || d.Usage == "" {
			t.Errorf("--%s: %+v, want %+v", name, d, w)
		}
	}
	if got := by["config"].ConfigKey; got != "" {
		t.Errorf("--config has config key %q; a config file cannot name another", got)
	}
	if got, want := by["max-in-flight"].Default, strconv.Itoa(DefaultConfig().MaxInFlight); got != want {
		t.Errorf("--max-in-flight default %q, want %q", got, want)
	}
}
