package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms --kafka-sasl-mechanism accepts.
const (
	saslPlain       = "PLAIN"
	saslSCRAMSHA256 = "SCRAM-SHA-256"
	saslSCRAMSHA512 = "SCRAM-SHA-512"
	saslOAuthBearer = "OAUTHBEARER"
)

// maxSecretFile bounds what a secret file may hold: keys and passwords are
// short, and a huge file is a mistake (a wrong mount), not a secret.
const maxSecretFile = 64 << 10

// kafkaSecurity is how every Kafka client of the processor and the tools
// connects: TLS (server verification against --kafka-tls-ca or the system
// roots, optionally a client certificate) and SASL. The zero value is
// plaintext without authentication, which is what the embedded broker
// speaks.
type kafkaSecurity struct {
	TLS                   bool
	TLSCA                 string // PEM file of the CAs trusted for the brokers' certificates
	TLSCert               string // PEM file of the client certificate (mutual TLS)
	TLSKey                string // PEM file of the client certificate's key
	TLSServerName         string
	TLSInsecureSkipVerify bool

	SASLMechanism    string
	SASLUser         string
	SASLPassword     string
	SASLPasswordFile string
	// SASLOAuthTokenFile holds the OAUTHBEARER token. It is read again at
	// every authentication, so whatever refreshes the file (a sidecar, a
	// Secret updated in place) rotates the token without a restart.
	SASLOAuthTokenFile string
}

