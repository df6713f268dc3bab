package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tierpush/tierpush/internal/admin"
	"github.com/tierpush/tierpush/internal/dispatch"
	"github.com/tierpush/tierpush/internal/pacing"
	"github.com/tierpush/tierpush/internal/pipeline"
	"github.com/tierpush/tierpush/telemetry"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// errUsage marks a configuration error: exit code 2.
var errUsage = errors.New("usage")

// usageError wraps err as a configuration error naming what is wrong.
func usageError(err error) error { return fmt.Errorf("%w: %w", errUsage, err) }

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

// Config is the processor's configuration: flags, TIERPUSH_* env vars and
// the --config YAML file all set it.
type Config struct {
	Brokers      listFlag
	Embedded     bool // start the embedded broker (also: --embedded-addr given, --dev)
	EmbeddedAddr string
	DataDir      string
	Group        string
	InstanceID   string // static group membership; empty = dynamic
	Membership   membership
	TopicPrefix  string

	VAPIDPublicKey  string
	VAPIDPrivateKey string
	VAPIDSubject    string
	// VAPIDKeys is the --vapid-keys file: an identity per app, loaded
	// into apps.
	VAPIDKeys   string
	apps        map[string]dispatch.VAPID
	HMACKey     string
	HMACKeysOld listFlag

	AllowInsecure listFlag
	HTTPAddr      string
	Dev           bool

	LogFormat string
	LogLevel  string

	MaxInFlight    int
	MaxHeld        int
	RetryLateness  time.Duration
	DefaultTTL     time.Duration
	SendTimeout    time.Duration
	DrainTimeout   time.Duration
	RetryJitter    float64
	CommitInterval time.Duration

	Topics      admin.Spec
	Pacing      pacing.Config
	SharePacing bool
	// Tiers are the retry ladders: the config file's tiers: over the
	// defaults (there are no flags for them).
	Tiers tiers.Policy

	// Security (security.go, kafka.go).
	Files     secretFiles
	Endpoints endpointPolicy
	Kafka     kafkaSecurity
}

// DefaultConfig returns the defaults docs/configuration.md lists (it is
// generated from these flags).
func DefaultConfig() Config {
	pc := pipeline.DefaultConfig()
	return Config{
		EmbeddedAddr:   "127.0.0.1:9092",
		DataDir:        "./data",
		Group:          pc.Group,
		Membership:     defaultMembership(pc),
		TopicPrefix:    topology.DefaultPrefix,
		HTTPAddr:       "127.0.0.1:9464",
		LogFormat:      "text",
		LogLevel:       "info",
		MaxInFlight:    pc.MaxInFlight,
		MaxHeld:        pc.MaxHeld,
		RetryLateness:  pc.RetryLateness,
		DefaultTTL:     pc.Rules.DefaultTTL,
		SendTimeout:    10 * time.Second,
		DrainTimeout:   pc.DrainTimeout,
		RetryJitter:    pc.Jitter,
		CommitInterval: pc.CommitInterval,
		Topics:         admin.DefaultSpec(),
		Pacing:         pc.Pacing,
		SharePacing:    pc.SharePacing,
		Tiers:          tiers.DefaultPolicy(),
	}
}

