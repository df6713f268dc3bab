package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
)

// The metadata of `processor run`'s flags, in one place: the group each is
// listed under in --help, and the deprecated ones, which --help does not
// list and which still parse, with a warning. --help, the warnings and
// FlagReference (the source of a generated configuration reference) all
// read it from here. A flag added without a group fails TestFlagGroups.

// runGroups are the sections of run --help, in order.
var runGroups = []struct{ name, about string }{
	{"General", ""},
	{"Kafka", "brokers, consumer group, TLS and SASL; the embedded broker for development"},
	{"VAPID", "the application server identities that sign pushes"},
	{"Delivery", "sending, the retry ladders' timing, signed retry records, which endpoints may be reached"},
	{"Pacing", "adaptive pacing per push service (the config file's pacing: section)"},
	{"Topics", "topics created at start"},
	{"Telemetry", "logs, /metrics, /healthz and /readyz (OpenTelemetry reads the OTEL_* variables)"},
}

// flagGroups names the group of each flag that no prefix of groupPrefixes
// places.
var flagGroups = map[string]string{
	"config": "General", "dev": "General",

	"brokers": "Kafka", "group": "Kafka", "instance-id": "Kafka",
	"embedded": "Kafka", "embedded-addr": "Kafka", "data-dir": "Kafka",
	"group-protocol": "Kafka", "session-timeout": "Kafka", "heartbeat-interval": "Kafka", "remove-silent-after": "Kafka",

	"max-in-flight": "Delivery", "max-held": "Delivery", "retry-lateness": "Delivery",
	"default-ttl": "Delivery", "send-timeout": "Delivery", "drain-timeout": "Delivery",
	"retry-jitter": "Delivery", "commit-interval": "Delivery",
	"hmac-key": "Delivery", "hmac-key-file": "Delivery", "hmac-key-old": "Delivery", "hmac-key-old-file": "Delivery",
	"allow-insecure-endpoint": "Delivery",

	"topic-prefix": "Topics", "partitions": "Topics", "replication-factor": "Topics",
	"retention": "Topics", "dlq-retention": "Topics",

	"http-addr": "Telemetry", "log-format": "Telemetry", "log-level": "Telemetry",
}

// groupPrefixes place whole families of flags.
var groupPrefixes = []struct{ prefix, group string }{
	{"pacing", "Pacing"}, // --pacing and every --pacing-*
	{"kafka-", "Kafka"},
	{"vapid-", "VAPID"},
	{"endpoint-", "Delivery"},
}

// deprecatedFlags are accepted for old scripts and config files, and
// ignored: the value says why.
var deprecatedFlags = map[string]string{
	"pacing-window":             "no longer used: the rate law judges every answer since the last cut",
	"pacing-start-rate":         "no longer used: a new push service ramps by its round trips, a known one starts at the group's estimate",
	"pacing-cut-cooldown":       "no longer used: a cut judges only what was sent after the last one",
	"pacing-confidence":         "no longer used: the cut is a sequential test (CUSUM)",
	"pacing-probe-rate":         "no longer used: the rate grows by the cubic law of docs/pacing.md",
	"pacing-probe-double":       "no longer used: the rate grows by the cubic law of docs/pacing.md",
	"pacing-probe-max":          "no longer used: the rate grows by the cubic law of docs/pacing.md",
	"pacing-retry-share":        "no longer used: retries and first sends wait in one queue per tier",
	"pacing-queue":              "no longer used: a send waits in memory unless it would wait longer than its retry step",
	"pacing-shed-after":         "no longer used: a send waits in memory unless it would wait longer than its retry step",
	"pacing-calm-rate":          "no longer used: the rate controller replaced the concurrency raise",
	"pacing-calm-for":           "no longer used: the rate controller replaced the concurrency raise",
	"pacing-raise-every":        "no longer used: the rate controller replaced the concurrency raise",
	"pacing-raise-factor":       "no longer used: the rate controller replaced the concurrency raise",
	"pacing-sender-wide-subs":   "no longer used: the sender-wide rule is gone",
	"pacing-sender-wide-window": "no longer used: the sender-wide rule is gone",
	"pacing-sender-wide-rate":   "no longer used: the sender-wide rule is gone",
}

// groupOf is the --help group of a flag of `processor run`; "" when it
// has none.
func groupOf(name string) string {
	if g, ok := flagGroups[name]; ok {
		return g
	}
	for _, p := range groupPrefixes {
		if strings.HasPrefix(name, p.prefix) {
			return p.group
		}
	}
	return ""
}

