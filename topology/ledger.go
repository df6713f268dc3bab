package topology

import (
	"encoding/json"
	"strconv"
)

// The ledger's record types: the JSON values of push.outcomes and push.gone
// (docs/design.md, "Contract"). Consumers of those topics decode them with
// these types; the processor writes nothing else there.

// OutcomeRecord is the JSON value of a push.outcomes record.
type OutcomeRecord struct {
	ID       string `json:"id"`
	Outcome  string `json:"outcome"`
	Reason   string `json:"reason"`
	Status   int    `json:"status"`
	Attempts int    `json:"attempts"`
	Tier     string `json:"tier,omitempty"`
	// App is the event's app (its VAPID identity); "" for the default.
	App          string `json:"app,omitempty"`
	EndpointHash string `json:"endpoint_hash,omitempty"`
	LatencyMS    int64  `json:"latency_ms"`
	FirstSeen    int64  `json:"first_seen"`
	At           int64  `json:"at"`
}

// GoneRecord is the JSON value of a push.gone unsubscribe event.
type GoneRecord struct {
	Endpoint     string `json:"endpoint"`
	EndpointHash string `json:"endpoint_hash"`
	EventID      string `json:"event_id"`
	Status       int    `json:"status"`
	At           string `json:"at"`
}

// AppendJSON appends o as JSON, byte for byte what encoding/json writes,
// without reflection: one is written for every event.
func (o *OutcomeRecord) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, o.ID)
	b = append(b, `,"outcome":`...)
	b = appendJSONString(b, o.Outcome)
	b = append(b, `,"reason":`...)
	b = appendJSONString(b, o.Reason)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(o.Status), 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(o.Attempts), 10)
	if o.Tier != "" {
		b = append(b, `,"tier":`...)
		b = appendJSONString(b, o.Tier)
	}
	if o.App != "" {
		b = append(b, `,"app":`...)
		b = appendJSONString(b, o.App)
	}
	if o.EndpointHash != "" {
		b = append(b, `,"endpoint_hash":`...)
		b = appendJSONString(b, o.EndpointHash)
	}
	b = append(b, `,"latency_ms":`...)
	b = strconv.AppendInt(b, o.LatencyMS, 10)
	b = append(b, `,"first_seen":`...)
	b = strconv.AppendInt(b, o.FirstSeen, 10)
	b = append(b, `,"at":`...)
	b = strconv.AppendInt(b, o.At, 10)
	return append(b, '}')
}

// appendJSONString appends s quoted as encoding/json does. Plain printable
// ASCII is copied; anything it would escape (quotes, control characters,
// <, >, &, non-ASCII) goes through encoding/json itself.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
