package main

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/broker"
	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/pushsim"
	"github.com/tierpush/tierpush/internal/testenv"
)

// writeFile writes content into a new file of dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSecurityFlagErrors: every bad security flag or secret file stops the
// processor and the tools at start with exit 2, naming the flag, and never
// echoing a secret.
func TestSecurityFlagErrors(t *testing.T) {
	const secret = "s3cret-do-not-print-0123456789abcdef"
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	short := writeFile(t, dir, "short", "short-key\n")
	garbage := writeFile(t, dir, "garbage", secret+"\n")
	empty := writeFile(t, dir, "empty", "\n")
	huge := writeFile(t, dir, "huge", strings.Repeat("k", maxSecretFile+1))
	notPEM := writeFile(t, dir, "ca.pem", "not a certificate "+secret)
	pki := testenv.NewPKI(t).WriteFiles(t, dir)
	vapid := func() []string {
		return []string{"--vapid-public-key", "BOr2", "--vapid-subject", "mailto:ops@example.com"}
	}
	run := func(extra ...string) []string {
		return append(append([]string{"--brokers", "127.0.0.1:1", "--hmac-key", secret}, vapid()...), extra...)
	}
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"missing hmac key file", []string{"--dev", "--hmac-key-file", missing}, nil, "--hmac-key-file"},
		{"short hmac key file", []string{"--dev", "--hmac-key-file", short}, nil, "--hmac-key-file"},
		{"empty hmac key file", []string{"--dev", "--hmac-key-file", empty}, nil, "--hmac-key-file"},
		{"huge hmac key file", []string{"--dev", "--hmac-key-file", huge}, nil, "--hmac-key-file"},
		{"hmac key and file", []string{"--dev", "--hmac-key", secret, "--hmac-key-file", garbage}, nil, "--hmac-key-file"},
		{"short old hmac key file", []string{"--dev", "--hmac-key", secret, "--hmac-key-old-file", short}, nil, "--hmac-key-old-file"},
		{"hmac key file from env", []string{"--dev"}, []string{"TIERPUSH_HMAC_KEY_FILE=" + missing}, "--hmac-key-file"},
		{"missing vapid key file", []string{"--dev", "--vapid-private-key-file", missing}, nil, "--vapid-private-key-file"},
		{"bad vapid key file", []string{"--dev", "--vapid-private-key-file", garbage}, nil, "--vapid-private-key-file"},
		{"bad endpoint host", []string{"--dev", "--endpoint-allow-host", "push.*.com"}, nil, "--endpoint-allow-host"},
		{"bad endpoint port", []string{"--dev", "--endpoint-allow-port", "70000"}, nil, "endpoint-allow-port"},
		{"kafka tls without brokers", []string{"--dev", "--kafka-tls"}, nil, "--brokers"},
		{"unknown sasl mechanism", run("--kafka-sasl-mechanism", "SCRAM-SHA-999", "--kafka-sasl-user", "u", "--kafka-sasl-password", secret), nil, "--kafka-sasl-mechanism"},
		{"plain without tls", run("--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u", "--kafka-sasl-password", secret), nil, "--kafka-sasl-mechanism"},
		{"sasl without user", run("--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-password", secret), nil, "--kafka-sasl-user"},
		{"sasl without password", run("--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-user", "u"), nil, "--kafka-sasl-password"},
		{"password without mechanism", run("--kafka-sasl-user", "u", "--kafka-sasl-password", secret), nil, "--kafka-sasl-mechanism"},
		{"missing password file", run("--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-user", "u", "--kafka-sasl-password-file", missing), nil, "--kafka-sasl-password-file"},
		{"password and file", run("--kafka-sasl-mechanism", "SCRAM-SHA-256", "--kafka-sasl-user", "u", "--kafka-sasl-password", secret, "--kafka-sasl-password-file", garbage), nil, "--kafka-sasl-password-file"},
		{"missing ca", run("--kafka-tls-ca", missing), nil, "--kafka-tls-ca"},
		{"ca not pem", run("--kafka-tls-ca", notPEM), nil, "--kafka-tls-ca"},
		{"cert without key", run("--kafka-tls-cert", pki.Cert), nil, "--kafka-tls-key"},
		{"key is not the cert's", run("--kafka-tls-cert", pki.Cert, "--kafka-tls-key", garbage), nil, "--kafka-tls-cert"},
		{"tool: unknown mechanism", []string{"topics", "ensure", "--brokers", "127.0.0.1:1", "--kafka-sasl-mechanism", "GSSAPI"}, nil, "--kafka-sasl-mechanism"},
		{"tool: missing ca", []string{"dlq", "list", "--brokers", "127.0.0.1:1", "--kafka-tls-ca", missing}, nil, "--kafka-tls-ca"},
		{"tool: password file from env", []string{"dlq", "list", "--brokers", "127.0.0.1:1", "--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", "u"},
			[]string{"TIERPUSH_KAFKA_SASL_PASSWORD_FILE=" + missing}, "--kafka-sasl-password-file"},
		{"tool: plain without tls", []string{"dlq", "redrive", "--brokers", "127.0.0.1:1", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-user", "u", "--kafka-sasl-password", secret}, nil, "--kafka-sasl-mechanism"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary, tt.args...)
			cmd.Env = append(os.Environ(), tt.env...)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != 2 || !strings.Contains(string(out), tt.want) {
				t.Errorf("exit %d, want 2 naming %q; output:\n%s", code, tt.want, out)
			}
			if strings.Contains(string(out), secret) {
				t.Errorf("output holds the secret:\n%s", out)
			}
		})
	}
}