func (k *kafkaSecurity) register(fs *flag.FlagSet) {
	fs.BoolVar(&k.TLS, "kafka-tls", false, "connect to the brokers over TLS (implied by the other --kafka-tls-* flags)")
	fs.StringVar(&k.TLSCA, "kafka-tls-ca", "", "PEM file of the CA certificates that sign the brokers' certificates (default: the system roots)")
	fs.StringVar(&k.TLSCert, "kafka-tls-cert", "", "PEM file of the client certificate for mutual TLS (with --kafka-tls-key)")
	fs.StringVar(&k.TLSKey, "kafka-tls-key", "", "PEM file of the client certificate's private key")
	fs.StringVar(&k.TLSServerName, "kafka-tls-server-name", "", "name the brokers' certificates must hold (default: the host dialed)")
	fs.BoolVar(&k.TLSInsecureSkipVerify, "kafka-tls-insecure-skip-verify", false, "do not verify the brokers' certificates (test clusters only: anyone on the path can read the traffic and the SASL password)")
	fs.StringVar(&k.SASLMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: PLAIN (needs TLS), SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (needs TLS and --kafka-sasl-oauth-token-file); empty disables SASL")
	fs.StringVar(&k.SASLUser, "kafka-sasl-user", "", "SASL user name")
	fs.StringVar(&k.SASLPassword, "kafka-sasl-password", "", "SASL password (prefer --kafka-sasl-password-file or the env var)")
	fs.StringVar(&k.SASLPasswordFile, "kafka-sasl-password-file", "", "file holding the SASL password (a Kubernetes secret mount); a trailing newline is dropped")
	fs.StringVar(&k.SASLOAuthTokenFile, "kafka-sasl-oauth-token-file", "", "file holding the OAUTHBEARER token, read again at every authentication (so a refreshed file rotates it); a trailing newline is dropped")
}

// enabled reports whether any security flag is set.
func (k *kafkaSecurity) enabled() bool { return k.tlsEnabled() || k.SASLMechanism != "" }

func (k *kafkaSecurity) tlsEnabled() bool {
	return k.TLS || k.TLSCA != "" || k.TLSCert != "" || k.TLSKey != "" || k.TLSServerName != "" || k.TLSInsecureSkipVerify
}

// load reads the password file. It runs before Validate.
func (k *kafkaSecurity) load() error {
	if k.SASLPasswordFile == "" {
		return nil
	}
	if k.SASLPassword != "" {
		return errors.New("--kafka-sasl-password-file: --kafka-sasl-password is set too; give one")
	}
	pw, err := readSecretFile("--kafka-sasl-password-file", k.SASLPasswordFile)
	if err != nil {
		return err
	}
	k.SASLPassword = pw
	return nil
}

// Validate names every flag at fault. It never quotes the password.
func (k *kafkaSecurity) Validate() error {
	var errs []error
	if (k.TLSCert == "") != (k.TLSKey == "") {
		errs = append(errs, errors.New("--kafka-tls-cert and --kafka-tls-key: give both or neither"))
	}
	mech := strings.ToUpper(k.SASLMechanism)
	if k.SASLOAuthTokenFile != "" && mech != saslOAuthBearer {
		errs = append(errs, fmt.Errorf("--kafka-sasl-oauth-token-file: needs --kafka-sasl-mechanism OAUTHBEARER, not %q", truncateFlag(k.SASLMechanism)))
	}
	switch mech {
	case "":
		if k.SASLUser != "" || k.SASLPassword != "" {
			errs = append(errs, errors.New("--kafka-sasl-mechanism: empty, but --kafka-sasl-user or a password is set"))
		}
	case saslOAuthBearer:
		if k.SASLUser != "" || k.SASLPassword != "" {
			errs = append(errs, errors.New("--kafka-sasl-user and --kafka-sasl-password: not used by OAUTHBEARER (the token names the principal); drop them"))
		}
		if !k.tlsEnabled() {
			errs = append(errs, errors.New("--kafka-sasl-mechanism: OAUTHBEARER sends the token in clear; add --kafka-tls"))
		}
		if k.SASLOAuthTokenFile == "" {
			errs = append(errs, errors.New("--kafka-sasl-oauth-token-file: empty; OAUTHBEARER reads its token from this file"))
		} else if _, err := k.oauthToken(); err != nil {
			errs = append(errs, err)
		}
	case saslPlain, saslSCRAMSHA256, saslSCRAMSHA512:
		if k.SASLUser == "" {
			errs = append(errs, errors.New("--kafka-sasl-user: empty"))
		}
		if k.SASLPassword == "" {
			errs = append(errs, errors.New("--kafka-sasl-password: empty (or set --kafka-sasl-password-file)"))
		}
		if strings.EqualFold(k.SASLMechanism, saslPlain) && !k.tlsEnabled() {
			errs = append(errs, errors.New("--kafka-sasl-mechanism: PLAIN sends the password in clear; add --kafka-tls or use SCRAM-SHA-256/512"))
		}
	default:
		errs = append(errs, fmt.Errorf("--kafka-sasl-mechanism: %q, want PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", truncateFlag(k.SASLMechanism)))
	}
	if len(errs) == 0 {
		// Read the files now so a bad one fails at start, naming its flag.
		if _, err := k.tlsConfig(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// opts returns the kgo options for TLS and SASL; none when neither is set.
// Validate must have passed.
func (k *kafkaSecurity) opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := k.tlsConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if m := k.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// tlsConfig builds the client TLS config from the files, or nil without TLS.
func (k *kafkaSecurity) tlsConfig() (*tls.Config, error) {
	if !k.tlsEnabled() {
		return nil, nil
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         k.TLSServerName,
		InsecureSkipVerify: k.TLSInsecureSkipVerify, //nolint:gosec // opt-in flag for test clusters, documented
	}
	if k.TLSCA != "" {
		pem, err := os.ReadFile(k.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--kafka-tls-ca: %s holds no PEM certificate", k.TLSCA)
		}
		tc.RootCAs = pool
	}
	if k.TLSCert != "" {
		// tls.LoadX509KeyPair errors never quote key material.
		cert, err := tls.LoadX509KeyPair(k.TLSCert, k.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-cert/--kafka-tls-key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (k *kafkaSecurity) mechanism() sasl.Mechanism {
	switch strings.ToUpper(k.SASLMechanism) {
	case saslPlain:
		return plain.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsMechanism()
	case saslSCRAMSHA256:
		return scram.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsSha256Mechanism()
	case saslSCRAMSHA512:
		return scram.Auth{User: k.SASLUser, Pass: k.SASLPassword}.AsSha512Mechanism()
	case saslOAuthBearer:
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := k.oauthToken()
			return oauth.Auth{Token: tok}, err
		})
	}
	return nil
}

// oauthToken reads the OAUTHBEARER token file; errors name the flag and
// never hold the token.
func (k *kafkaSecurity) oauthToken() (string, error) {
	return readSecretFile("--kafka-sasl-oauth-token-file", k.SASLOAuthTokenFile)
}

// readSecretFile reads a secret as Kubernetes mounts it: the whole file,
// without one trailing newline (\n or \r\n). The error names flag and never
// holds the file's contents.
func readSecretFile(name, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", fmt.Errorf("%s: read %s: %w", name, path, err)
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("%s: %s is larger than %d bytes", name, path, maxSecretFile)
	}
	s := string(b)
	s = strings.TrimSuffix(s, "\n")
	s = strings.TrimSuffix(s, "\r")
	if s == "" {
		return "", fmt.Errorf("%s: %s is empty", name, path)
	}
	return s, nil
}

// truncateFlag bounds a flag value quoted in an error.
func truncateFlag(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}

// security checks the tool's Kafka security flags and returns their kgo
// options; errors are usage errors naming the flag.
func (k *kafkaFlags) security() ([]kgo.Opt, error) {
	if err := k.Security.load(); err != nil {
		return nil, usageError(err)
	}
	if err := k.Security.Validate(); err != nil {
		return nil, usageError(err)
	}
	opts, err := k.Security.opts()
	if err != nil {
		return nil, usageError(err)
	}
	return opts, nil
}
