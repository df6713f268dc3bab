package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The BullMQ peer: the same events through a BullMQ queue on Redis, sent by
// one Node worker with web-push, the stack a Node service would use. Redis
// comes from Debian (apt-get install redis-server), bullmq and web-push
// from npm, installed at bench time when missing; without them the peer is
// skipped and the bench says why.

//go:embed peer/bullmq.mjs
var bullmqScript []byte

// The npm packages of the peer, pinned so runs compare.
var peerPackages = []string{"bullmq@6.7.0", "ioredis@6.0.0", "web-push@3.6.7"}

// peerResult is the BullMQ peer's figures.
type peerResult struct {
	Packages     []string `json:"packages"`
	Concurrency  int      `json:"concurrency"`
	Seconds      float64  `json:"seconds"`
	EventsPerSec float64  `json:"events_per_sec"`
	Completed    int      `json:"completed"`
	Failed       int      `json:"failed"`
	FirstError   string   `json:"first_error,omitempty"`
	// NodeCPUSecPer1k is the Node process (queue client, worker,
	// web-push); RedisCPUSecPer1k the Redis server.
	NodeCPUSecPer1k  float64 `json:"node_cpu_sec_per_1000"`
	RedisCPUSecPer1k float64 `json:"redis_cpu_sec_per_1000"`
}

// runPeer runs the BullMQ peer over r's events against r's simulator. It
// returns why it was skipped when Redis, Node or the npm packages cannot be
// had.
func (b *bench) runPeer(ctx context.Context, r *scenarioRun, dir string) (*peerResult, string) {
	redis, err := b.findRedis(ctx)
	if err != nil {
		return nil, err.Error()
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, "node is not installed"
	}
	pkgDir, err := b.peerPackages(ctx)
	if err != nil {
		return nil, err.Error()
	}
	script := filepath.Join(pkgDir, "bullmq-peer.mjs")
	if err := os.WriteFile(script, bullmqScript, 0o644); err != nil {
		return nil, err.Error()
	}

	port, err := freePort()
	if err != nil {
		return nil, err.Error()
	}
	rs, err := startChild("redis", filepath.Join(dir, "redis.log"), redis, nil,
		"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return nil, err.Error()
	}
	defer rs.stop(10 * time.Second)
	if err := waitTCP(ctx, fmt.Sprintf("127.0.0.1:%d", port), rs); err != nil {
		return nil, err.Error()
	}

	type peerEvent struct {
		Endpoint string `json:"endpoint"`
		P256dh   string `json:"p256dh"`
		Auth     string `json:"auth"`
		Payload  string `json:"payload"`
	}
	cfg := struct {
		RedisPort   int         `json:"redis_port"`
		Concurrency int         `json:"concurrency"`
		TTL         int         `json:"ttl"`
		Subject     string      `json:"subject"`
		PublicKey   string      `json:"public_key"`
		PrivateKey  string      `json:"private_key"`
		Events      []peerEvent `json:"events"`
	}{RedisPort: port, Concurrency: b.cfg.CeilingSenders, TTL: ttlSeconds,
		Subject: b.vapid.subject, PublicKey: b.vapid.pub, PrivateKey: b.vapid.priv}
	for i := range r.evs {
		e := &r.evs[i]
		cfg.Events = append(cfg.Events, peerEvent{Endpoint: e.sub.Endpoint, P256dh: e.sub.P256dh, Auth: e.sub.Auth, Payload: string(e.payload)})
	}
	cfgFile := filepath.Join(dir, "bullmq-peer.json")
	raw, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgFile, raw, 0o644); err != nil {
		return nil, err.Error()
	}

	b.logf("scenario %s: peer: BullMQ + web-push on Redis, %d events, worker concurrency %d", r.sc.Name, len(r.evs), b.cfg.CeilingSenders)
	redis0, _ := cpuSeconds(rs.pid())
	cmd := exec.CommandContext(ctx, node, script, cfgFile)
	cmd.Dir = pkgDir
	cmd.Env = os.Environ()
	if r.certFile != "" {
		cmd.Env = append(cmd.Env, "NODE_EXTRA_CA_CERTS="+r.certFile)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Sprintf("the Node worker failed: %v: %s", err, firstError(stderr.String()))
	}
	redis1, _ := cpuSeconds(rs.pid())
	var out struct {
		Seconds    float64 `json:"seconds"`
		Completed  int     `json:"completed"`
		Failed     int     `json:"failed"`
		FirstError string  `json:"first_error"`
		CPUSeconds float64 `json:"cpu_seconds"`
	}
	if err := json.Unmarshal([]byte(lastLine(stdout.String())), &out); err != nil {
		return nil, fmt.Sprintf("the Node worker printed no figures: %v", err)
	}
	if out.Failed > 0 {
		return nil, fmt.Sprintf("%d of %d web-push sends failed, first: %s", out.Failed, len(r.evs), out.FirstError)
	}
	n := float64(len(r.evs))
	return &peerResult{
		Packages: peerPackages, Concurrency: b.cfg.CeilingSenders,
		Seconds: out.Seconds, EventsPerSec: n / out.Seconds, Completed: out.Completed, Failed: out.Failed,
		NodeCPUSecPer1k:  out.CPUSeconds / n * 1000,
		RedisCPUSecPer1k: (redis1 - redis0) / n * 1000,
	}, ""
}

