package configfile

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/tiers"
)

func TestParseSettings(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []Setting
	}{
		{"empty file", "", nil},
		{"flat keys", "max-in-flight: 2048\nsend-timeout: 5s\nretry-jitter: 0.2\ndev: true\ngroup: tp\n", []Setting{
			{Key: "max-in-flight", Flag: "max-in-flight", Value: "2048", Pos: Pos{1, 1}},
			{Key: "send-timeout", Flag: "send-timeout", Value: "5s", Pos: Pos{2, 1}},
			{Key: "retry-jitter", Flag: "retry-jitter", Value: "0.2", Pos: Pos{3, 1}},
			{Key: "dev", Flag: "dev", Value: "true", Pos: Pos{4, 1}},
			{Key: "group", Flag: "group", Value: "tp", Pos: Pos{5, 1}},
		}},
		{"quoted values, as a chart renders them", `partitions: "12"` + "\n", []Setting{{Key: "partitions", Flag: "partitions", Value: "12", Pos: Pos{1, 1}}}},
		{"underscores read as dashes", "max_in_flight: 10\n", []Setting{{Key: "max_in_flight", Flag: "max-in-flight", Value: "10", Pos: Pos{1, 1}}}},
		{"a list sets a repeatable flag once per element", "brokers: [a:9092, b:9092]\n", []Setting{
			{Key: "brokers[0]", Flag: "brokers", Value: "a:9092", Pos: Pos{1, 11}},
			{Key: "brokers[1]", Flag: "brokers", Value: "b:9092", Pos: Pos{1, 19}},
		}},
		{"empty value", "brokers:\n", []Setting{{Key: "brokers", Flag: "brokers", Value: "", Pos: Pos{1, 1}}}},
		{"pacing as the flat bool", "pacing: false\npacing-cut-rate: 0.1\n", []Setting{
			{Key: "pacing", Flag: "pacing", Value: "false", Pos: Pos{1, 1}},
			{Key: "pacing-cut-rate", Flag: "pacing-cut-rate", Value: "0.1", Pos: Pos{2, 1}},
		}},
		{"pacing section", "pacing:\n  cut_rate: 0.05\n  open_for: 10s\n  max-concurrency: 64\n  enabled: false\n", []Setting{
			{Key: "pacing.cut_rate", Flag: "pacing-cut-rate", Value: "0.05", Pos: Pos{2, 3}},
			{Key: "pacing.open_for", Flag: "pacing-open-for", Value: "10s", Pos: Pos{3, 3}},
			{Key: "pacing.max-concurrency", Flag: "pacing-max-concurrency", Value: "64", Pos: Pos{4, 3}},
			{Key: "pacing.enabled", Flag: "pacing-enabled", Alias: "pacing", Value: "false", Pos: Pos{5, 3}},
		}},
		{"nested sections", "kafka:\n  sasl:\n    mechanism: PLAIN\n", []Setting{{Key: "kafka.sasl.mechanism", Flag: "kafka-sasl-mechanism", Value: "PLAIN", Pos: Pos{3, 5}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(strings.NewReader(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(f.Settings, tt.want) {
				t.Errorf("Settings = %+v\nwant %+v", f.Settings, tt.want)
			}
			if !equalPolicy(f.Tiers, tiers.DefaultPolicy()) {
				t.Errorf("Tiers = %+v, want the defaults", f.Tiers)
			}
		})
	}
}

func TestParseTiers(t *testing.T) {
	s := time.Second
	tests := []struct {
		name string
		yaml string
		edit func(p *tiers.Policy)
	}{
		{"no tiers", "group: x\n", func(*tiers.Policy) {}},
		{"empty tiers", "tiers:\n", func(*tiers.Policy) {}},
		{"the contract's example", "tiers:\n  tier2:\n    steps: [1s, 5s]\n    max_attempts: 3\n    weight: 3\n", func(p *tiers.Policy) {
			p.Tier2 = tiers.Ladder{Steps: []time.Duration{s, 5 * s}, MaxAttempts: 3, Weight: 3}
		}},
		{"a field left out keeps its default", "tiers:\n  tier1:\n    max_attempts: 8\n  tier3:\n    steps: [30s, 1m30s, 1h]\n", func(p *tiers.Policy) {
			p.Tier1.MaxAttempts = 8
			p.Tier3.Steps = []time.Duration{30 * s, 90 * s, time.Hour}
		}},
		{"quoted numbers", "tiers:\n  tier1:\n    max_attempts: \"8\"\n    weight: \"7\"\n", func(p *tiers.Policy) {
			p.Tier1.MaxAttempts, p.Tier1.Weight = 8, 7
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Parse(strings.NewReader(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			want := tiers.DefaultPolicy()
			tt.edit(&want)
			if !equalPolicy(f.Tiers, want) {
				t.Errorf("Tiers = %+v\nwant %+v", f.Tiers, want)
			}
			for _, st := range f.Settings {
				if strings.HasPrefix(st.Key, "tiers") {
					t.Errorf("tiers: gave a flag setting %+v", st)
				}
			}
		})
	}
}

// TestParseErrors: every mistake says where it is (line:column), names its
// key as the file writes it and says what was wanted.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"not YAML", "max-in-flight: [1\n", []string{"1: not YAML: did not find expected ',' or ']'"}},
		{"a map where a value goes", "brokers: [{a: b}]\n", []string{"1:11: brokers[0]: want a single value, got a map"}},
		{"tiers not a map", "tiers: [tier1]\n", []string{"1:8: tiers: want a map of tier1, tier2 or tier3"}},
		{"unknown tier", "tiers:\n  tier4: {weight: 1}\n", []string{"2:3: tiers.tier4: unknown tier"}},
		{"tier not a map", "tiers:\n  tier1: 5s\n", []string{"2:10: tiers.tier1: want a map with steps, max_attempts and weight"}},
		{"unknown ladder key", "tiers:\n  tier2:\n    max_attempt: 3\n", []string{"3:5: tiers.tier2.max_attempt: unknown key, want steps, max_attempts or weight"}},
		{"steps not a list", "tiers:\n  tier2:\n    steps: 5s\n", []string{"3:5: tiers.tier2.steps: want a list of durations like [2s, 8s, 60s], got \"5s\""}},
		{"bad duration", "tiers:\n  tier2:\n    steps: [1s, 5x]\n", []string{`3:17: tiers.tier2.steps[1]: want a duration like 5s, got "5x"`}},
		{"bare number", "tiers:\n  tier2:\n    steps: [5]\n", []string{"3:13: tiers.tier2.steps[0]: want a duration like 5s, got 5"}},
		{"attempts not a number", "tiers:\n  tier2:\n    max_attempts: many\n", []string{`3:5: tiers.tier2.max_attempts: want a whole number, got "many"`}},
		{"weight a fraction", "tiers:\n  tier2:\n    weight: 1.5\n", []string{"3:5: tiers.tier2.weight: want a whole number, got 1.5"}},
		{"step too short", "tiers:\n  tier2:\n    steps: [1s, 500ms]\n", []string{"3:17: tiers.tier2.steps[1]: 500ms, want at least 1s"}},
		{"step too long", "tiers:\n  tier1:\n    steps: [25h]\n", []string{"3:13: tiers.tier1.steps[0]: 25h0m0s, want at most 24h"}},
		{"steps not ascending", "tiers:\n  tier3:\n    steps: [8s, 8s]\n", []string{"3:17: tiers.tier3.steps[1]: 8s, want longer than steps[0] (8s)"}},
		{"too many steps", "tiers:\n  tier3:\n    steps: [1s, 2s, 3s, 4s, 5s, 6s, 7s, 8s, 9s, 10s, 11s]\n", []string{"3:5: tiers.tier3.steps: 11 steps, want at most 10"}},
		{"no steps", "tiers:\n  tier3:\n    steps: []\n", []string{"3:5: tiers.tier3.steps: empty"}},
		{"attempts 0", "tiers:\n  tier1:\n    max_attempts: 0\n", []string{"3:5: tiers.tier1.max_attempts: 0, want 1..20"}},
		{"attempts 21", "tiers:\n  tier1:\n    max_attempts: 21\n", []string{"3:5: tiers.tier1.max_attempts: 21, want 1..20"}},
		{"weight 0", "tiers:\n  tier1:\n    weight: 0\n", []string{"3:5: tiers.tier1.weight: 0, want 1..1000"}},
		{"the root not a map", "- a\n- b\n", []string{"1:1: want a map of keys"}},
		{"a bad value under an anchor's alias", "base: &b [x]\ntiers:\n  tier1:\n    steps: *b\n", []string{"1:11: tiers.tier1.steps[0]: want a duration"}},
		{"every mistake at once", "tiers:\n  tier1:\n    steps: [x]\n  tier2:\n    weight: y\n", []string{"3:13: tiers.tier1.steps[0]:", "5:5: tiers.tier2.weight:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.yaml))
			if err == nil {
				t.Fatalf("Parse = nil error, want one naming %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !linePos.MatchString(line) {
					t.Errorf("error line %q does not start with its line:column", line)
				}
			}
		})
	}
}

// linePos is how each error line starts: line:column, or the line alone
// for a YAML syntax error (the parser gives no column).
var linePos = regexp.MustCompile(`^\d+(:\d+)?: `)

func equalPolicy(a, b tiers.Policy) bool {
	for _, t := range tiers.All {
		x, y := a.Ladder(t), b.Ladder(t)
		if !slices.Equal(x.Steps, y.Steps) || x.MaxAttempts != y.MaxAttempts || x.Weight != y.Weight {
			return false
		}
	}
	return true
}
