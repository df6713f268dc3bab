package pushsim_test

import (
	"flag"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/pushsim"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*pushsim.Config)
		wantErr string // substring; empty = valid
	}{
		{name: "default", mod: func(*pushsim.Config) {}},
		{name: "all set", mod: func(c *pushsim.Config) {
			c.RateLimit, c.Burst, c.Fail503, c.Fail429, c.Fail410, c.Fail500 = 100, 10, 0.25, 0.25, 0.25, 0.25
		}},
		{name: "empty addr", mod: func(c *pushsim.Config) { c.Addr = "" }, wantErr: "--addr"},
		{name: "negative rate", mod: func(c *pushsim.Config) { c.RateLimit = -1 }, wantErr: "--rate-limit"},
		{name: "negative burst", mod: func(c *pushsim.Config) { c.Burst = -1 }, wantErr: "--burst"},
		{name: "negative retry-after", mod: func(c *pushsim.Config) { c.RetryAfter = -1 }, wantErr: "--retry-after"},
		{name: "negative latency", mod: func(c *pushsim.Config) { c.Latency = -time.Millisecond }, wantErr: "--latency"},
		{name: "negative workers", mod: func(c *pushsim.Config) { c.Workers = -1 }, wantErr: "--workers"},
		{name: "negative jitter", mod: func(c *pushsim.Config) { c.LatencyJitter = -time.Millisecond }, wantErr: "--latency-jitter"},
		{name: "fraction above 1", mod: func(c *pushsim.Config) { c.Fail500 = 1.5 }, wantErr: "--fail-500"},
		{name: "fraction NaN", mod: func(c *pushsim.Config) { c.Fail429 = math.NaN() }, wantErr: "--fail-429"},
		{name: "fractions sum above 1", mod: func(c *pushsim.Config) { c.Fail503, c.Fail410 = 0.6, 0.6 }, wantErr: "want <= 1"},
		{name: "verify-every 0", mod: func(c *pushsim.Config) { c.VerifyEvery = 0 }, wantErr: "--verify-every"},
		{name: "bad vapid key", mod: func(c *pushsim.Config) { c.VAPIDPublicKey = "bm90IGEga2V5" }, wantErr: "--vapid-public-key"},
		{name: "negative keep", mod: func(c *pushsim.Config) { c.KeepDeliveries = -1 }, wantErr: "--keep-deliveries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := pushsim.DefaultConfig()
			tt.mod(&cfg)
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.wantErr)
			}
			if _, nerr := pushsim.New(cfg, nil); (nerr != nil) != (err != nil) {
				t.Errorf("New() error = %v, want error = %v", nerr, err != nil)
			}
		})
	}
}

func TestRegisterFlags(t *testing.T) {
	keys := newVAPID(t)
	cfg := pushsim.DefaultConfig()
	fs := flag.NewFlagSet("pushsim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	args := []string{
		"--addr=127.0.0.1:9000", "--tls", "--rate-limit=50", "--burst=5", "--retry-after=3",
		"--latency=20ms", "--latency-jitter=5ms", "--workers=64", "--fail-503=0.1", "--fail-429=0.2",
		"--fail-410=0.05", "--fail-500=0.01", "--verify-every=100", "--vapid-public-key=" + keys.pub,
		"--keep-deliveries=1000",
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse flags: %v", err)
	}
	want := pushsim.Config{
		Addr: "127.0.0.1:9000", TLS: true, RateLimit: 50, Burst: 5, RetryAfter: 3,
		Latency: 20 * time.Millisecond, LatencyJitter: 5 * time.Millisecond, Workers: 64,
		Fail503: 0.1, Fail429: 0.2, Fail410: 0.05, Fail500: 0.01,
		VerifyEvery: 100, VAPIDPublicKey: keys.pub, KeepDeliveries: 1000,
	}
	if cfg != want {
		t.Errorf("parsed config = %+v, want %+v", cfg, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate() = %v, want nil", err)
	}

	// Defaults come from the config the flags were registered on.
	def := pushsim.DefaultConfig()
	fs2 := flag.NewFlagSet("pushsim", flag.ContinueOnError)
	def.RegisterFlags(fs2)
	for name, want := range map[string]string{"addr": "127.0.0.1:8443", "retry-after": "1", "verify-every": "1", "tls": "false"} {
		if got := fs2.Lookup(name).DefValue; got != want {
			t.Errorf("--%s default = %q, want %q", name, got, want)
		}
	}
}
