// Package faults_test is tierpush's fault suite: a broker process and
// several processor processes in one consumer group, driven through
// crashes, rolling restarts, a broker restart, a push service outage,
// scale-out and poison records, checking that the ledger (push.outcomes)
// stays complete. It runs only when TIERPUSH_FAULTS is set (make
// test-faults): plain `go test ./...` skips it at once.
package faults_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// binary is the processor built once for every scenario.
var binary string

// enabled reports whether the suite should run.
func enabled() bool { return os.Getenv("TIERPUSH_FAULTS") != "" }

func TestMain(m *testing.M) {
	if !enabled() {
		os.Exit(m.Run()) // every test skips
	}
	dir, err := os.MkdirTemp("", "tierpush-faults-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "processor")
	if out, err := exec.Command("go", "build", "-o", binary, "github.com/tierpush/tierpush/cmd/processor").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build processor: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireFaults skips t unless the suite is enabled.
func requireFaults(t *testing.T) {
	t.Helper()
	if !enabled() {
		t.Skip("fault suite: set TIERPUSH_FAULTS=1 or run make test-faults")
	}
	if testing.Short() {
		t.Skip("fault suite: not in -short mode")
	}
}
