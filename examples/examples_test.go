// Package examples_test runs the upstream examples (a producer of events
// and a consumer of outcomes, in Go and in Node) against the embedded
// broker, the processor and the push simulator: what they print is what a
// service built on them would see.
package examples_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/testenv"
)

func TestExamples(t *testing.T) {
	testenv.Long(t, "the examples build Go programs and need Node with examples/node's packages")
	env := testenv.Start(t, testenv.Options{})
	var subs bytes.Buffer
	for range 3 {
		s := env.Sim.Subscribe()
		line, _ := json.Marshal(map[string]any{"endpoint": s.Endpoint, "keys": map[string]string{"p256dh": s.P256dh, "auth": s.Auth}})
		subs.Write(append(line, '\n'))
	}
	brokers := strings.Join(env.Brokers, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("go", func(t *testing.T) {
		bin := t.TempDir()
		for _, p := range []string{"producer", "consumer"} {
			run(ctx, t, nil, nil, "go", "build", "-o", filepath.Join(bin, p), "./go/"+p)
		}
		out := run(ctx, t, bytes.NewReader(subs.Bytes()), nil, filepath.Join(bin, "producer"), "--brokers", brokers, "--id-prefix", "go-")
		wantLines(t, out, "produced go-1 to push.tier1/", "produced go-3 to push.tier1/")
		out = run(ctx, t, nil, nil, filepath.Join(bin, "consumer"), "--brokers", brokers, "--id-prefix", "go-", "--count", "3", "--timeout", "2m")
		wantLines(t, out, "outcome go-1 delivered", "outcome go-2 delivered", "outcome go-3 delivered")
	})

	t.Run("node", func(t *testing.T) {
		if _, err := os.Stat("node/node_modules/kafkajs"); err != nil {
			t.Fatalf("examples/node has no packages: make test-examples installs them (npm ci): %v", err)
		}
		envs := []string{"BROKERS=" + brokers, "ID_PREFIX=node-"}
		out := run(ctx, t, bytes.NewReader(subs.Bytes()), envs, "node", "node/producer.js")
		wantLines(t, out, "produced node-1 to push.tier1/", "produced node-3 to push.tier1/")
		out = run(ctx, t, nil, append(envs, "COUNT=3", "TIMEOUT_MS=120000"), "node", "node/consumer.js")
		wantLines(t, out, "outcome node-1 delivered", "outcome node-2 delivered", "outcome node-3 delivered")
	})
}

// run runs a command with stdin and extra environment, failing t with its
// output when it fails, and returns its stdout.
func run(ctx context.Context, t *testing.T, stdin *bytes.Reader, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	if stdin != nil {
		cmd.Stdin = stdin
	}
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), err, &stdout, &stderr)
	}
	return stdout.String()
}

func wantLines(t *testing.T, out string, prefixes ...string) {
	t.Helper()
	for _, p := range prefixes {
		if !strings.Contains(out, p) {
			t.Errorf("output lacks %q:\n%s", p, out)
		}
	}
}
