package pushsim

import (
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"time"
)

// Config is the simulator's behaviour. The zero value is not useful; start from DefaultConfig.
type Config struct {
	// Addr is where ListenAndServe listens. Default 127.0.0.1:8443.
	Addr string
	// TLS serves HTTPS (HTTP/2 and HTTP/1.1 via ALPN) with a generated self-signed certificate
	// valid for 127.0.0.1, ::1 and localhost. Default false.
	TLS bool

	// RateLimit is the sustained requests per second allowed per origin (the scheme://host the
	// client addressed), as a token bucket. 0 disables rate limiting. Default 0.
	RateLimit float64
	// Burst is the token bucket size. 0 means ceil(RateLimit), at least 1. Default 0.
	Burst int
	// PerSecond counts each origin's requests per whole second of the clock instead: at most
	// RateLimit in each, none carried over (a fixed window; Burst is unused). Default false.
	PerSecond bool
	// RetryAfter is the Retry-After value, in seconds, sent with simulated 429s (rate limit and
	// Fail429). 0 omits the header. Default 1.
	RetryAfter int

	// Latency is added before every answer; LatencyJitter adds a uniform random [0, jitter] on
	// top. Default 0 and 0.
	Latency       time.Duration
	LatencyJitter time.Duration
	// Workers serves each origin from this many workers, each answering one request at a time
	// for its latency; a request that finds them all busy waits for one, first come first
	// served, instead of being refused (Delivery.Wait). The rate limit is judged when a request
	// reaches a worker. 0 serves every request at once. Default 0.
	Workers int

	// Fail503, Fail429, Fail410 and Fail500 are the fractions (0..1, summing to at most 1) of
	// requests answered with that status. They apply only to subscriptions without a script.
	Fail503 float64
	Fail429 float64
	Fail410 float64
	Fail500 float64

	// VerifyEvery decrypts the body and verifies the VAPID signature of 1 request in N; the
	// others are only checked for headers and JWT claims. 1 verifies every request. Default 1.
	VerifyEvery int

	// VAPIDPublicKey, when set (base64url uncompressed P-256 point), is the only application
	// server key accepted for subscriptions made without one (SubscribeWithKey binds its own):
	// requests signed with another key get 403. Default empty (any key).
	VAPIDPublicKey string

	// KeepDeliveries caps how many Delivery records are kept (the most recent). 0 keeps all.
	// Default 0.
	KeepDeliveries int
}

// DefaultConfig returns the defaults documented on each Config field.
func DefaultConfig() Config {
	return Config{
		Addr:        "127.0.0.1:8443",
		RetryAfter:  1,
		VerifyEvery: 1,
	}
}

// RegisterFlags registers the simulator flags on fs, with c's current values as defaults, so
// that parsing fs fills c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "address the push simulator listens on")
	fs.BoolVar(&c.TLS, "tls", c.TLS, "serve HTTPS (HTTP/2) with a self-signed certificate for 127.0.0.1, ::1 and localhost")
	fs.Float64Var(&c.RateLimit, "rate-limit", c.RateLimit, "requests per second allowed per origin (0 = no limit)")
	fs.IntVar(&c.Burst, "burst", c.Burst, "rate limit burst (0 = ceil(rate-limit))")
	fs.BoolVar(&c.PerSecond, "per-second", c.PerSecond, "count --rate-limit per whole second (a fixed window) instead of by a token bucket")
	fs.IntVar(&c.RetryAfter, "retry-after", c.RetryAfter, "Retry-After seconds sent with simulated 429s (0 = none)")
	fs.DurationVar(&c.Latency, "latency", c.Latency, "base latency added to every answer")
	fs.DurationVar(&c.LatencyJitter, "latency-jitter", c.LatencyJitter, "random extra latency, uniform in [0, jitter]")
	fs.IntVar(&c.Workers, "workers", c.Workers, "workers per origin, each holding one request for its latency; the rest queue for one (0 = unlimited)")
	fs.Float64Var(&c.Fail503, "fail-503", c.Fail503, "fraction of requests answered 503 (subscriptions without a script)")
	fs.Float64Var(&c.Fail429, "fail-429", c.Fail429, "fraction of requests answered 429 (subscriptions without a script)")
	fs.Float64Var(&c.Fail410, "fail-410", c.Fail410, "fraction of requests answered 410 (subscriptions without a script)")
	fs.Float64Var(&c.Fail500, "fail-500", c.Fail500, "fraction of requests answered 500 (subscriptions without a script)")
	fs.IntVar(&c.VerifyEvery, "verify-every", c.VerifyEvery, "decrypt and verify 1 request in N (1 = every request)")
	fs.StringVar(&c.VAPIDPublicKey, "vapid-public-key", c.VAPIDPublicKey, "only accept JWTs signed by this VAPID public key (base64url) for subscriptions made without one (POST /subscribe?key= binds its own)")
	fs.IntVar(&c.KeepDeliveries, "keep-deliveries", c.KeepDeliveries, "keep at most this many delivery records (0 = all)")
}