// findRedis finds redis-server, installing Debian's package when it is
// missing and the bench runs as root.
func (b *bench) findRedis(ctx context.Context) (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		return "", errors.New("redis-server is not installed (apt-get install redis-server)")
	}
	b.logf("peer: installing redis-server (apt-get)")
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-q", "redis-server")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("apt-get install redis-server: %v: %s", err, lastLine(string(out)))
		}
		return nil
	}
	if err := install(); err != nil {
		// The package lists may be missing or stale.
		if out, uerr := exec.CommandContext(ctx, "apt-get", "update", "-q").CombinedOutput(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %v: %s", uerr, lastLine(string(out)))
		}
		if err := install(); err != nil {
			return "", err
		}
	}
	return exec.LookPath("redis-server")
}

// peerPackages returns the directory holding the peer's npm packages,
// installing them there when missing.
func (b *bench) peerPackages(ctx context.Context) (string, error) {
	dir, err := filepath.Abs(b.cfg.PeerDir)
	if err != nil {
		return "", err
	}
	have := true
	for _, p := range peerPackages {
		name, version, _ := strings.Cut(p, "@")
		raw, err := os.ReadFile(filepath.Join(dir, "node_modules", name, "package.json"))
		var pkg struct{ Version string }
		if err != nil || json.Unmarshal(raw, &pkg) != nil || pkg.Version != version {
			have = false
		}
	}
	if have {
		return dir, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", errors.New("npm is not installed")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private":true,"type":"module"}`+"\n"), 0o644); err != nil {
			return "", err
		}
	}
	b.logf("peer: npm install %s in %s", strings.Join(peerPackages, " "), dir)
	cmd := exec.CommandContext(ctx, "npm", append([]string{"install", "--no-audit", "--no-fund", "--save-exact"}, peerPackages...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("npm install %s: %v: %s", strings.Join(peerPackages, " "), err, lastLine(string(out)))
	}
	return dir, nil
}

// freePort is a TCP port free on loopback a moment ago.
func freePort() (int, error) {
	addr, err := freeAddr()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(addr)
	var port int
	_, err = fmt.Sscan(p, &port)
	return port, err
}

// waitTCP waits until addr accepts connections.
func waitTCP(ctx context.Context, addr string, c *child) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if e := c.exited(); e != nil {
			return e
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not reachable: %w", c.name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// firstError is the first line of a Node error output that names an error,
// or its last line.
func firstError(s string) string {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, "Error") {
			return strings.TrimSpace(l)
		}
	}
	return lastLine(s)
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
