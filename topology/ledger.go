package topology

// The ledger's record types: the JSON values of push.outcomes and push.gone
// (docs/design.md, "Contract"). Consumers of those topics decode them with
// these types; the processor writes nothing else there.

// OutcomeRecord is the JSON value of a push.outcomes record.
type OutcomeRecord struct {
	ID           string `json:"id"`
	Outcome      string `json:"outcome"`
	Reason       string `json:"reason"`
	Status       int    `json:"status"`
	Attempts     int    `json:"attempts"`
	Tier         string `json:"tier,omitempty"`
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
