package main

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/testenv"
)

func TestSend(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	brokers := env.Brokers[0]
	sub := env.Sim.Subscribe()
	file := filepath.Join(t.TempDir(), "event.json")
	fileEvent := testenv.Event("evt-file", sub, "from a file", map[string]any{"urgency": "low"})
	if err := os.WriteFile(file, fileEvent, 0o600); err != nil {
		t.Fatal(err)
	}
	stdinEvent := testenv.Event("evt-stdin", sub, "from stdin", nil)
	tests := []struct {
		name      string
		stdin     string
		args      []string
		topic     string
		wantID    string
		wantValue []byte // nil: built from flags, checked by decoding
		check     func(t *testing.T, e *event.Event)
	}{
		{
			name: "from flags",
			args: []string{"--tier", "tier2", "--id", "evt-flags", "--endpoint", sub.Endpoint, "--p256dh", sub.P256dh, "--auth", sub.Auth,
				"--payload", "Sale ends tonight", "--ttl", "600", "--urgency", "high", "--topic", "sale-42", "--app", "shop-2027"},
			topic:  "push.tier2",
			wantID: "evt-flags",
			check: func(t *testing.T, e *event.Event) {
				if string(e.Payload) != "Sale ends tonight" || e.TTL != 600*time.Second || e.Urgency != "high" || e.Topic != "sale-42" || e.Endpoint != sub.Endpoint || e.App != "shop-2027" {
					t.Errorf("event %q ttl %v urgency %q topic %q app %q", e.Payload, e.TTL, e.Urgency, e.Topic, e.App)
				}
			},
		},
		{
			name:      "from a file",
			args:      []string{"--tier", "tier3", "--file", file},
			topic:     "push.tier3",
			wantID:    "evt-file",
			wantValue: fileEvent,
		},
		{
			name:      "from stdin",
			stdin:     string(stdinEvent),
			args:      []string{"--file", "-"},
			topic:     "push.tier1",
			wantID:    "evt-stdin",
			wantValue: stdinEvent,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			code, stdout, stderr := runTool(t, tt.stdin, nil, append([]string{"send", "--brokers", brokers, "--allow-insecure-endpoint", env.SimAddr}, tt.args...)...)
			if code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, stderr)
			}
			if want := "produced " + tt.wantID + " to " + tt.topic + "/"; !strings.HasPrefix(stdout, want) {
				t.Errorf("stdout %q, want it to start %q", stdout, want)
			}
			rs, err := env.ReadRecords(ctx, tt.topic, 1)
			if err != nil {
				t.Fatal(err)
			}
			r := rs[0]
			if tt.wantValue != nil && !bytes.Equal(r.Value, tt.wantValue) {
				t.Errorf("value %s, want the input unchanged %s", r.Value, tt.wantValue)
			}
			e, err := event.Decode(r.Value, r.Timestamp, event.DefaultRules())
			if err != nil {
				t.Fatalf("produced an invalid event: %v", err)
			}
			if e.ID != tt.wantID || string(r.Key) != e.EndpointHash() {
				t.Errorf("id %q key %q, want %q keyed by the endpoint hash %q", e.ID, r.Key, tt.wantID, e.EndpointHash())
			}
			if tt.check != nil {
				tt.check(t, e)
			}
		})
	}
}