// register declares every flag of `processor run`.
func (c *Config) register(fs *flag.FlagSet) {
	fs.Var(&c.Brokers, "brokers", "Kafka seed brokers, comma separated or repeated; required unless the embedded broker is asked for")
	fs.BoolVar(&c.Embedded, "embedded", false, "start the embedded broker (franz-go's kfake) on --embedded-addr, for development and tests")
	fs.StringVar(&c.EmbeddedAddr, "embedded-addr", c.EmbeddedAddr, "where the embedded broker listens; giving it asks for the embedded broker")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "embedded broker storage (survives restarts)")
	fs.StringVar(&c.Group, "group", c.Group, "consumer group")
	fs.StringVar(&c.InstanceID, "instance-id", "", "static group membership (group.instance.id): a name unique in the group and stable across restarts, e.g. a StatefulSet pod name; empty = dynamic membership")
	c.Membership.register(fs)
	fs.StringVar(&c.TopicPrefix, "topic-prefix", c.TopicPrefix, "prefix of every topic name")
	fs.StringVar(&c.VAPIDPublicKey, "vapid-public-key", "", "VAPID public key: the uncompressed P-256 point, base64url or base64 (env VAPID_PUBLIC_KEY also read)")
	fs.StringVar(&c.VAPIDPrivateKey, "vapid-private-key", "", "VAPID private key: the P-256 scalar, base64url or base64; one of 31 or 30 bytes is left-padded, as webpush-go and web-push read it (env VAPID_PRIVATE_KEY also read)")
	fs.StringVar(&c.VAPIDSubject, "vapid-subject", "", "VAPID subject: mailto:address or https URL (env VAPID_SUBJECT also read)")
	fs.StringVar(&c.VAPIDKeys, "vapid-keys", "", "YAML file mapping app names to public_key, private_key and subject: the event's app picks its identity; the --vapid-* flags stay the default one, for events without app (optional with this file)")
	fs.StringVar(&c.HMACKey, "hmac-key", "", "key signing retry records (push-sig), at least 32 bytes; required outside --dev")
	fs.Var(&c.HMACKeysOld, "hmac-key-old", "older keys still accepted on retry records (rotation); repeatable")
	fs.Var(&c.AllowInsecure, "allow-insecure-endpoint", "host:port that may be reached over http or on a private address (tests, the simulator); repeatable")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "address of /metrics, /healthz and /readyz; empty disables")
	fs.BoolVar(&c.Dev, "dev", false, "embedded broker + push simulator + sample workload + live status table")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.IntVar(&c.MaxInFlight, "max-in-flight", c.MaxInFlight, "records being sent or awaiting acknowledgement at once")
	fs.IntVar(&c.MaxHeld, "max-held", c.MaxHeld, "retry records held in memory until due; past it the retry topics stop fetching")
	fs.DurationVar(&c.RetryLateness, "retry-lateness", c.RetryLateness, "how long a due retry may wait to run, waits for a slot aside; while over 1% wait longer, fewer than --max-in-flight records are in flight (0: always --max-in-flight)")
	fs.DurationVar(&c.DefaultTTL, "default-ttl", c.DefaultTTL, "TTL of events that do not set one")
	fs.DurationVar(&c.SendTimeout, "send-timeout", c.SendTimeout, "bound on one send to a push service")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "how long shutdown and a revoke keep trying a refused produce (sends under way are waited for regardless)")
	fs.Float64Var(&c.RetryJitter, "retry-jitter", c.RetryJitter, "share of a retry step added at random to spread retries (0..1)")
	fs.DurationVar(&c.CommitInterval, "commit-interval", c.CommitInterval, "how often finished offsets are committed (bounds re-sends after a crash)")
	registerTopicFlags(fs, &c.Topics)
	registerPacingFlags(fs, &c.Pacing, &c.SharePacing)
	c.registerSecurityFlags(fs)
}

func registerPacingFlags(fs *flag.FlagSet, p *pacing.Config, share *bool) {
	fs.BoolVar(&p.Enabled, "pacing", p.Enabled, "adaptive pacing per push service (false sends as fast as the window allows)")
	fs.BoolVar(share, "pacing-share", *share, "share pacing with the other processors through the push.pacing topic: one estimate per push service, each processor sending its part")
	fs.Float64Var(&p.CutRate, "pacing-cut-rate", p.CutRate, "429 share, above the push service's per-device background, that cuts its rate")
	fs.Float64Var(&p.CutFactor, "pacing-cut-factor", p.CutFactor, "what a cut keeps of the rate the push service accepted")
	fs.Float64Var(&p.HaltRate, "pacing-halt-rate", p.HaltRate, "429 share above which a cut also halts the push service for its Retry-After")
	fs.DurationVar(&p.DefaultPause, "pacing-default-pause", p.DefaultPause, "halt after a 429 share past --pacing-halt-rate without Retry-After")
	fs.Float64Var(&p.ErrorHaltRate, "pacing-error-halt-rate", p.ErrorHaltRate, "5xx and transport error share above which a push service's breaker opens")
	fs.DurationVar(&p.OpenFor, "pacing-open-for", p.OpenFor, "how long an open breaker waits before half-open probes (doubled each time in a row)")
	fs.IntVar(&p.Probes, "pacing-probes", p.Probes, "half-open probe requests")
	fs.IntVar(&p.MinSamples, "pacing-min-samples", p.MinSamples, "answers a share needs before it counts")
	fs.IntVar(&p.MaxLimit, "pacing-max-concurrency", p.MaxLimit, "highest number of sends in flight per push service (the concurrency law finds it below)")
	fs.IntVar(&p.MinLimit, "pacing-min-concurrency", p.MinLimit, "lowest number of sends in flight per push service")
	fs.IntVar(&p.SubPauses, "pacing-sub-pauses", p.SubPauses, "subscriptions paused by a 429 remembered (LRU)")
	// Read and ignored: the laws of docs/pacing.md replaced the rules they
	// tuned. Kept so that scripts and config files naming them go on
	// working (deprecatedFlags).
	for _, name := range []string{"pacing-window", "pacing-start-rate", "pacing-cut-cooldown", "pacing-confidence", "pacing-probe-rate",
		"pacing-probe-double", "pacing-probe-max", "pacing-retry-share", "pacing-queue", "pacing-shed-after", "pacing-calm-rate",
		"pacing-calm-for", "pacing-raise-every", "pacing-raise-factor", "pacing-sender-wide-subs", "pacing-sender-wide-window", "pacing-sender-wide-rate"} {
		fs.Func(name, "(no longer used; accepted for old scripts)", func(string) error { return nil })
	}
}

