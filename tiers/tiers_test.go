package tiers

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStepName(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "retry-1s"},
		{2 * time.Second, "retry-2s"},
		{8 * time.Second, "retry-8s"},
		{59 * time.Second, "retry-59s"},
		{60 * time.Second, "retry-60s"},
		{61 * time.Second, "retry-1m1s"},
		{90 * time.Second, "retry-1m30s"},
		{2 * time.Minute, "retry-2m"},
		{5 * time.Minute, "retry-5m"},
		{10 * time.Minute, "retry-10m"},
		{30 * time.Minute, "retry-30m"},
		{time.Hour, "retry-1h"},
		{90 * time.Minute, "retry-1h30m"},
		{time.Hour + 10*time.Minute, "retry-1h10m"},
		{time.Hour + 30*time.Second, "retry-1h0m30s"},
		{10 * time.Hour, "retry-10h"},
		{24 * time.Hour, "retry-24h"},
	}
	for _, tt := range tests {
		t.Run(tt.d.String(), func(t *testing.T) {
			if got := StepName(tt.d); got != tt.want {
				t.Errorf("StepName(%v) = %q, want %q", tt.d, got, tt.want)
			}
		})
	}
}

// TestStepNameDistinct guards topic names against collisions: two different
// whole-second delays must never share a retry topic.
func TestStepNameDistinct(t *testing.T) {
	seen := make(map[string]time.Duration)
	for s := 1; s <= 3*3600; s++ {
		d := time.Duration(s) * time.Second
		name := StepName(d)
		if prev, ok := seen[name]; ok {
			t.Fatalf("StepName(%v) = StepName(%v) = %q", d, prev, name)
		}
		seen[name] = d
		if strings.ContainsAny(name, " ./") {
			t.Fatalf("StepName(%v) = %q, not a topic name part", d, name)
		}
	}
}

