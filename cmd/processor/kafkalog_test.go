package main

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaLogger: the Kafka client's info lines are debug lines, shown
// only at --log-level debug; its warnings and errors always.
func TestKafkaLogger(t *testing.T) {
	tests := []struct {
		level     string
		wantLevel kgo.LogLevel
		shown     map[kgo.LogLevel]string // kgo level → the slog level it is written at; "" hidden
	}{
		{"debug", kgo.LogLevelDebug, map[kgo.LogLevel]string{kgo.LogLevelDebug: "DEBUG", kgo.LogLevelInfo: "DEBUG", kgo.LogLevelWarn: "WARN", kgo.LogLevelError: "ERROR"}},
		{"info", kgo.LogLevelWarn, map[kgo.LogLevel]string{kgo.LogLevelDebug: "", kgo.LogLevelInfo: "", kgo.LogLevelWarn: "WARN", kgo.LogLevelError: "ERROR"}},
		{"warn", kgo.LogLevelWarn, map[kgo.LogLevel]string{kgo.LogLevelInfo: "", kgo.LogLevelWarn: "WARN", kgo.LogLevelError: "ERROR"}},
		{"error", kgo.LogLevelError, map[kgo.LogLevel]string{kgo.LogLevelInfo: "", kgo.LogLevelWarn: "", kgo.LogLevelError: "ERROR"}},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			var buf bytes.Buffer
			l := newKafkaLogger(newLogger(&buf, "text", tt.level))
			if got := l.Level(); got != tt.wantLevel {
				t.Errorf("Level() = %v, want %v", got, tt.wantLevel)
			}
			for kl, want := range tt.shown {
				buf.Reset()
				l.Log(kl, "beginning to manage the group lifecycle", "group", "tierpush")
				got := buf.String()
				switch {
				case want == "" && got != "":
					t.Errorf("kgo %v at --log-level %s written: %s", kl, tt.level, got)
				case want != "" && !strings.Contains(got, "level="+want):
					t.Errorf("kgo %v at --log-level %s: %q, want level=%s", kl, tt.level, got, want)
				}
			}
		})
	}
}

// TestStartLine: at --log-level info the processor's start shows none of
// the Kafka client's info lines, and its "processor running" line names
// every address it serves: the embedded broker and the HTTP endpoints.
func TestStartLine(t *testing.T) {
	brokerAddr, httpAddr := freeAddr(t), freeAddr(t)
	args := procArgs(t, t.TempDir(), brokerAddr, "127.0.0.1:1")
	args = append(args, "--log-level", "info", "--http-addr", httpAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	var lines []string
	var running string
	sc := bufio.NewScanner(stderr)
	for running == "" && sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), `msg="processor running"`) {
			running = sc.Text()
		}
	}
	if running == "" {
		t.Fatalf("no start line; stderr:\n%s", strings.Join(lines, "\n"))
	}
	for _, want := range []string{"embedded_broker=" + brokerAddr, "http=\"http://" + httpAddr + " (/metrics /healthz /readyz)\"", "brokers=[" + brokerAddr + "]"} {
		if !strings.Contains(running, want) {
			t.Errorf("start line lacks %s: %s", want, running)
		}
	}
	for _, l := range lines {
		if strings.Contains(l, "component=kafka") {
			t.Errorf("a Kafka client line at --log-level info: %s", l)
		}
	}
}