func registerTopicFlags(fs *flag.FlagSet, s *admin.Spec) {
	fs.Var(topicCount[int32]{&s.Partitions, func(n int) bool { return n >= 1 && n <= 10000 }, "want 1..10000"},
		"partitions", "partitions of topics created at start")
	fs.Var(topicCount[int16]{&s.ReplicationFactor, func(n int) bool { return n == -1 || n >= 1 && n <= 32 }, "want -1 or 1..32"},
		"replication-factor", "replication factor of topics created at start, -1 = broker default")
	fs.DurationVar(&s.Retention, "retention", s.Retention, "retention of tier, retry, gone and outcome topics")
	fs.DurationVar(&s.DLQRetention, "dlq-retention", s.DLQRetention, "retention of the DLQ")
}

// topicCount is the value of --partitions or --replication-factor: a whole
// number that ok accepts. Its String is the value, so the flag's default
// is the spec's.
type topicCount[T int32 | int16] struct {
	n    *T
	ok   func(int) bool
	want string
}

func (c topicCount[T]) String() string {
	if c.n == nil {
		return ""
	}
	return strconv.Itoa(int(*c.n))
}

func (c topicCount[T]) Set(v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || !c.ok(n) {
		return errors.New(c.want)
	}
	*c.n = T(n)
	return nil
}

// finish applies the VAPID_* env fallbacks and checks the whole config.
func (c *Config) finish() error {
	if err := c.loadSecretFiles(); err != nil {
		return usageError(err)
	}
	envDefault(&c.VAPIDPublicKey, "VAPID_PUBLIC_KEY")
	envDefault(&c.VAPIDPrivateKey, "VAPID_PRIVATE_KEY")
	envDefault(&c.VAPIDSubject, "VAPID_SUBJECT")
	return usageErrorOrNil(c.Validate())
}

func envDefault(dst *string, key string) {
	if *dst == "" {
		*dst = os.Getenv(key)
	}
}

func usageErrorOrNil(err error) error {
	if err == nil {
		return nil
	}
	return usageError(err)
}

