package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
