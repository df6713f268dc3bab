package pacing_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/pacing"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*pacing.Config)
		want string // in the error; "" for none
	}{
		{"defaults", func(*pacing.Config) {}, ""},
		{"disabled defaults", func(c *pacing.Config) { c.Enabled = false }, ""},
		{"cut rate 0", func(c *pacing.Config) { c.CutRate = 0 }, "--pacing-cut-rate"},
		{"cut rate 1", func(c *pacing.Config) { c.CutRate = 1 }, "--pacing-cut-rate"},
		{"cut rate at halt rate", func(c *pacing.Config) { c.CutRate = c.HaltRate }, "--pacing-cut-rate"},
		{"halt rate negative", func(c *pacing.Config) { c.HaltRate = -0.2 }, "--pacing-halt-rate"},
		{"error halt rate 1", func(c *pacing.Config) { c.ErrorHaltRate = 1 }, "--pacing-error-halt-rate"},
		{"cut factor 1", func(c *pacing.Config) { c.CutFactor = 1 }, "--pacing-cut-factor"},
		{"cut factor 0", func(c *pacing.Config) { c.CutFactor = 0 }, "--pacing-cut-factor"},
		{"open for 0", func(c *pacing.Config) { c.OpenFor = 0 }, "--pacing-open-for"},
		{"default pause 99ms", func(c *pacing.Config) { c.DefaultPause = 99 * time.Millisecond }, "--pacing-default-pause"},
		{"max concurrency 0", func(c *pacing.Config) { c.MaxLimit = 0 }, "--pacing-max-concurrency"},
		{"max concurrency above 100000", func(c *pacing.Config) { c.MaxLimit = 100_001 }, "--pacing-max-concurrency"},
		{"max concurrency below min", func(c *pacing.Config) { c.MinLimit = 8; c.MaxLimit = 4 }, "--pacing-max-concurrency"},
		{"min concurrency 0", func(c *pacing.Config) { c.MinLimit = 0 }, "--pacing-min-concurrency"},
		{"probes 0", func(c *pacing.Config) { c.Probes = 0 }, "--pacing-probes"},
		{"min samples 0", func(c *pacing.Config) { c.MinSamples = 0 }, "--pacing-min-samples"},
		{"sub pauses 0", func(c *pacing.Config) { c.SubPauses = 0 }, "--pacing-sub-pauses"},
		{"tier 3 weight 0", func(c *pacing.Config) { c.Weights[2] = 0 }, "tiers.tier3.weight"},
		{"tier 1 weight negative", func(c *pacing.Config) { c.Weights[0] = -1 }, "tiers.tier1.weight"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pacing.DefaultConfig()
			tt.edit(&cfg)
			err := cfg.Validate()
			_, newErr := pacing.New(cfg)
			if tt.want == "" {
				if err != nil || newErr != nil {
					t.Errorf("Validate() = %v, New() = %v; want nil", err, newErr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.want)
			}
			if newErr == nil {
				t.Errorf("New() = nil error, want %v", err)
			}
		})
	}
}