func TestSendRefusesBadEvents(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	sub := env.Sim.Subscribe()
	allow := "--allow-insecure-endpoint=" + env.SimAddr
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("allow-insecure-endpoint: ["+env.SimAddr+"]\nendpoint-allow-default-hosts: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"id":"x","subscription":{"endpoint":"https://fcm.googleapis.com/x"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no endpoint", []string{"--p256dh", sub.P256dh, "--auth", sub.Auth}, "subscription.endpoint"},
		{"short auth", []string{allow, "--endpoint", sub.Endpoint, "--p256dh", sub.P256dh, "--auth", "c2hvcnQ"}, "subscription.keys.auth"},
		{"bad urgency", []string{allow, "--endpoint", sub.Endpoint, "--p256dh", sub.P256dh, "--auth", sub.Auth, "--urgency", "asap"}, "urgency"},
		{"file without keys", []string{"--file", bad}, "subscription.keys"},
		{"missing file", []string{"--file", filepath.Join(t.TempDir(), "none.json")}, "--file"},
		{"bad tier", []string{"--tier", "tier0"}, "--tier"},
		{"bad app", []string{"--endpoint", sub.Endpoint, "--p256dh", sub.P256dh, "--auth", sub.Auth, "--app", "shop/eu"}, "--app"},
		{"app beside a file", []string{"--file", bad, "--app", "shop"}, "--app"},
		// The endpoint guard runs as in the processor.
		{"loopback endpoint", []string{"--endpoint", sub.Endpoint, "--p256dh", sub.P256dh, "--auth", sub.Auth}, "--allow-insecure-endpoint"},
		{"private address", []string{"--endpoint", "https://10.0.0.7/push/1", "--p256dh", sub.P256dh, "--auth", sub.Auth}, "endpoint_blocked"},
		{"metadata address", []string{"--endpoint", "https://169.254.169.254/latest", "--p256dh", sub.P256dh, "--auth", sub.Auth}, "endpoint_blocked"},
		{"plain http", []string{"--endpoint", "http://push.example.com/x", "--p256dh", sub.P256dh, "--auth", sub.Auth}, "endpoint_blocked"},
		{"strict hosts from the config file", []string{"--config", config, "--endpoint", "https://push.example.com/x", "--p256dh", sub.P256dh, "--auth", sub.Auth}, "endpoint_blocked"},
		{"bad allowed host", []string{"--endpoint-allow-host", "a b", "--endpoint", sub.Endpoint}, "--endpoint-allow-host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// No broker is reachable: a bad event must fail before any.
			code, _, stderr := runTool(t, "", nil, append([]string{"send", "--brokers", "127.0.0.1:1"}, tt.args...)...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, want 2 naming %q; stderr:\n%s", code, tt.want, stderr)
			}
			if strings.Contains(stderr, sub.Auth) || strings.Contains(stderr, sub.P256dh) {
				t.Errorf("stderr holds key material:\n%s", stderr)
			}
		})
	}
}

// send reads the processor's config file: its brokers, prefix and endpoint
// policy apply, its keys send has no flag for (tiers:, pacing:, the
// processor's tuning) are ignored, and flags still win over it.
func TestSendReadsConfigFile(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	sub := env.Sim.Subscribe()
	config := filepath.Join(t.TempDir(), "config.yaml")
	yaml := "brokers: [" + env.Brokers[0] + "]\nallow-insecure-endpoint: [" + env.SimAddr + "]\nmax-in-flight: 64\n" +
		"tiers:\n  tier2:\n    steps: [1s, 5s]\n    max_attempts: 3\n    weight: 3\npacing:\n  cut_rate: 0.05\n  open_for: 10s\n"
	if err := os.WriteFile(config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runTool(t, "", nil, "send", "--config", config, "--tier", "tier2", "--id", "evt-config",
		"--endpoint", sub.Endpoint, "--p256dh", sub.P256dh, "--auth", sub.Auth, "--payload", "x")
	if code != 0 || !strings.HasPrefix(stdout, "produced evt-config to push.tier2/") {
		t.Fatalf("exit %d, stdout %q; stderr:\n%s", code, stdout, stderr)
	}
	// A flag wins over the file: no broker answers there.
	code, _, stderr = runTool(t, "", nil, "send", "--config", config, "--brokers", "127.0.0.1:1", "--timeout", "1s",
		"--endpoint", sub.Endpoint, "--p256dh", sub.P256dh, "--auth", sub.Auth, "--payload", "x")
	if code != 1 || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("with --brokers over the file: exit %d, want 1 naming 127.0.0.1:1; stderr:\n%s", code, stderr)
	}
}

