package topology

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/tiers"
)

// contractTopics is the full default topic set of docs/design.md, "Topics".
var contractTopics = []string{
	"push.tier1", "push.tier1.retry-2s", "push.tier1.retry-8s", "push.tier1.retry-60s",
	"push.tier2", "push.tier2.retry-2s", "push.tier2.retry-8s", "push.tier2.retry-60s",
	"push.tier3", "push.tier3.retry-8s", "push.tier3.retry-60s",
	"push.dlq", "push.gone", "push.outcomes", "push.pacing", "push.members",
}

func TestNamesAllMatchesContract(t *testing.T) {
	p := tiers.DefaultPolicy()
	n := Names{Prefix: DefaultPrefix}
	got := n.All(&p)
	if !slices.Equal(got, contractTopics) {
		t.Errorf("All() = %q\nwant %q", got, contractTopics)
	}
	if gotIn, wantIn := n.Inputs(&p), contractTopics[:11]; !slices.Equal(gotIn, wantIn) {
		t.Errorf("Inputs() = %q, want %q", gotIn, wantIn)
	}
	if gotOut, wantOut := n.Outputs(), contractTopics[11:14]; !slices.Equal(gotOut, wantOut) {
		t.Errorf("Outputs() = %q, want %q", gotOut, wantOut)
	}
}

func TestNamesAllDoesNotAlias(t *testing.T) {
	p := tiers.DefaultPolicy()
	n := Names{Prefix: DefaultPrefix}
	a := n.All(&p)
	a[0] = "changed"
	if b := n.All(&p); b[0] != "push.tier1" {
		t.Errorf("All()[0] = %q after editing an earlier result", b[0])
	}
}

func TestNames(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"tier1", Names{"push."}.Tier(tiers.Tier1), "push.tier1"},
		{"tier3", Names{"push."}.Tier(tiers.Tier3), "push.tier3"},
		{"retry 2s", Names{"push."}.Retry(tiers.Tier1, 2*time.Second), "push.tier1.retry-2s"},
		{"retry 60s", Names{"push."}.Retry(tiers.Tier3, time.Minute), "push.tier3.retry-60s"},
		{"retry 1m30s", Names{"push."}.Retry(tiers.Tier2, 90*time.Second), "push.tier2.retry-1m30s"},
		{"retry 1h", Names{"push."}.Retry(tiers.Tier2, time.Hour), "push.tier2.retry-1h"},
		{"dlq", Names{"push."}.DLQ(), "push.dlq"},
		{"gone", Names{"push."}.Gone(), "push.gone"},
		{"outcomes", Names{"push."}.Outcomes(), "push.outcomes"},
		{"custom prefix tier", Names{"acme-"}.Tier(tiers.Tier2), "acme-tier2"},
		{"custom prefix retry", Names{"prod.push."}.Retry(tiers.Tier1, 8*time.Second), "prod.push.tier1.retry-8s"},
		{"custom prefix dlq", Names{"prod.push."}.DLQ(), "prod.push.dlq"},
		{"empty prefix", Names{}.Outcomes(), "outcomes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestNamesParse(t *testing.T) {
	p := tiers.DefaultPolicy()
	custom := tiers.DefaultPolicy()
	custom.Tier3.Steps = []time.Duration{90 * time.Second, 5 * time.Minute, time.Hour}
	s := time.Second
	tests := []struct {
		name    string
		prefix  string
		policy  *tiers.Policy
		topic   string
		want    Source
		wantErr string // substring; "" for no error
	}{
		{"tier1", "push.", &p, "push.tier1", Source{Tier: tiers.Tier1}, ""},
		{"tier2", "push.", &p, "push.tier2", Source{Tier: tiers.Tier2}, ""},
		{"tier3", "push.", &p, "push.tier3", Source{Tier: tiers.Tier3}, ""},
		{"tier1 retry 2s", "push.", &p, "push.tier1.retry-2s", Source{Tier: tiers.Tier1, Retry: true, Step: 0, Delay: 2 * s}, ""},
		{"tier1 retry 8s", "push.", &p, "push.tier1.retry-8s", Source{Tier: tiers.Tier1, Retry: true, Step: 1, Delay: 8 * s}, ""},
		{"tier2 retry 60s", "push.", &p, "push.tier2.retry-60s", Source{Tier: tiers.Tier2, Retry: true, Step: 2, Delay: 60 * s}, ""},
		{"tier3 retry 8s", "push.", &p, "push.tier3.retry-8s", Source{Tier: tiers.Tier3, Retry: true, Step: 0, Delay: 8 * s}, ""},
		{"tier3 retry 60s", "push.", &p, "push.tier3.retry-60s", Source{Tier: tiers.Tier3, Retry: true, Step: 1, Delay: 60 * s}, ""},
		{"custom 1m30s", "push.", &custom, "push.tier3.retry-1m30s", Source{Tier: tiers.Tier3, Retry: true, Step: 0, Delay: 90 * s}, ""},
		{"custom 1h", "push.", &custom, "push.tier3.retry-1h", Source{Tier: tiers.Tier3, Retry: true, Step: 2, Delay: time.Hour}, ""},
		{"dotted prefix", "prod.push.", &p, "prod.push.tier2.retry-8s", Source{Tier: tiers.Tier2, Retry: true, Step: 1, Delay: 8 * s}, ""},
		{"empty prefix", "", &p, "tier1.retry-2s", Source{Tier: tiers.Tier1, Retry: true, Step: 0, Delay: 2 * s}, ""},

		{"tier3 has no 2s step", "push.", &p, "push.tier3.retry-2s", Source{}, "not a step of the tier3 ladder"},
		{"unknown step", "push.", &p, "push.tier1.retry-3s", Source{}, "not a step"},
		{"custom step on default policy", "push.", &p, "push.tier3.retry-1h", Source{}, "not a step"},
		{"trailing dot", "push.", &p, "push.tier1.", Source{}, "not a step"},
		{"extra suffix", "push.", &p, "push.tier1.retry-2s.x", Source{}, "not a step"},
		{"wrong prefix", "push.", &p, "other.tier1", Source{}, "lacks prefix"},
		{"no prefix", "push.", &p, "tier1", Source{}, "lacks prefix"},
		{"dlq", "push.", &p, "push.dlq", Source{}, "unknown tier"},
		{"gone", "push.", &p, "push.gone", Source{}, "unknown tier"},
		{"outcomes", "push.", &p, "push.outcomes", Source{}, "unknown tier"},
		{"tier4", "push.", &p, "push.tier4", Source{}, "unknown tier"},
		{"empty", "push.", &p, "", Source{}, "lacks prefix"},
		{"prefix only", "push.", &p, "push.", Source{}, "unknown tier"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Names{Prefix: tt.prefix}.Parse(tt.topic, tt.policy)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want an error containing %q", tt.topic, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("Parse(%q) error = %q, want it to contain %q", tt.topic, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q) error = %v", tt.topic, err)
			}
			if got != tt.want {
				t.Errorf("Parse(%q) = %+v, want %+v", tt.topic, got, tt.want)
			}
		})
	}
}

