package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"

	"github.com/tierpush/tierpush/internal/pushsim"
)

// binary is the processor built once for the subprocess tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tierpush-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "processor")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build processor: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddr returns a loopback address nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// serveSim serves a push simulator on loopback.
func serveSim(t *testing.T, cfg pushsim.Config) (*pushsim.Server, string) {
	t.Helper()
	s, err := pushsim.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, ln.Addr().String()
}

// procArgs are the flags of a processor subprocess on its own embedded
// broker that may reach simAddr.
func procArgs(t *testing.T, dataDir, brokerAddr, simAddr string) []string {
	t.Helper()
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	return []string{
		"--data-dir", dataDir,
		"--embedded-addr", brokerAddr,
		"--http-addr", "",
		"--allow-insecure-endpoint", simAddr,
		"--vapid-public-key", pub, "--vapid-private-key", priv, "--vapid-subject", "mailto:ops@tierpush.test",
		"--hmac-key", "crash-test-hmac-key-0123456789abcdef",
		"--partitions", "4",
		"--log-level", "warn",
	}
}

// proc is a running processor subprocess.
type proc struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan error
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), stderr: new(bytes.Buffer), done: make(chan error, 1)}
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait returns the exit code, or fails the test after d.
func (p *proc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err // keep it for the cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		return 0
	case <-time.After(d):
		t.Fatalf("processor still running after %s; stderr:\n%s", d, p.stderr)
		return -1
	}
}

func TestExitCodes(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      []string
		wantCode int
		wantErr  string
	}{
		{"bad int flag", []string{"--max-in-flight", "many"}, nil, 2, "max-in-flight"},
		{"unknown flag", []string{"--no-such-flag"}, nil, 2, "no-such-flag"},
		{"missing vapid key", []string{"--hmac-key", strings.Repeat("k", 32)}, nil, 2, "--vapid-public-key"},
		{"short hmac key", []string{"--dev", "--hmac-key", "short"}, nil, 2, "--hmac-key"},
		{"bad env var", nil, []string{"TIERPUSH_MAX_IN_FLIGHT=lots"}, 2, "max-in-flight"},
		{"bad log format", []string{"--dev", "--log-format", "xml"}, nil, 2, "--log-format"},
		{"max-held out of range", []string{"--dev", "--max-held", "0"}, nil, 2, "--max-held"},
		{"retry-lateness negative", []string{"--dev", "--retry-lateness", "-1ms"}, nil, 2, "--retry-lateness"},
		{"unknown subcommand", []string{"frobnicate"}, nil, 2, "frobnicate"},
		{"bad tier in send", []string{"send", "--tier", "tier9"}, nil, 2, "--tier"},
		{"vapid prints keys", []string{"vapid"}, nil, 0, ""},
		{"no brokers", []string{"--hmac-key", strings.Repeat("k", 32)}, nil, 2, "--brokers"},
		{"top-level help", []string{"--help"}, nil, 0, ""},
		{"version", []string{"version"}, nil, 0, ""},
		{"dlq help", []string{"dlq", "--help"}, nil, 0, ""},
		{"topics help", []string{"topics", "--help"}, nil, 0, ""},
		{"run help names env vars", []string{"run", "--help"}, nil, 0, "TIERPUSH_MAX_IN_FLIGHT"},
		{"bad duration says what it wants", []string{"--send-timeout", "abc"}, nil, 2, `--send-timeout: want a duration like 5s, got "abc"`},
		{"bad int says what it wants", []string{"--max-in-flight", "many"}, nil, 2, "--max-in-flight: want a whole number"},
		{"bad float says what it wants", []string{"--pacing-cut-rate", "high"}, nil, 2, "--pacing-cut-rate: want a number like 0.05"},
		{"bad bool says what it wants", []string{"--dev=maybe"}, nil, 2, "--dev: want true or false"},
		{"bad env duration names the variable and the flag", nil, []string{"TIERPUSH_DRAIN_TIMEOUT=soon"}, 2, "TIERPUSH_DRAIN_TIMEOUT (--drain-timeout): want a duration like 5s"},
		{"bad tool flag", []string{"send", "--timeout", "x"}, nil, 2, "--timeout: want a duration like 5s"},
		{"missing config file", []string{"--config", "/nonexistent/tierpush.yaml"}, nil, 2, "--config /nonexistent/tierpush.yaml"},
		{"pushsim bad workers", []string{"pushsim", "--workers", "-1"}, nil, 2, "--workers is -1, want >= 0"},
		{"sub help exits 0", []string{"send", "--help"}, nil, 0, "TIERPUSH_TIMEOUT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary, tt.args...)
			cmd.Env = append(os.Environ(), tt.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tt.wantCode, &stderr)
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr %q does not name %q", &stderr, tt.wantErr)
			}
			if code == 2 && strings.Contains(stderr.String(), "usage of") {
				t.Errorf("a configuration error printed the usage page:\n%s", &stderr)
			}
		})
	}
}

// Without --brokers and without asking for the embedded broker, run exits 2
// naming --brokers before it creates anything: a container missing its
// brokers variable must not start an empty broker and look healthy.
func TestNoBrokersCreatesNothing(t *testing.T) {
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(binary, "run", "--data-dir", dataDir, "--http-addr", "",
		"--vapid-public-key", pub, "--vapid-private-key", priv, "--vapid-subject", "mailto:ops@tierpush.test",
		"--hmac-key", strings.Repeat("k", 32))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr.String(), "--brokers") {
		t.Fatalf("exit %v, stderr %q; want exit 2 naming --brokers", err, &stderr)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data dir was created (%v)", err)
	}
}