// Validate reports every invalid field, naming its flag.
func (c Config) Validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("--addr is empty"))
	}
	if c.RateLimit < 0 {
		errs = append(errs, fmt.Errorf("--rate-limit is %v, want >= 0", c.RateLimit))
	}
	if c.Burst < 0 {
		errs = append(errs, fmt.Errorf("--burst is %d, want >= 0", c.Burst))
	}
	if c.RetryAfter < 0 {
		errs = append(errs, fmt.Errorf("--retry-after is %d, want >= 0", c.RetryAfter))
	}
	if c.Latency < 0 {
		errs = append(errs, fmt.Errorf("--latency is %v, want >= 0", c.Latency))
	}
	if c.LatencyJitter < 0 {
		errs = append(errs, fmt.Errorf("--latency-jitter is %v, want >= 0", c.LatencyJitter))
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("--workers is %d, want >= 0", c.Workers))
	}
	sum := 0.0
	for _, f := range []struct {
		flag string
		v    float64
	}{{"--fail-503", c.Fail503}, {"--fail-429", c.Fail429}, {"--fail-410", c.Fail410}, {"--fail-500", c.Fail500}} {
		if !(f.v >= 0 && f.v <= 1) { // also catches NaN
			errs = append(errs, fmt.Errorf("%s is %v, want 0..1", f.flag, f.v))
			continue
		}
		sum += f.v
	}
	if sum > 1 {
		errs = append(errs, fmt.Errorf("--fail-503 + --fail-429 + --fail-410 + --fail-500 is %v, want <= 1", sum))
	}
	if c.VerifyEvery < 1 {
		errs = append(errs, fmt.Errorf("--verify-every is %d, want >= 1", c.VerifyEvery))
	}
	if c.VAPIDPublicKey != "" {
		if _, err := parseVAPIDKey(c.VAPIDPublicKey); err != nil {
			errs = append(errs, fmt.Errorf("--vapid-public-key: %w", err))
		}
	}
	if c.KeepDeliveries < 0 {
		errs = append(errs, fmt.Errorf("--keep-deliveries is %d, want >= 0", c.KeepDeliveries))
	}
	return errors.Join(errs...)
}

// parseVAPIDKey decodes a base64url (padded or not) uncompressed P-256 point.
func parseVAPIDKey(s string) ([]byte, error) {
	b, err := decodeB64URL(s)
	if err != nil {
		return nil, fmt.Errorf("decode base64url: %w", err)
	}
	if _, err := ecdh.P256().NewPublicKey(b); err != nil {
		return nil, fmt.Errorf("parse P-256 public key: %w", err)
	}
	return b, nil
}

// decodeB64URL accepts base64url with or without padding, as VAPID keys appear both ways.
func decodeB64URL(s string) ([]byte, error) {
	if len(s)%4 == 0 {
		if b, err := base64.URLEncoding.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return base64.RawURLEncoding.DecodeString(s)
}