// FlagDoc describes one flag of `processor run` for a configuration
// reference.
type FlagDoc struct {
	Name      string // without dashes: max-in-flight
	Group     string // one of runGroups
	Env       string // TIERPUSH_MAX_IN_FLIGHT
	ConfigKey string // the --config file's key: max-in-flight (max_in_flight reads the same); "" for --config
	// Section is the key under the config file's section, when the flag
	// has one: pacing.cut_rate for --pacing-cut-rate, pacing.enabled for
	// --pacing.
	Section    string
	Type       string // duration, int, string, … ("" for a boolean)
	Default    string
	Usage      string
	Deprecated string // why it is deprecated and ignored; "" for a current flag
}

// docs/configuration.md's flag tables are written from FlagReference and
// the tools' flag sets by configref_test.go:
//
//go:generate go test -run TestConfigurationReference -update

// FlagReference lists every flag of `processor run`, deprecated ones
// included, by group in runGroups' order and by name within a group.
func FlagReference() []FlagDoc {
	fs := runFlags()
	fs.String("config", "", configUsage)
	var docs []FlagDoc
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		d := FlagDoc{
			Name: f.Name, Group: groupOf(f.Name), Env: envName(f.Name), ConfigKey: f.Name,
			Type: typ, Default: f.DefValue, Usage: usage, Deprecated: deprecatedFlags[f.Name],
		}
		if f.Name == "config" {
			d.ConfigKey = "" // a config file cannot name another
		}
		if f.Name == "pacing" {
			d.Section = "pacing.enabled"
		} else if rest, ok := strings.CutPrefix(f.Name, "pacing-"); ok {
			d.Section = "pacing." + strings.ReplaceAll(rest, "-", "_")
		}
		docs = append(docs, d)
	})
	order := func(g string) int {
		return slices.IndexFunc(runGroups, func(x struct{ name, about string }) bool { return x.name == g })
	}
	slices.SortStableFunc(docs, func(a, b FlagDoc) int { return order(a.Group) - order(b.Group) })
	return docs
}

// runUsage prints run --help: the flags by group, without the deprecated
// ones.
func runUsage(fs *flag.FlagSet) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: processor run [flags]\n\nEach flag also reads the variable in brackets and the --config file's key of its name\n(max-in-flight: 2048); a flag wins over its variable, which wins over the file.\n")
		byGroup := make(map[string][]*flag.Flag)
		hidden := 0
		fs.VisitAll(func(f *flag.Flag) {
			if _, ok := deprecatedFlags[f.Name]; ok {
				hidden++
				return
			}
			g := groupOf(f.Name)
			if g == "" {
				g = "Other"
			}
			byGroup[g] = append(byGroup[g], f)
		})
		for _, g := range append(slices.Clone(runGroups), struct{ name, about string }{"Other", ""}) {
			flags := byGroup[g.name]
			if len(flags) == 0 {
				continue
			}
			fmt.Fprintf(w, "\n%s:", g.name)
			if g.about != "" {
				fmt.Fprintf(w, " %s", g.about)
			}
			fmt.Fprintln(w)
			for _, f := range flags {
				printFlag(w, f)
			}
		}
		if hidden > 0 {
			fmt.Fprintf(w, "\nNot listed: %d deprecated flags, still accepted (each with a warning) and ignored.\n", hidden)
		}
	}
}

// printFlag prints one flag as flag.PrintDefaults does, with its variable.
func printFlag(w io.Writer, f *flag.Flag) {
	typ, usage := flag.UnquoteUsage(f)
	line := "  --" + f.Name
	if typ != "" {
		line += " " + typ
	}
	fmt.Fprintf(w, "%s\n    \t[%s] %s", line, envName(f.Name), strings.ReplaceAll(usage, "\n", "\n    \t"))
	if !isZeroDefault(f) {
		if typ == "string" {
			fmt.Fprintf(w, " (default %q)", f.DefValue)
		} else {
			fmt.Fprintf(w, " (default %v)", f.DefValue)
		}
	}
	fmt.Fprintln(w)
}

// isZeroDefault reports whether f's default is its type's zero value, as
// flag.PrintDefaults leaves unsaid.
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "0s", "false", "[]":
		return true
	}
	t := reflect.TypeOf(f.Value)
	if t.Kind() == reflect.Pointer {
		z := reflect.New(t.Elem()).Interface().(flag.Value)
		return f.DefValue == z.String()
	}
	return false
}

// warnDeprecated logs each deprecated flag that was set, on the command
// line, by its variable or in the config file.
func warnDeprecated(fs *flag.FlagSet, log *slog.Logger) {
	fs.Visit(func(f *flag.Flag) {
		if why, ok := deprecatedFlags[f.Name]; ok {
			log.Warn("deprecated flag ignored (given on the command line, as "+envName(f.Name)+" or in --config)",
				"flag", "--"+f.Name, "why", why)
		}
	})
}
