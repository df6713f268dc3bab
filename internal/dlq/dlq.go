// Package dlq owns the operator's view of the dead-letter topic (push.dlq):
// reading it through a Filter without consuming it (List), and replaying
// selected records to their tier topic (Redrive) with the event intact, a
// push-redrive-count loop guard and a position of its own kept as the
// committed offsets of a consumer group, so an interrupted redrive resumes
// where it stopped.
//
// A dead-lettered value is a raw event: it holds an endpoint URL, keys and a
// payload. This package reads from it only the event id, the push service
// origin (scheme://host) and the app, and must never print, log or return
// anything else of it except to produce it, unchanged (its app with it), to
// a tier topic.
package dlq

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Reasons lists the push-reason values a dead-lettered record can carry
// (docs/design.md, "Headers on records the processor writes").
var Reasons = []topology.Reason{
	topology.ReasonMaxAttempts,
	topology.ReasonTTLExpired,
	topology.ReasonRejected,
	topology.ReasonPayloadTooLarge,
	topology.ReasonInvalidEvent,
	topology.ReasonEndpointBlocked,
	topology.ReasonBadSignature,
	topology.ReasonUnknownApp,
	topology.ReasonVAPIDRejected,
}

// Record is a dead-lettered record as the operator sees it. Everything but
// Raw is safe to print.
type Record struct {
	// Raw is the record read from the DLQ. Raw.Value is the event: never
	// print it.
	Raw *kgo.Record
	// Meta holds the routing headers the processor wrote. A malformed
	// header leaves its field zero and is reported in HeaderErr.
	Meta topology.Meta
	// HeaderErr joins the errors of malformed push-* headers; nil when
	// every header decoded.
	HeaderErr error
	// Source is where the event was consumed when it was dead-lettered:
	// the push-origin topic, partition and offset; Topic is "" when the
	// header is missing or garbled.
	Source Source
	// Tier is the tier of Source.Topic (a retry topic maps to its tier);
	// zero when it names none.
	Tier tiers.Tier
	// EventID is the event's id, "" when the value has none.
	EventID string
	// Origin is the push service origin of the event's endpoint,
	// scheme://host[:port] as the processor's pacing lanes name it, "" when
	// the endpoint is unreadable.
	Origin string
	// App is the event's app, the name of its VAPID identity; "" for the
	// default identity, and when the value holds no valid app name.
	App string
	// At is when the record was dead-lettered (the DLQ record's timestamp).
	At time.Time

	badRedriveCount bool
}

// Source is a push-origin header value: where the original event was read.
type Source struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (s Source) String() string {
	if s.Topic == "" {
		return ""
	}
	return s.Topic + "/" + strconv.FormatInt(int64(s.Partition), 10) + "/" + strconv.FormatInt(s.Offset, 10)
}

// Inspect reads what an operator may see of a DLQ record. It never fails:
// what it cannot read stays zero.
func Inspect(r *kgo.Record, names topology.Names) *Record {
	rec := &Record{Raw: r, At: r.Timestamp}
	rec.Meta, rec.HeaderErr, rec.badRedriveCount = decodeHeaders(r.Headers)
	if t, p, o, err := topology.ParseOrigin(rec.Meta.Origin); err == nil {
		rec.Source = Source{Topic: t, Partition: p, Offset: o}
		rec.Tier = tierOf(t, names)
	}
	rec.EventID, rec.Origin, rec.App = identify(r.Value, r.Timestamp)
	return rec
}

// decodeHeaders decodes each push-* header on its own, so that one
// malformed header costs only its own field. Of repeated
// push-redrive-count headers the largest wins: the loop guard must not be
// talked down.
func decodeHeaders(hs []kgo.RecordHeader) (m topology.Meta, errs error, badCount bool) {
	for _, h := range hs {
		if !strings.HasPrefix(h.Key, "push-") {
			continue
		}
		one, err := topology.DecodeMeta([]kgo.RecordHeader{h})
		if err != nil {
			errs = errors.Join(errs, err)
			if h.Key == topology.HeaderRedriveCount {
				badCount = true
			}
			continue
		}
		switch h.Key {
		case topology.HeaderAttempt:
			m.Attempt = one.Attempt
		case topology.HeaderDue:
			m.Due = one.Due
		case topology.HeaderNotBefore:
			m.NotBefore = one.NotBefore
		case topology.HeaderFirstSeen:
			m.FirstSeen = one.FirstSeen
		case topology.HeaderOrigin:
			m.Origin = one.Origin
		case topology.HeaderStatus:
			m.Status = one.Status
		case topology.HeaderReason:
			m.Reason = one.Reason
		case topology.HeaderError:
			m.Error = one.Error
		case topology.HeaderRedriveCount:
			m.RedriveCount = max(m.RedriveCount, one.RedriveCount)
		case topology.HeaderSig:
			m.Sig = one.Sig
		}
	}
	return m, errs, badCount
}

// defaultPolicy names the retry steps tierOf knows for sure; it is never
// changed.
var defaultPolicy = tiers.DefaultPolicy()

// tierOf maps a source topic to its tier. A retry step of a custom ladder,
// which the default policy does not know, still names its tier.
func tierOf(topic string, names topology.Names) tiers.Tier {
	if src, err := names.Parse(topic, &defaultPolicy); err == nil {
		return src.Tier
	}
	rest, ok := strings.CutPrefix(topic, names.Prefix)
	if !ok {
		return 0
	}
	name, step, _ := strings.Cut(rest, ".")
	if !strings.HasPrefix(step, "retry-") {
		return 0
	}
	if _, err := time.ParseDuration(strings.TrimPrefix(step, "retry-")); err != nil {
		return 0
	}
	t, err := tiers.Parse(name)
	if err != nil {
		return 0
	}
	return t
}