// TestKafkaTLSSCRAM runs the tools and the processor against a broker that
// requires mutual TLS and SCRAM-SHA-512, with every secret in a file as a
// Kubernetes secret mount holds it (trailing newline included) or in an env
// var: topics ensure, send, the processor (a delivery, a 503 that goes
// through a signed retry, a blocked endpoint) and dlq list. The processor
// logs at debug level; neither its logs nor /metrics hold any secret. A
// wrong password is refused.
func TestKafkaTLSSCRAM(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess test")
	}
	user := &broker.User{Method: "SCRAM-SHA-512", Name: "tierpush", Password: "scram-password-from-a-file-4f1c"}
	env := testenv.Start(t, testenv.Options{NoProcessor: true, KafkaTLS: true, SASL: user})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	files := env.PKI.WriteFiles(t, dir)
	hmacKey := base64.StdEncoding.EncodeToString([]byte("hmac-key-from-a-file-0123456789abcdef"))
	pwFile := writeFile(t, dir, "password", user.Password+"\n")
	hmacFile := writeFile(t, dir, "hmac", hmacKey+"\n")
	vapidFile := writeFile(t, dir, "vapid", env.VAPID.PrivateKey+"\n")
	kafkaArgs := []string{"--brokers", env.Brokers[0], "--kafka-tls-ca", files.CA, "--kafka-tls-cert", files.Cert, "--kafka-tls-key", files.Key,
		"--kafka-sasl-mechanism", user.Method, "--kafka-sasl-user", user.Name, "--kafka-sasl-password-file", pwFile}
	kafkaEnv := []string{"TIERPUSH_BROKERS=" + env.Brokers[0], "TIERPUSH_KAFKA_TLS_CA=" + files.CA, "TIERPUSH_KAFKA_TLS_CERT=" + files.Cert,
		"TIERPUSH_KAFKA_TLS_KEY=" + files.Key, "TIERPUSH_KAFKA_SASL_MECHANISM=" + user.Method, "TIERPUSH_KAFKA_SASL_USER=" + user.Name,
		"TIERPUSH_KAFKA_SASL_PASSWORD=" + user.Password, "TIERPUSH_ALLOW_INSECURE_ENDPOINT=" + env.SimAddr}

	code, stdout, stderr := runTool(t, "", nil, append([]string{"topics", "ensure", "--partitions", "4"}, kafkaArgs...)...)
	if code != 0 || !strings.Contains(stdout, "push.outcomes") {
		t.Fatalf("topics ensure: exit %d\n%s%s", code, stdout, stderr)
	}
	// A wrong password gets nowhere. kfake drops the connection, which kgo
	// retries for 30 s before the tool fails: give it 5 s, alongside.
	wrong := append(append([]string{"topics", "ensure", "--partitions", "4"}, kafkaArgs[:len(kafkaArgs)-2]...), "--kafka-sasl-password", "not-the-password")
	wrongDone := make(chan string, 1)
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		cmd := exec.CommandContext(wctx, binary, wrong...)
		out, err := cmd.CombinedOutput()
		switch {
		case err == nil:
			wrongDone <- "exit 0"
		case strings.Contains(string(out), "not-the-password"):
			wrongDone <- "output holds the password:\n" + string(out)
		default:
			wrongDone <- ""
		}
	}()
	defer func() {
		if msg := <-wrongDone; msg != "" {
			t.Errorf("topics ensure with a wrong password: %s", msg)
		}
	}()

	// Three events: one sent with `processor send` (env vars only), two
	// produced directly.
	delivered := env.Sim.Subscribe()
	retried := env.Sim.Subscribe(pushsim.Response{Status: 503})
	blocked := env.Sim.Subscribe()
	blocked.Endpoint = "https://169.254.169.254/latest/meta-data/secret-token-7a7a7a7a"
	code, stdout, stderr = runTool(t, "", kafkaEnv, "send", "--id", "evt-send", "--endpoint", delivered.Endpoint,
		"--p256dh", delivered.P256dh, "--auth", delivered.Auth, "--payload", "secret-payload-send")
	if code != 0 {
		t.Fatalf("send: exit %d\n%s%s", code, stdout, stderr)
	}
	env.Produce(ctx,
		&kgo.Record{Topic: "push.tier2", Key: []byte(event.EndpointHash(retried.Endpoint)), Value: testenv.Event("evt-retried", retried, "secret-payload-retried", nil)},
		&kgo.Record{Topic: "push.tier3", Key: []byte(event.EndpointHash(blocked.Endpoint)), Value: testenv.Event("evt-blocked", blocked, "secret-payload-blocked", nil)},
	)

	httpAddr := freeAddr(t)
	p := startProc(t, append(kafkaArgs,
		"--vapid-public-key", env.VAPID.PublicKey, "--vapid-private-key-file", vapidFile, "--vapid-subject", env.VAPID.Subject,
		"--hmac-key-file", hmacFile, "--allow-insecure-endpoint", env.SimAddr, "--http-addr", httpAddr,
		"--log-level", "debug", "--log-format", "json", "--partitions", "4", "--retry-jitter", "0")...)
	outs, err := env.ReadOutcomes(ctx, 3)
	if err != nil {
		t.Fatalf("%v; processor stderr:\n%s", err, p.stderr)
	}
	want := map[string]string{"evt-send": "delivered", "evt-retried": "delivered", "evt-blocked": "dead"}
	for id, o := range want {
		if got := outs[id]; len(got) != 1 || got[0].Outcome != o {
			t.Errorf("%s: outcomes %+v, want one %s", id, got, o)
		}
	}
	if got := outs["evt-retried"]; len(got) == 1 && got[0].Attempts != 2 {
		t.Errorf("evt-retried: %d attempts, want 2 (one signed retry)", got[0].Attempts)
	}

	code, stdout, stderr = runTool(t, "", nil, append([]string{"dlq", "list", "--format", "json"}, kafkaArgs...)...)
	if code != 0 || !strings.Contains(stdout, `"evt-blocked"`) {
		t.Errorf("dlq list: exit %d\n%s%s", code, stdout, stderr)
	}

	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t, time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, p.stderr)
	}

	secrets := map[string]string{
		"the SASL password":       user.Password,
		"the HMAC key":            hmacKey,
		"the VAPID private key":   env.VAPID.PrivateKey,
		"the client key":          strings.TrimSpace(string(env.PKI.ClientKeyPEM[len("-----BEGIN EC PRIVATE KEY-----\n"):][:40])),
		"a payload":               "secret-payload-",
		"a blocked endpoint path": "secret-token-7a7a7a7a",
	}
	for _, sub := range []pushsim.Subscription{delivered, retried} {
		u, _ := url.Parse(sub.Endpoint)
		secrets["endpoint "+sub.ID] = sub.Endpoint
		secrets["endpoint path "+sub.ID] = u.Path
		secrets["p256dh "+sub.ID] = sub.P256dh
		secrets["auth "+sub.ID] = sub.Auth
	}
	logs := p.stderr.String()
	if !strings.Contains(logs, `"level":"DEBUG"`) || !strings.Contains(string(metrics), "tierpush_sends") {
		t.Fatalf("nothing to check: %d bytes of logs, /metrics:\n%.500s", len(logs), metrics)
	}
	for label, s := range secrets {
		for where, text := range map[string]string{"the logs": logs, "/metrics": string(metrics), "dlq list": stdout + stderr} {
			if strings.Contains(text, s) {
				t.Errorf("%s holds %s", where, label)
			}
		}
	}
	t.Logf("processor over mTLS + %s: %d bytes of debug logs, %d bytes of /metrics checked for %d secrets", user.Method, len(logs), len(metrics), len(secrets))
}

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		content string
		want    string
	}{
		{"secret", "secret"},
		{"secret\n", "secret"},
		{"secret\r\n", "secret"},
		{"  spaced secret \n", "  spaced secret "},
		{"two lines\nsecond\n", "two lines\nsecond"},
	}
	for i, tt := range tests {
		p := writeFile(t, dir, strconv.Itoa(i), tt.content)
		got, err := readSecretFile("--x-file", p)
		if err != nil || got != tt.want {
			t.Errorf("readSecretFile(%q) = %q, %v; want %q", tt.content, got, err, tt.want)
		}
	}
}