func TestTierString(t *testing.T) {
	tests := []struct {
		tier      Tier
		want      string
		wantValid bool
	}{
		{Tier1, "tier1", true},
		{Tier2, "tier2", true},
		{Tier3, "tier3", true},
		{0, "tier(0)", false},
		{4, "tier(4)", false},
		{255, "tier(255)", false},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.tier.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if got := tt.tier.Valid(); got != tt.wantValid {
				t.Errorf("Valid() = %v, want %v", got, tt.wantValid)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    Tier
		wantErr bool
	}{
		{"tier1", Tier1, false},
		{"tier2", Tier2, false},
		{"tier3", Tier3, false},
		{"", 0, true},
		{"tier0", 0, true},
		{"tier4", 0, true},
		{"Tier1", 0, true},
		{" tier1", 0, true},
		{"tier1 ", 0, true},
		{"tier(0)", 0, true},
		{"1", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := Parse(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Parse(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
	for _, tier := range All {
		got, err := Parse(tier.String())
		if err != nil || got != tier {
			t.Errorf("Parse(%v.String()) = %v, %v; want %v", tier, got, err, tier)
		}
	}
}

func TestDefaultPolicy(t *testing.T) {
	p := DefaultPolicy()
	s := time.Second
	tests := []struct {
		tier      Tier
		wantSteps []time.Duration
		wantMax   int
		wantW     int
	}{
		{Tier1, []time.Duration{2 * s, 8 * s, 60 * s}, 5, 6},
		{Tier2, []time.Duration{2 * s, 8 * s, 60 * s}, 5, 3},
		{Tier3, []time.Duration{8 * s, 60 * s}, 4, 1},
	}
	for _, tt := range tests {
		t.Run(tt.tier.String(), func(t *testing.T) {
			l := p.Ladder(tt.tier)
			if l == nil {
				t.Fatal("Ladder() = nil")
			}
			if !slices.Equal(l.Steps, tt.wantSteps) {
				t.Errorf("Steps = %v, want %v", l.Steps, tt.wantSteps)
			}
			if l.MaxAttempts != tt.wantMax {
				t.Errorf("MaxAttempts = %d, want %d", l.MaxAttempts, tt.wantMax)
			}
			if l.Weight != tt.wantW {
				t.Errorf("Weight = %d, want %d", l.Weight, tt.wantW)
			}
			if got, want := l.Last(), tt.wantSteps[len(tt.wantSteps)-1]; got != want {
				t.Errorf("Last() = %v, want %v", got, want)
			}
		})
	}
	if err := p.Validate(); err != nil {
		t.Errorf("DefaultPolicy().Validate() = %v, want nil", err)
	}
}

func TestDefaultPolicyIsFresh(t *testing.T) {
	a := DefaultPolicy()
	a.Tier1.Steps[0] = time.Hour
	if b := DefaultPolicy(); b.Tier1.Steps[0] != 2*time.Second {
		t.Errorf("DefaultPolicy shares its step slices: got %v after editing another copy", b.Tier1.Steps[0])
	}
}

func TestPolicyLadder(t *testing.T) {
	p := DefaultPolicy()
	tests := []struct {
		tier Tier
		want *Ladder
	}{
		{Tier1, &p.Tier1},
		{Tier2, &p.Tier2},
		{Tier3, &p.Tier3},
		{0, nil},
		{4, nil},
	}
	for _, tt := range tests {
		t.Run(tt.tier.String(), func(t *testing.T) {
			if got := p.Ladder(tt.tier); got != tt.want {
				t.Errorf("Ladder(%v) = %p, want %p", tt.tier, got, tt.want)
			}
		})
	}
}

func TestLadderStepFor(t *testing.T) {
	three := Ladder{Steps: []time.Duration{2 * time.Second, 8 * time.Second, time.Minute}}
	one := Ladder{Steps: []time.Duration{time.Minute}}
	tests := []struct {
		name    string
		l       Ladder
		attempt int
		want    int
	}{
		{"three/attempt -1", three, -1, 0},
		{"three/attempt 0", three, 0, 0},
		{"three/attempt 1", three, 1, 0},
		{"three/attempt 2", three, 2, 1},
		{"three/attempt 3", three, 3, 2},
		{"three/attempt 4 repeats last", three, 4, 2},
		{"three/attempt 100 repeats last", three, 100, 2},
		{"one/attempt 1", one, 1, 0},
		{"one/attempt 5", one, 5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.StepFor(tt.attempt); got != tt.want {
				t.Errorf("StepFor(%d) = %d, want %d", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestLadderStepAtLeast(t *testing.T) {
	l := Ladder{Steps: []time.Duration{2 * time.Second, 8 * time.Second, time.Minute}}
	tests := []struct {
		d      time.Duration
		want   int
		wantOK bool
	}{
		{-time.Second, 0, true},
		{0, 0, true},
		{time.Millisecond, 0, true},
		{2 * time.Second, 0, true},
		{2*time.Second + 1, 1, true},
		{7 * time.Second, 1, true},
		{8 * time.Second, 1, true},
		{9 * time.Second, 2, true},
		{time.Minute, 2, true},
		{time.Minute + 1, 2, false},
		{time.Hour, 2, false},
	}
	for _, tt := range tests {
		t.Run(tt.d.String(), func(t *testing.T) {
			got, ok := l.StepAtLeast(tt.d)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("StepAtLeast(%v) = %d, %v; want %d, %v", tt.d, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	s := time.Second
	tests := []struct {
		name string
		edit func(p *Policy)
		want []string // substrings the error must hold; nil for no error
	}{
		{"default", func(*Policy) {}, nil},
		{"custom long ladder", func(p *Policy) {
			p.Tier3.Steps = []time.Duration{90 * s, 5 * time.Minute, time.Hour}
			p.Tier3.MaxAttempts = 20
			p.Tier3.Weight = 1000
		}, nil},
		{"the widest ladder", func(p *Policy) {
			p.Tier1.Steps = []time.Duration{s, 2 * s, 3 * s, 4 * s, 5 * s, 6 * s, 7 * s, 8 * s, 9 * s, 24 * time.Hour}
			p.Tier1.MaxAttempts = 1
		}, nil},
		{"no steps", func(p *Policy) { p.Tier2.Steps = nil }, []string{"tiers.tier2.steps: empty"}},
		{"eleven steps", func(p *Policy) {
			p.Tier2.Steps = []time.Duration{s, 2 * s, 3 * s, 4 * s, 5 * s, 6 * s, 7 * s, 8 * s, 9 * s, 10 * s, 11 * s}
		}, []string{"tiers.tier2.steps: 11 steps, want at most 10"}},
		{"below 1s", func(p *Policy) { p.Tier2.Steps[1] = 500 * time.Millisecond }, []string{"tiers.tier2.steps[1]: 500ms, want at least 1s"}},
		{"above 24h", func(p *Policy) { p.Tier1.Steps[2] = 25 * time.Hour }, []string{"tiers.tier1.steps[2]: 25h0m0s, want at most 24h"}},
		{"not increasing", func(p *Policy) { p.Tier3.Steps[1] = 8 * s }, []string{"tiers.tier3.steps[1]: 8s, want longer than steps[0] (8s)"}},
		{"decreasing", func(p *Policy) { p.Tier1.Steps[2] = 4 * s }, []string{"tiers.tier1.steps[2]:", "ascend"}},
		{"fractional", func(p *Policy) { p.Tier2.Steps[1] = 8*s + 500*time.Millisecond }, []string{"tiers.tier2.steps[1]: 8.5s, want whole seconds"}},
		{"max attempts 0", func(p *Policy) { p.Tier1.MaxAttempts = 0 }, []string{"tiers.tier1.max_attempts: 0, want 1..20"}},
		{"max attempts 21", func(p *Policy) { p.Tier3.MaxAttempts = 21 }, []string{"tiers.tier3.max_attempts: 21, want 1..20"}},
		{"weight 0", func(p *Policy) { p.Tier2.Weight = 0 }, []string{"tiers.tier2.weight: 0, want 1..1000"}},
		{"weight 1001", func(p *Policy) { p.Tier1.Weight = 1001 }, []string{"tiers.tier1.weight:"}},
		{"every error reported", func(p *Policy) {
			p.Tier1.Weight = 0
			p.Tier3.MaxAttempts = -1
		}, []string{"tiers.tier1.weight:", "tiers.tier3.max_attempts:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.edit(&p)
			err := p.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error naming %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

// TestIndex: each tier's place in All; a tier outside the contract is
// treated as the lowest, never the highest.
func TestIndex(t *testing.T) {
	for i, tier := range All {
		if got := tier.Index(); got != i {
			t.Errorf("%s.Index() = %d, want %d", tier, got, i)
		}
	}
	for _, tier := range []Tier{0, 4, 255} {
		if got := tier.Index(); got != len(All)-1 {
			t.Errorf("Tier(%d).Index() = %d, want %d (the lowest)", tier, got, len(All)-1)
		}
	}
}
