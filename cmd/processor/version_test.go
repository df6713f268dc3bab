package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestBuildStamp: a binary built as the Dockerfile builds it, with -X
// main.version and -X main.commit, shows both in processor version and in
// tierpush_build_info.
func TestBuildStamp(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "processor")
	build := exec.Command("go", "build", "-ldflags", "-X main.version=v9.8.7 -X main.commit=0123456789abcdef", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "processor v9.8.7\ncommit 0123456789abcdef\n") {
		t.Errorf("processor version printed:\n%s", out)
	}

	httpAddr := freeAddr(t)
	args := append(procArgs(t, t.TempDir(), freeAddr(t), "127.0.0.1:1"), "--http-addr", httpAddr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logFile := filepath.Join(t.TempDir(), "stderr")
	stderr, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if line := buildInfoLine(ctx, httpAddr); line != "" {
			for _, want := range []string{`version="v9.8.7"`, `commit="0123456789abcdef"`} {
				if !strings.Contains(line, want) {
					t.Errorf("tierpush_build_info lacks %s: %s", want, line)
				}
			}
			return
		}
		select {
		case <-ctx.Done():
			log, _ := os.ReadFile(logFile)
			t.Fatalf("no tierpush_build_info on %s; stderr:\n%s", httpAddr, log)
		case <-tick.C:
		}
	}
}

// buildInfoLine is the tierpush_build_info line of /metrics at addr, ""
// while it does not answer.
func buildInfoLine(ctx context.Context, addr string) string {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "tierpush_build_info{") {
			return l
		}
	}
	return ""
}