// TestKafkaSecurityOpts: the flags turn into exactly the kgo options asked
// for, and the TLS config carries the CA, client certificate, server name
// and verification setting.
func TestKafkaSecurityOpts(t *testing.T) {
	files := testenv.NewPKI(t).WriteFiles(t, t.TempDir())
	tests := []struct {
		name     string
		k        kafkaSecurity
		wantOpts int
	}{
		{"none", kafkaSecurity{}, 0},
		{"tls", kafkaSecurity{TLS: true}, 1},
		{"tls implied by ca", kafkaSecurity{TLSCA: files.CA}, 1},
		{"mtls", kafkaSecurity{TLSCA: files.CA, TLSCert: files.Cert, TLSKey: files.Key, TLSServerName: "kafka.internal"}, 1},
		{"scram without tls", kafkaSecurity{SASLMechanism: "SCRAM-SHA-256", SASLUser: "u", SASLPassword: "p"}, 1},
		{"plain with tls, lower case", kafkaSecurity{TLS: true, SASLMechanism: "plain", SASLUser: "u", SASLPassword: "p"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.k.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			opts, err := tt.k.opts()
			if err != nil || len(opts) != tt.wantOpts {
				t.Fatalf("opts = %d options, %v; want %d", len(opts), err, tt.wantOpts)
			}
			tc, err := tt.k.tlsConfig()
			if err != nil {
				t.Fatal(err)
			}
			if (tc != nil) != tt.k.tlsEnabled() {
				t.Fatalf("tls config %v with TLS enabled %v", tc, tt.k.tlsEnabled())
			}
			if tc == nil {
				return
			}
			if tc.InsecureSkipVerify || tc.MinVersion < tls.VersionTLS12 || tc.ServerName != tt.k.TLSServerName {
				t.Errorf("tls config: skip verify %v, min version %x, server name %q", tc.InsecureSkipVerify, tc.MinVersion, tc.ServerName)
			}
			if (tc.RootCAs != nil) != (tt.k.TLSCA != "") || len(tc.Certificates) != map[bool]int{true: 1}[tt.k.TLSCert != ""] {
				t.Errorf("tls config: roots %v, %d certificates", tc.RootCAs != nil, len(tc.Certificates))
			}
		})
	}
}