// TestNamesParseRoundTrip parses every input topic of a policy back to the
// tier and step it was named from.
func TestNamesParseRoundTrip(t *testing.T) {
	custom := tiers.DefaultPolicy()
	custom.Tier1.Steps = []time.Duration{time.Second, 90 * time.Second, 5 * time.Minute, time.Hour, 25 * time.Hour}
	defaults := tiers.DefaultPolicy()
	for _, prefix := range []string{"push.", "prod.push.", "acme-", ""} {
		for name, p := range map[string]*tiers.Policy{"default": &defaults, "custom": &custom} {
			t.Run(prefix+"/"+name, func(t *testing.T) {
				n := Names{Prefix: prefix}
				for _, tier := range tiers.All {
					got, err := n.Parse(n.Tier(tier), p)
					if want := (Source{Tier: tier}); err != nil || got != want {
						t.Errorf("Parse(%q) = %+v, %v; want %+v", n.Tier(tier), got, err, want)
					}
					for i, d := range p.Ladder(tier).Steps {
						topic := n.Retry(tier, d)
						got, err := n.Parse(topic, p)
						want := Source{Tier: tier, Retry: true, Step: i, Delay: d}
						if err != nil || got != want {
							t.Errorf("Parse(%q) = %+v, %v; want %+v", topic, got, err, want)
						}
					}
				}
				for _, topic := range n.Outputs() {
					if got, err := n.Parse(topic, p); err == nil {
						t.Errorf("Parse(%q) = %+v, want an error for an output topic", topic, got)
					}
				}
			})
		}
	}
}

// TestNamesParseDropped: the retry topics of steps an earlier ladder had
// are recognised, with Step -1; the current ladder's steps, other topics
// and names no processor would have given a step are not.
func TestNamesParseDropped(t *testing.T) {
	p := tiers.DefaultPolicy()
	p.Tier2.Steps = []time.Duration{time.Second, 5 * time.Second}
	s := time.Second
	tests := []struct {
		name    string
		prefix  string
		topic   string
		want    Source
		wantErr string
	}{
		{"old default step", "push.", "push.tier2.retry-8s", Source{Tier: tiers.Tier2, Retry: true, Step: -1, Delay: 8 * s}, ""},
		{"old 60s step", "push.", "push.tier2.retry-60s", Source{Tier: tiers.Tier2, Retry: true, Step: -1, Delay: 60 * s}, ""},
		{"minutes", "push.", "push.tier3.retry-1m30s", Source{Tier: tiers.Tier3, Retry: true, Step: -1, Delay: 90 * s}, ""},
		{"hours", "prod.", "prod.tier1.retry-2h", Source{Tier: tiers.Tier1, Retry: true, Step: -1, Delay: 2 * time.Hour}, ""},

		{"on the ladder", "push.", "push.tier2.retry-5s", Source{}, "is a step of the tier2 ladder"},
		{"on another tier's default", "push.", "push.tier1.retry-8s", Source{}, "is a step of the tier1 ladder"},
		{"tier topic", "push.", "push.tier2", Source{}, "not a retry step topic"},
		{"not canonical", "push.", "push.tier2.retry-1m0s", Source{}, "not a retry step topic"},
		{"not canonical seconds", "push.", "push.tier2.retry-90s", Source{}, "not a retry step topic"},
		{"fraction", "push.", "push.tier2.retry-1.5s", Source{}, "not a retry step topic"},
		{"no retry- prefix", "push.", "push.tier2.8s", Source{}, "not a retry step topic"},
		{"suffix", "push.", "push.tier2.retry-8s.x", Source{}, "not a retry step topic"},
		{"dlq", "push.", "push.dlq", Source{}, "unknown tier"},
		{"other prefix", "push.", "other.tier2.retry-8s", Source{}, "lacks prefix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Names{Prefix: tt.prefix}.ParseDropped(tt.topic, &p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseDropped(%q) = %+v, %v; want an error containing %q", tt.topic, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || !got.Dropped() {
				t.Errorf("ParseDropped(%q) = %+v, %v; want %+v", tt.topic, got, err, tt.want)
			}
		})
	}
}