func TestVAPID(t *testing.T) {
	code, stdout, stderr := runTool(t, "", nil, "vapid", "--subject", "mailto:push@example.org")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), stdout)
	}
	env := make(map[string]string)
	for i, key := range []string{"VAPID_PUBLIC_KEY", "VAPID_PRIVATE_KEY", "VAPID_SUBJECT"} {
		k, v, ok := strings.Cut(lines[i], "=")
		if !ok || k != key || v == "" {
			t.Fatalf("line %d is %q, want %s=…", i+1, lines[i], key)
		}
		env[k] = v
	}
	if env["VAPID_SUBJECT"] != "mailto:push@example.org" {
		t.Errorf("subject %q", env["VAPID_SUBJECT"])
	}
	pub, err := base64.RawURLEncoding.DecodeString(env["VAPID_PUBLIC_KEY"])
	if err != nil {
		t.Fatalf("public key: %v", err)
	}
	priv, err := base64.RawURLEncoding.DecodeString(env["VAPID_PRIVATE_KEY"])
	if err != nil {
		t.Fatalf("private key: %v", err)
	}
	key, err := ecdh.P256().NewPrivateKey(priv)
	if err != nil {
		t.Fatalf("private key is no P-256 scalar: %v", err)
	}
	if !bytes.Equal(key.PublicKey().Bytes(), pub) {
		t.Error("the public key is not the private key's")
	}

	// Two runs, two key pairs.
	_, again, _ := runTool(t, "", nil, "vapid")
	if strings.Contains(again, env["VAPID_PRIVATE_KEY"]) {
		t.Error("vapid printed the same private key twice")
	}

	// --app: an entry of the keys file, which the processor reads back.
	code, entry, stderr := runTool(t, "", nil, "vapid", "--app", "shop-2027", "--subject", "mailto:push@shop.example")
	if code != 0 {
		t.Fatalf("vapid --app: exit %d; stderr:\n%s", code, stderr)
	}
	apps, err := parseVAPIDKeys([]byte(entry))
	if err != nil || len(apps) != 1 || apps["shop-2027"].Subject != "mailto:push@shop.example" {
		t.Fatalf("vapid --app printed %q: %v %+v", entry, err, apps)
	}
	// A subject the processor would refuse is refused here, before any
	// key is printed.
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--subject", "foo"}, `--subject "foo": want mailto:address or an https URL`},
		{[]string{"--subject", "http://example.com"}, `--subject "http://example.com": want mailto:`},
		{[]string{"--subject", "mailto:"}, `--subject "mailto:": want mailto:`},
		{[]string{"--subject", ""}, `--subject "": missing`},
		{[]string{"--app", "shop", "--subject", "push@shop.example"}, `--subject "push@shop.example": want mailto:`},
		{[]string{"--app", "shop/eu"}, `--app: app name "shop/eu"`},
	} {
		code, stdout, stderr := runTool(t, "", nil, append([]string{"vapid"}, tt.args...)...)
		if code != 2 || !strings.Contains(stderr, tt.want) || stdout != "" {
			t.Errorf("vapid %q: exit %d, stdout %q, want 2 and nothing printed, naming %q; stderr:\n%s", tt.args, code, stdout, tt.want, stderr)
		}
	}
	// A bare address is the default identity's (the processor reads it as
	// mailto:), and the printed lines are accepted by the processor.
	if code, _, stderr := runTool(t, "", nil, "vapid", "--subject", "push@example.org"); code != 0 {
		t.Errorf("vapid --subject push@example.org: exit %d; stderr:\n%s", code, stderr)
	}
}

// send against a broker nobody answers on gives up after --timeout with an
// error that says so, exit 1, instead of waiting for ever.
func TestSendDeadline(t *testing.T) {
	env := testenv.Start(t, testenv.Options{NoProcessor: true})
	sub := env.Sim.Subscribe()
	code, _, stderr := runTool(t, "", nil, "send", "--brokers", "127.0.0.1:1", "--timeout", "1s", "--allow-insecure-endpoint", env.SimAddr,
		"--endpoint", sub.Endpoint, "--p256dh", sub.P256dh, "--auth", sub.Auth, "--payload", "x")
	if code != 1 || !strings.Contains(stderr, "--timeout") {
		t.Fatalf("exit %d, want 1 naming --timeout; stderr:\n%s", code, stderr)
	}
}