// TestGuardOptions: the endpoint policy flags reach the policy.
func TestGuardOptions(t *testing.T) {
	tests := []struct {
		name     string
		policy   endpointPolicy
		insecure []string
		endpoint string
		ok       bool
	}{
		{"default: any public host", endpointPolicy{}, nil, "https://push.example.com/x", true},
		{"default: no loopback", endpointPolicy{}, nil, "https://127.0.0.1/x", false},
		{"default hosts: fcm", endpointPolicy{AllowDefaultHosts: true}, nil, "https://fcm.googleapis.com/fcm/send/x", true},
		{"default hosts: apple", endpointPolicy{AllowDefaultHosts: true}, nil, "https://web.push.apple.com/x", true},
		{"default hosts: others refused", endpointPolicy{AllowDefaultHosts: true}, nil, "https://push.example.com/x", false},
		{"allow host", endpointPolicy{AllowHosts: listFlag{"*.example.com"}}, nil, "https://push.example.com/x", true},
		{"allow host and defaults", endpointPolicy{AllowHosts: listFlag{"push.example.com"}, AllowDefaultHosts: true}, nil, "https://fcm.googleapis.com/x", true},
		{"strict: IPs refused", endpointPolicy{AllowHosts: listFlag{"push.example.com"}}, nil, "https://8.8.8.8/x", false},
		{"strict: simulator still allowed", endpointPolicy{AllowDefaultHosts: true}, []string{"127.0.0.1:8443"}, "http://127.0.0.1:8443/push/1", true},
		{"port refused", endpointPolicy{}, nil, "https://push.example.com:8443/x", false},
		{"port allowed", endpointPolicy{AllowPorts: []int{8443}}, nil, "https://push.example.com:8443/x", true},
		{"443 still allowed", endpointPolicy{AllowPorts: []int{8443}}, nil, "https://push.example.com/x", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.policy.guard(tt.insecure)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.CheckEndpoint(tt.endpoint); (err == nil) != tt.ok {
				t.Errorf("CheckEndpoint(%q) = %v, want ok %v", tt.endpoint, err, tt.ok)
			}
		})
	}
}
