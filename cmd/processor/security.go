package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/tierpush/tierpush/internal/netguard"
	"github.com/tierpush/tierpush/topology"
)

// secretFiles are the --*-file flags: secrets read from files at start, as
// Kubernetes mounts them, instead of from flags or env vars.
type secretFiles struct {
	VAPIDPrivateKey string
	HMACKey         string
	HMACKeysOld     listFlag
}

// endpointPolicy are the flags of the SSRF policy beyond
// --allow-insecure-endpoint.
type endpointPolicy struct {
	AllowHosts        listFlag
	AllowDefaultHosts bool
	AllowPorts        []int
}

// registerSecurityFlags declares the secret-file, endpoint-policy and Kafka
// security flags of `processor run`.
func (c *Config) registerSecurityFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Files.VAPIDPrivateKey, "vapid-private-key-file", "", "file holding the VAPID private key (instead of --vapid-private-key)")
	fs.StringVar(&c.Files.HMACKey, "hmac-key-file", "", "file holding the push-sig key (instead of --hmac-key)")
	fs.Var(&c.Files.HMACKeysOld, "hmac-key-old-file", "file holding an older push-sig key still accepted (rotation); repeatable")
	c.Endpoints.register(fs)
	c.Kafka.register(fs)
}

// register declares the endpoint policy's flags (the processor's and
// send's).
func (e *endpointPolicy) register(fs *flag.FlagSet) {
	fs.Var(&e.AllowHosts, "endpoint-allow-host", "strict mode: only endpoints on this host or *.suffix are sent to; repeatable (default: any public host)")
	fs.BoolVar(&e.AllowDefaultHosts, "endpoint-allow-default-hosts", false, "strict mode with the public push services: FCM, Mozilla autopush, Apple, WNS (adds to --endpoint-allow-host)")
	fs.Func("endpoint-allow-port", "port endpoints may use besides 443; repeatable", func(v string) error {
		for _, s := range splitList(v) {
			p, err := strconv.Atoi(s)
			if err != nil || p < 1 || p > 65535 {
				return fmt.Errorf("%q, want a port 1..65535", s)
			}
			e.AllowPorts = append(e.AllowPorts, p)
		}
		return nil
	})
}

// validate checks the host patterns, each error naming the flag.
func (e *endpointPolicy) validate() error {
	var errs []error
	for _, h := range e.AllowHosts {
		if _, err := netguard.New(netguard.AllowHosts(h)); err != nil {
			errs = append(errs, fmt.Errorf("--endpoint-allow-host: %q, want a host name or *.suffix", truncateFlag(h)))
		}
	}
	return errors.Join(errs...)
}

// guard is the SSRF policy of the flags: e with --allow-insecure-endpoint
// entries.
func (e *endpointPolicy) guard(allowInsecure []string) (*netguard.Policy, error) {
	opts := []netguard.Option{netguard.AllowInsecure(allowInsecure...)}
	hosts := append([]string(nil), e.AllowHosts...)
	if e.AllowDefaultHosts {
		hosts = append(hosts, netguard.DefaultPushHosts()...)
	}
	if len(hosts) > 0 {
		opts = append(opts, netguard.AllowHosts(hosts...))
	}
	if len(e.AllowPorts) > 0 {
		opts = append(opts, netguard.AllowPorts(append([]int{443}, e.AllowPorts...)...))
	}
	p, err := netguard.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("endpoint policy: %w", err)
	}
	return p, nil
}

func splitList(v string) []string {
	var l listFlag
	l.Set(v)
	return l
}

// loadSecretFiles reads the --*-file secrets into the config. Each error
// names its flag and never holds the secret.
func (c *Config) loadSecretFiles() error {
	var errs []error
	if p := c.Files.VAPIDPrivateKey; p != "" {
		if c.VAPIDPrivateKey != "" {
			errs = append(errs, errors.New("--vapid-private-key-file: --vapid-private-key is set too; give one"))
		} else if k, err := readSecretFile("--vapid-private-key-file", p); err != nil {
			errs = append(errs, err)
		} else if b, err := decodeB64URL(k); err != nil || len(b) != 32 {
			errs = append(errs, fmt.Errorf("--vapid-private-key-file: %s does not hold a base64url 32-byte P-256 private key", p))
		} else {
			c.VAPIDPrivateKey = k
		}
	}
	if p := c.Files.HMACKey; p != "" {
		if c.HMACKey != "" {
			errs = append(errs, errors.New("--hmac-key-file: --hmac-key is set too; give one"))
		} else if k, err := readHMACFile("--hmac-key-file", p); err != nil {
			errs = append(errs, err)
		} else {
			c.HMACKey = k
		}
	}
	for _, p := range c.Files.HMACKeysOld {
		k, err := readHMACFile("--hmac-key-old-file", p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.HMACKeysOld = append(c.HMACKeysOld, k)
	}
	if c.VAPIDKeys != "" {
		apps, err := loadVAPIDKeys(c.VAPIDKeys)
		if err != nil {
			errs = append(errs, err)
		}
		c.apps = apps
	}
	if err := c.Kafka.load(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func readHMACFile(name, path string) (string, error) {
	k, err := readSecretFile(name, path)
	if err != nil {
		return "", err
	}
	if n := len(decodeSecret(k)); n < topology.MinKeyLen {
		return "", fmt.Errorf("%s: %s holds a %d-byte key, want at least %d (e.g. openssl rand -base64 32)", name, path, n, topology.MinKeyLen)
	}
	return k, nil
}

// validateSecurity checks the endpoint policy and Kafka security flags.
func (c *Config) validateSecurity() error {
	var errs []error
	if err := c.Endpoints.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Kafka.enabled() && (len(c.Brokers) == 0 || c.Dev) {
		errs = append(errs, errors.New("--kafka-tls/--kafka-sasl-*: need --brokers; the embedded broker speaks plaintext on loopback only"))
	} else if err := c.Kafka.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func decodeB64URL(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}
