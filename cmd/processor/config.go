package main

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
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

// DefaultConfig returns the documented defaults (docs/design.md, "Command
// line"; the README lists every flag).
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
	fs.StringVar(&c.VAPIDPublicKey, "vapid-public-key", "", "VAPID public key, base64url (env VAPID_PUBLIC_KEY also read)")
	fs.StringVar(&c.VAPIDPrivateKey, "vapid-private-key", "", "VAPID private key, base64url (env VAPID_PRIVATE_KEY also read)")
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
	fs.BoolVar(share, "pacing-share", *share, "share pacing with the other processors through the push.pacing topic: a cut or pause seen by one holds for all")
	fs.DurationVar(&p.Window, "pacing-window", p.Window, "rolling window of the reported 429 share")
	fs.Float64Var(&p.StartRate, "pacing-start-rate", p.StartRate, "sends per second a new push service starts at (tiers 2 and 3); doubles every round trip until throttled")
	fs.Float64Var(&p.CutRate, "pacing-cut-rate", p.CutRate, "429 share, above the origin's per-device background, that cuts its rate")
	fs.Float64Var(&p.CutFactor, "pacing-cut-factor", p.CutFactor, "what a cut keeps of the rate the origin accepted")
	fs.DurationVar(&p.CutCooldown, "pacing-cut-cooldown", p.CutCooldown, "least time between two cuts")
	fs.Float64Var(&p.HaltRate, "pacing-halt-rate", p.HaltRate, "429 share above which an origin is also paused for its Retry-After")
	fs.Float64Var(&p.ErrorHaltRate, "pacing-error-halt-rate", p.ErrorHaltRate, "5xx and transport error share above which an origin's breaker opens")
	fs.DurationVar(&p.OpenFor, "pacing-open-for", p.OpenFor, "how long an open breaker waits before half-open probes")
	fs.IntVar(&p.Probes, "pacing-probes", p.Probes, "half-open probe requests")
	fs.IntVar(&p.MinSamples, "pacing-min-samples", p.MinSamples, "answers a share needs before it counts")
	fs.Float64Var(&p.Confidence, "pacing-confidence", p.Confidence, "confidence that a share is above its threshold before a cut, pause or open (Wilson lower bound; 0.5: the plain share)")
	fs.Float64Var(&p.ProbeRate, "pacing-probe-rate", p.ProbeRate, "growth of an origin's rate per second once a cut is answered")
	fs.DurationVar(&p.ProbeDouble, "pacing-probe-double", p.ProbeDouble, "the growth doubles this often once the origin takes more than it did")
	fs.Float64Var(&p.ProbeMax, "pacing-probe-max", p.ProbeMax, "highest growth of an origin's rate per second")
	fs.IntVar(&p.MaxLimit, "pacing-max-concurrency", p.MaxLimit, "highest concurrency per push service (the rate sets it below: Little's law)")
	fs.IntVar(&p.MinLimit, "pacing-min-concurrency", p.MinLimit, "lowest concurrency per push service")
	fs.DurationVar(&p.DefaultPause, "pacing-default-pause", p.DefaultPause, "pause after a 429 without Retry-After")
	fs.IntVar(&p.SubPauses, "pacing-sub-pauses", p.SubPauses, "paused subscriptions remembered (LRU)")
	fs.Float64Var(&p.RetryShare, "pacing-retry-share", p.RetryShare, "most of an origin's slots retries may hold while first sends wait")
	fs.IntVar(&p.QueueLimit, "pacing-queue", p.QueueLimit, "sends waiting per origin (or two seconds of its rate, if more) before the lowest tier goes back to the ladder")
	fs.DurationVar(&p.ShedAfter, "pacing-shed-after", p.ShedAfter, "how long an origin's queue may stand still before it sheds its lowest tier")
	// Read and ignored since the rate controller replaced the concurrency
	// raise and the sender-wide rule; kept so that scripts and config
	// files naming them go on working.
	const gone = "(no longer used; accepted for old scripts)"
	fs.Float64Var(&p.CalmRate, "pacing-calm-rate", p.CalmRate, gone)
	fs.DurationVar(&p.CalmFor, "pacing-calm-for", p.CalmFor, gone)
	fs.DurationVar(&p.RaiseEvery, "pacing-raise-every", p.RaiseEvery, gone)
	fs.Float64Var(&p.RaiseFactor, "pacing-raise-factor", p.RaiseFactor, gone)
	fs.IntVar(&p.SenderWideSubs, "pacing-sender-wide-subs", p.SenderWideSubs, gone)
	fs.DurationVar(&p.SenderWideWindow, "pacing-sender-wide-window", p.SenderWideWindow, gone)
	fs.Float64Var(&p.SenderWideRate, "pacing-sender-wide-rate", p.SenderWideRate, gone)
}

func registerTopicFlags(fs *flag.FlagSet, s *admin.Spec) {
	p := int(s.Partitions)
	rf := int(s.ReplicationFactor)
	fs.Func("partitions", fmt.Sprintf("partitions of topics created at start (default %d)", p), func(v string) error {
		var n int
		if _, err := fmt.Sscan(v, &n); err != nil || n < 1 || n > 10000 {
			return errors.New("want 1..10000")
		}
		s.Partitions = int32(n)
		return nil
	})
	fs.Func("replication-factor", fmt.Sprintf("replication factor of topics created at start, -1 = broker default (default %d)", rf), func(v string) error {
		var n int
		if _, err := fmt.Sscan(v, &n); err != nil || n < -1 || n == 0 || n > 32 {
			return errors.New("want -1 or 1..32")
		}
		s.ReplicationFactor = int16(n)
		return nil
	})
	fs.DurationVar(&s.Retention, "retention", s.Retention, "retention of tier, retry, gone and outcome topics")
	fs.DurationVar(&s.DLQRetention, "dlq-retention", s.DLQRetention, "retention of the DLQ")
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