// identify returns the event id, push service origin and app of a value,
// the way the processor sees them, or as much of them as a refused event
// has.
func identify(value []byte, at time.Time) (id, origin, app string) {
	if ev, err := event.Decode(value, at, event.DefaultRules()); err == nil {
		return ev.ID, ev.Origin(), ev.App
	}
	if len(value) > event.MaxEventSize {
		return "", "", ""
	}
	var w struct {
		ID           any `json:"id"`
		Subscription struct {
			Endpoint string `json:"endpoint"`
		} `json:"subscription"`
		App any `json:"app"`
	}
	// A refused value may be any JSON, or none: keep what decodes.
	_ = json.Unmarshal(value, &w)
	switch v := w.ID.(type) {
	case string:
		id = v
	case float64:
		id = strconv.FormatFloat(v, 'f', -1, 64)
	}
	if len(id) > event.MaxIDLen {
		id = id[:event.MaxIDLen]
	}
	if u, err := url.Parse(w.Subscription.Endpoint); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Hostname() != "" {
		origin = originOf(u)
	}
	if s, ok := w.App.(string); ok && s != event.DefaultApp && event.CheckApp(s) == nil {
		app = s
	}
	return id, origin, app
}

// originOf is scheme://host[:port], lower case, without the default port.
func originOf(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	host, port := strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")), u.Port()
	if (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		return scheme + "://" + host + ":" + port
	}
	return scheme + "://" + host
}

// OriginHost is the host[:port] of an origin: what the table shows.
func OriginHost(origin string) string {
	_, h, ok := strings.Cut(origin, "://")
	if !ok {
		return origin
	}
	return h
}

// Filter selects dead-lettered records. Within a field any value matches
// (or); across fields all must (and). A zero field matches everything.
type Filter struct {
	Reasons  []topology.Reason
	Statuses []int // last HTTP status; 0 is "none"
	Tiers    []tiers.Tier
	// Origins are push service origins as ParseServiceOrigin returns them:
	// "https://fcm.googleapis.com" matches that origin only, a bare host
	// "fcm.googleapis.com" matches it over any scheme and port.
	Origins []string
	// Apps are app names as the event gives them (ParseApp);
	// event.DefaultApp matches the events of the default identity.
	Apps []string
	// Since and Until bound when the record was dead-lettered: Since
	// inclusive, Until exclusive. Zero is unbounded.
	Since, Until time.Time
}

// Match reports whether r is selected by f.
func (f *Filter) Match(r *Record) bool {
	switch {
	case len(f.Reasons) > 0 && !slices.Contains(f.Reasons, r.Meta.Reason):
		return false
	case len(f.Statuses) > 0 && !slices.Contains(f.Statuses, r.Meta.Status):
		return false
	case len(f.Tiers) > 0 && !slices.Contains(f.Tiers, r.Tier):
		return false
	case len(f.Origins) > 0 && !f.matchOrigin(r.Origin):
		return false
	case len(f.Apps) > 0 && !slices.Contains(f.Apps, event.AppName(r.App)):
		return false
	case !f.Since.IsZero() && r.At.Before(f.Since):
		return false
	case !f.Until.IsZero() && !r.At.Before(f.Until):
		return false
	}
	return true
}

func (f *Filter) matchOrigin(origin string) bool {
	if origin == "" {
		return false
	}
	hostPort := OriginHost(origin)
	host := hostPort
	if u, err := url.Parse(origin); err == nil {
		host = u.Hostname()
	}
	for _, o := range f.Origins {
		if o == origin || o == hostPort || o == host {
			return true
		}
	}
	return false
}

// ParseReason checks s is a reason a DLQ record can carry.
func ParseReason(s string) (topology.Reason, error) {
	r := topology.Reason(s)
	if !slices.Contains(Reasons, r) {
		names := make([]string, len(Reasons))
		for i, r := range Reasons {
			names[i] = string(r)
		}
		return "", fmt.Errorf("unknown reason %q (want one of %s)", s, strings.Join(names, ", "))
	}
	return r, nil
}

// ParseApp checks s is an app name (event.CheckApp); event.DefaultApp
// names the default identity.
func ParseApp(s string) (string, error) {
	if err := event.CheckApp(s); err != nil {
		if len(s) > event.MaxAppLen {
			s = s[:event.MaxAppLen] + "…"
		}
		return "", fmt.Errorf("app %q: %w", s, err)
	}
	return s, nil
}

// ParseStatus reads an HTTP status: 100 to 599, or 0 for "no status".
func ParseStatus(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || (n != 0 && (n < 100 || n > 599)) {
		return 0, fmt.Errorf("status %q: want an HTTP status 100-599, or 0 for none", s)
	}
	return n, nil
}

// ParseServiceOrigin reads a push service origin for a Filter: a URL
// ("https://fcm.googleapis.com", any path is ignored) becomes its origin;
// a bare host ("fcm.googleapis.com") stays a host, lower case.
func ParseServiceOrigin(s string) (string, error) {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		h := strings.ToLower(strings.TrimSuffix(s, "."))
		if h == "" || strings.ContainsAny(h, "/?#@ ") {
			return "", fmt.Errorf("origin %q: want https://host or a bare host", s)
		}
		return h, nil
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Hostname() == "" || u.User != nil {
		return "", fmt.Errorf("origin %q: want https://host or a bare host", s)
	}
	return originOf(u), nil
}

// ParseTime reads a time bound: RFC 3339, or a duration meaning that long
// before now ("24h", "90m").
func ParseTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("time %q: want RFC 3339 (2026-11-21T12:00:00Z) or a duration ago (24h)", s)
	}
	return now.Add(-d), nil
}