// Validate reports every field out of range, each naming its flag.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 && !c.Embedded && !c.Dev {
		// A container missing its brokers must not start an empty
		// broker of its own and look healthy.
		errs = append(errs, errors.New("--brokers: required (or --embedded, --embedded-addr or --dev for the embedded broker)"))
	}
	// The default identity may be left out when --vapid-keys names apps;
	// then an event without app ends unknown_app.
	if (!c.Dev || c.VAPIDPrivateKey != "") && (c.hasDefaultVAPID() || len(c.apps) == 0) {
		if err := dispatch.ValidateVAPID(c.vapid()); err != nil {
			errs = append(errs, err)
		}
	}
	if !c.Dev || c.HMACKey != "" {
		if _, err := c.hmacKeys(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := telemetry.ValidateFormat(c.LogFormat); err != nil {
		errs = append(errs, err)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		errs = append(errs, err)
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 100_000 {
		errs = append(errs, fmt.Errorf("--max-in-flight: %d, want 1..100000", c.MaxInFlight))
	}
	if c.MaxHeld < 1 || c.MaxHeld > 10_000_000 {
		errs = append(errs, fmt.Errorf("--max-held: %d, want 1..10000000", c.MaxHeld))
	}
	if c.RetryLateness < 0 || c.RetryLateness > time.Second {
		errs = append(errs, fmt.Errorf("--retry-lateness: %s, want 0 (off) to 1s", c.RetryLateness))
	}
	if c.DefaultTTL < 0 || c.DefaultTTL > 28*24*time.Hour {
		errs = append(errs, fmt.Errorf("--default-ttl: %s, want 0..672h", c.DefaultTTL))
	}
	if c.SendTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--send-timeout: %s, want at least 100ms", c.SendTimeout))
	}
	if c.DrainTimeout < time.Second {
		errs = append(errs, fmt.Errorf("--drain-timeout: %s, want at least 1s", c.DrainTimeout))
	}
	if c.CommitInterval < 10*time.Millisecond || c.CommitInterval > time.Minute {
		errs = append(errs, fmt.Errorf("--commit-interval: %s, want 10ms..1m", c.CommitInterval))
	}
	if c.RetryJitter < 0 || c.RetryJitter > 1 {
		errs = append(errs, fmt.Errorf("--retry-jitter: %g, want 0..1", c.RetryJitter))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("--group: empty"))
	}
	if err := validateInstanceID(c.InstanceID); err != nil {
		errs = append(errs, fmt.Errorf("--instance-id: %w", err))
	}
	errs = append(errs, c.Membership.validate()...)
	if c.TopicPrefix == "" || strings.ContainsAny(c.TopicPrefix, " /\\") {
		errs = append(errs, fmt.Errorf("--topic-prefix: %q is not a valid topic prefix", c.TopicPrefix))
	}
	for _, a := range c.AllowInsecure {
		if !strings.Contains(a, ":") {
			errs = append(errs, fmt.Errorf("--allow-insecure-endpoint: %q, want host:port", a))
		}
	}
	if err := c.Topics.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Pacing.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Tiers.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.validateSecurity(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// maxInstanceIDLen is Kafka's bound on group.instance.id (that of a topic
// name).
const maxInstanceIDLen = 249

// validateInstanceID checks a group.instance.id as Kafka does
// (JoinGroupRequest.validateGroupInstanceId): empty means none; otherwise
// at most 249 of [a-zA-Z0-9._-], and not "." or "..".
func validateInstanceID(id string) error {
	switch {
	case id == "":
		return nil
	case len(id) > maxInstanceIDLen:
		return fmt.Errorf("%d bytes, want at most %d", len(id), maxInstanceIDLen)
	case id == "." || id == "..":
		return fmt.Errorf("%q is not allowed", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q holds %q, want only letters, digits, '.', '_' and '-'", truncateFlag(id), r)
		}
	}
	return nil
}

// vapid is the default identity; zero when none is given.
func (c *Config) vapid() dispatch.VAPID {
	return dispatch.VAPID{PublicKey: c.VAPIDPublicKey, PrivateKey: c.VAPIDPrivateKey, Subject: c.VAPIDSubject}
}

func (c *Config) hasDefaultVAPID() bool { return c.vapid() != (dispatch.VAPID{}) }

// hmacKeys decodes --hmac-key (base64, or raw text of at least 32 bytes) and
// the older keys.
func (c *Config) hmacKeys() ([][]byte, error) {
	var keys [][]byte
	for i, s := range append([]string{c.HMACKey}, c.HMACKeysOld...) {
		name := "--hmac-key"
		if i > 0 {
			name = "--hmac-key-old"
		}
		k := decodeSecret(s)
		if len(k) < topology.MinKeyLen {
			return nil, fmt.Errorf("%s: %d bytes, want at least %d (e.g. openssl rand -base64 32)", name, len(k), topology.MinKeyLen)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

func decodeSecret(s string) []byte {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) >= topology.MinKeyLen {
			return b
		}
	}
	return []byte(s)
}
