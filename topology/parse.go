package topology

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// RecordError is why ParseOutcome or ParseGone refused a value. Field is
// the JSON key at fault ("status"), or "" for the value as a whole; the
// schemas in docs/schema name the same.
type RecordError struct {
	Field string
	Msg   string
}

func (e *RecordError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Values the ledger's records may hold (docs/schema/outcome.schema.json).
var (
	outcomes       = []string{string(OutcomeDelivered), string(OutcomeGone), string(OutcomeDead), string(OutcomeExpired)}
	outcomeReasons = []string{string(ReasonDelivered), string(ReasonGone), string(ReasonMaxAttempts), string(ReasonTTLExpired),
		string(ReasonRejected), string(ReasonPayloadTooLarge), string(ReasonInvalidEvent), string(ReasonEndpointBlocked),
		string(ReasonUnknownApp), string(ReasonVAPIDRejected)}
	tierNames   = []string{"tier1", "tier2", "tier3"}
	hashPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)
	appPattern  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
)

// ParseOutcome decodes and checks a push.outcomes value: what a consumer of
// the ledger should use rather than json.Unmarshal, which takes a record
// missing its fields as zeros. Unknown fields are ignored.
func ParseOutcome(b []byte) (OutcomeRecord, error) {
	var o OutcomeRecord
	f, err := fields(b)
	if err != nil {
		return o, err
	}
	errs := []error{
		f.str("id", &o.ID, true, 1, 256),
		f.enum("outcome", &o.Outcome, true, outcomes),
		f.enum("reason", &o.Reason, true, outcomeReasons),
		f.int("status", &o.Status, true, 0, 599),
		f.int("attempts", &o.Attempts, true, 0, -1),
		f.enum("tier", &o.Tier, false, tierNames),
		f.match("app", &o.App, appPattern),
		f.match("endpoint_hash", &o.EndpointHash, hashPattern),
		f.int64("latency_ms", &o.LatencyMS),
		f.int64("first_seen", &o.FirstSeen),
		f.int64("at", &o.At),
	}
	return o, first(errs)
}

// ParseGone decodes and checks a push.gone value (an unsubscribe event).
// Unknown fields are ignored.
func ParseGone(b []byte) (GoneRecord, error) {
	var g GoneRecord
	f, err := fields(b)
	if err != nil {
		return g, err
	}
	errs := []error{
		f.str("endpoint", &g.Endpoint, true, 1, -1),
		f.match("endpoint_hash", &g.EndpointHash, hashPattern),
		f.str("event_id", &g.EventID, true, 1, 256),
		f.int("status", &g.Status, true, 404, 410),
		f.str("at", &g.At, true, 1, -1),
	}
	if errs[1] == nil && g.EndpointHash == "" {
		errs[1] = &RecordError{"endpoint_hash", "is missing"}
	}
	if errs[3] == nil && g.Status != 404 && g.Status != 410 {
		errs[3] = &RecordError{"status", fmt.Sprintf("is %d, want 404 or 410", g.Status)}
	}
	if errs[4] == nil {
		if _, err := time.Parse(time.RFC3339Nano, g.At); err != nil {
			errs[4] = &RecordError{"at", "want an RFC 3339 time"}
		}
	}
	return g, first(errs)
}

// first returns the first non-nil error: the one a schema validator also
// reports first, in the order of the schema's fields.
func first(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// object is a JSON object's members by key; a null member counts as absent.
type object map[string]json.RawMessage

func fields(b []byte) (object, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return nil, &RecordError{"", "want a JSON object"}
	}
	var f object
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, &RecordError{"", "malformed JSON"}
	}
	for k, v := range f {
		if string(v) == "null" {
			delete(f, k)
		}
	}
	return f, nil
}

func (f object) str(key string, dst *string, required bool, minLen, maxLen int) error {
	v, ok := f[key]
	if !ok {
		if required {
			return &RecordError{key, "is missing"}
		}
		return nil
	}
	if len(v) == 0 || v[0] != '"' || json.Unmarshal(v, dst) != nil {
		return &RecordError{key, "want a JSON string"}
	}
	if n := len(*dst); n < minLen || (maxLen >= 0 && n > maxLen) {
		return &RecordError{key, fmt.Sprintf("is %d bytes, %s", n, bounds(minLen, maxLen))}
	}
	return nil
}

func (f object) enum(key string, dst *string, required bool, values []string) error {
	if err := f.str(key, dst, required, 0, -1); err != nil || *dst == "" && !required {
		return err
	}
	if !slices.Contains(values, *dst) {
		return &RecordError{key, fmt.Sprintf("%q, want one of %v", *dst, values)}
	}
	return nil
}

func (f object) match(key string, dst *string, re *regexp.Regexp) error {
	if err := f.str(key, dst, false, 0, -1); err != nil {
		return err
	}
	if _, ok := f[key]; ok && !re.MatchString(*dst) {
		return &RecordError{key, "want " + re.String()}
	}
	return nil
}

func (f object) int64(key string, dst *int64) error {
	v, ok := f[key]
	if !ok {
		return &RecordError{key, "is missing"}
	}
	if bytes.ContainsAny(v, ".eE") || json.Unmarshal(v, dst) != nil {
		return &RecordError{key, "want a whole number"}
	}
	return nil
}

func (f object) int(key string, dst *int, required bool, lo, hi int) error {
	if _, ok := f[key]; !ok && !required {
		return nil
	}
	var n int64
	if err := f.int64(key, &n); err != nil {
		return err
	}
	if n < int64(lo) || (hi >= 0 && n > int64(hi)) {
		return &RecordError{key, fmt.Sprintf("is %d, %s", n, bounds(lo, hi))}
	}
	*dst = int(n)
	return nil
}

// bounds says what a length or number must be; hi < 0 is no upper bound.
func bounds(lo, hi int) string {
	if hi < 0 {
		return fmt.Sprintf("want at least %d", lo)
	}
	return fmt.Sprintf("want %d to %d", lo, hi)
}
