package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOAuthBearer: OAUTHBEARER takes its token from a file, read again at
// every authentication, so a refreshed file rotates the token without a
// restart; it needs TLS and the file, and takes no user or password.
func TestOAuthBearer(t *testing.T) {
	dir := t.TempDir()
	tokenFile := writeFile(t, dir, "token", "tok-1\n")
	k := kafkaSecurity{TLS: true, SASLMechanism: "oauthbearer", SASLOAuthTokenFile: tokenFile}
	if err := k.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	opts, err := k.opts()
	if err != nil || len(opts) != 2 {
		t.Fatalf("opts = %d options, %v; want TLS and SASL", len(opts), err)
	}
	m := k.mechanism()
	if m == nil || m.Name() != "OAUTHBEARER" {
		t.Fatalf("mechanism %v, want OAUTHBEARER", m)
	}
	for _, tok := range []string{"tok-1", "tok-2"} {
		if err := os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, first, err := m.Authenticate(context.Background(), "kafka-0:9093")
		if err != nil {
			t.Fatal(err)
		}
		if want := "auth=Bearer " + tok + "\x01"; !strings.Contains(string(first), want) {
			t.Errorf("first message %q lacks %q", first, want)
		}
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Authenticate(context.Background(), "kafka-0:9093"); err == nil || !strings.Contains(err.Error(), "--kafka-sasl-oauth-token-file") {
		t.Errorf("token file gone: %v, want an error naming --kafka-sasl-oauth-token-file", err)
	}

	tests := []struct {
		name string
		k    kafkaSecurity
		want string
	}{
		{"without tls", kafkaSecurity{SASLMechanism: "OAUTHBEARER", SASLOAuthTokenFile: writeFile(t, dir, "t2", "x")}, "--kafka-tls"},
		{"without token file", kafkaSecurity{TLS: true, SASLMechanism: "OAUTHBEARER"}, "--kafka-sasl-oauth-token-file"},
		{"empty token file", kafkaSecurity{TLS: true, SASLMechanism: "OAUTHBEARER", SASLOAuthTokenFile: writeFile(t, dir, "t3", "\n")}, "--kafka-sasl-oauth-token-file"},
		{"with a user", kafkaSecurity{TLS: true, SASLMechanism: "OAUTHBEARER", SASLOAuthTokenFile: writeFile(t, dir, "t4", "x"), SASLUser: "u"}, "--kafka-sasl-user"},
		{"token file for scram", kafkaSecurity{SASLMechanism: "SCRAM-SHA-256", SASLUser: "u", SASLPassword: "p", SASLOAuthTokenFile: writeFile(t, dir, "t5", "x")}, "--kafka-sasl-oauth-token-file"},
	}
	for _, tt := range tests {
		if err := tt.k.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error naming %s", tt.name, err, tt.want)
		}
	}
}

// TestSASLMechanismErrors: the processor and a tool exit 2 on a mechanism
// they do not know or an OAUTHBEARER setup that cannot work, naming the
// flag, without echoing the token.
func TestSASLMechanismErrors(t *testing.T) {
	const token = "eyJ-token-do-not-print-0123456789"
	dir := t.TempDir()
	tokenFile := writeFile(t, dir, "token", token+"\n")
	base := []string{"--brokers", "127.0.0.1:1", "--hmac-key", strings.Repeat("k", 32), "--vapid-public-key", "BOr2", "--vapid-subject", "mailto:ops@example.com"}
	tests := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"unknown mechanism", append(base, "--kafka-sasl-mechanism", "GSSAPI"), nil, "--kafka-sasl-mechanism"},
		{"oauthbearer without tls", append(base, "--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-oauth-token-file", tokenFile), nil, "--kafka-sasl-mechanism"},
		{"oauthbearer without token", append(base, "--kafka-tls", "--kafka-sasl-mechanism", "OAUTHBEARER"), nil, "--kafka-sasl-oauth-token-file"},
		{"token file from env without mechanism", base, []string{"TIERPUSH_KAFKA_SASL_OAUTH_TOKEN_FILE=" + tokenFile}, "--kafka-sasl-oauth-token-file"},
		{"tool: oauthbearer token missing", []string{"topics", "ensure", "--brokers", "127.0.0.1:1", "--kafka-tls", "--kafka-sasl-mechanism", "OAUTHBEARER",
			"--kafka-sasl-oauth-token-file", filepath.Join(dir, "missing")}, nil, "--kafka-sasl-oauth-token-file"},
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
			if strings.Contains(string(out), token) {
				t.Errorf("output holds the token:\n%s", out)
			}
		})
	}
}
