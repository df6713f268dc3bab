package pipeline

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/tierpush/tierpush/tiers"
	"github.com/tierpush/tierpush/topology"
)

// Hooks observe the pipeline. Implementations must be cheap and must not
// block: they run on the dispatch path.
type Hooks interface {
	// Sent is called after every send to a push service.
	Sent(SendInfo)
	// Retried is called when a record is routed to a retry step.
	Retried(RetryInfo)
	// DeadLettered is called when a record is routed to the DLQ.
	DeadLettered(topology.Reason)
	// Finished is called when an event reaches its terminal outcome.
	Finished(FinishInfo)
}

// SendInfo describes one send.
type SendInfo struct {
	Tier     tiers.Tier
	Step     string // "first" or the retry step's delay
	Origin   string // push service origin, never the endpoint
	Attempt  int
	Result   push.Result
	Took     time.Duration
	Lateness time.Duration // retries: how long after its due time it was sent
}

// RetryInfo describes a record routed to a retry step.
type RetryInfo struct {
	Tier       tiers.Tier
	Step       string // the step's topic suffix: "retry-8s"
	Deferred   bool   // no send was made (pacing, a Retry-After hop)
	RetryAfter bool   // the push service's Retry-After chose the step
}

// FinishInfo describes an event's terminal outcome.
type FinishInfo struct {
	Outcome topology.Outcome
	Reason  topology.Reason
	Tier    string
	Latency time.Duration
}

// NopHooks observes nothing; embed it to implement only some Hooks.
type NopHooks struct{}

func (NopHooks) Sent(SendInfo)                {}
func (NopHooks) Retried(RetryInfo)            {}
func (NopHooks) DeadLettered(topology.Reason) {}
func (NopHooks) Finished(FinishInfo)          {}

// Stats are the processor's own counters, for the status table and tests.
type Stats struct {
	delivered atomic.Int64
	gone      atomic.Int64
	skipped   atomic.Int64 // finished by a partition's previous owner

	mu      sync.Mutex
	dlq     map[topology.Reason]int64
	retries map[string]int64 // by retry topic
	origins map[string]*OriginStats
}

// OriginStats counts sends to one push service.
type OriginStats struct {
	Sends    int64
	Status   map[int]int64
	Errors   int64
	Rate429s int64
	Deferred int64 // sends held back by pacing
}

// Snapshot is a copy of Stats at one moment.
type Snapshot struct {
	Delivered int64
	Gone      int64
	Skipped   int64 // records consumed again that the previous owner had finished
	DLQ       map[topology.Reason]int64
	Retries   map[string]int64
	Origins   map[string]OriginStats
}

func (s *Stats) dead(r topology.Reason) {
	s.mu.Lock()
	if s.dlq == nil {
		s.dlq = make(map[topology.Reason]int64)
	}
	s.dlq[r]++
	s.mu.Unlock()
}

func (s *Stats) retried(topic string) {
	s.mu.Lock()
	if s.retries == nil {
		s.retries = make(map[string]int64)
	}
	s.retries[topic]++
	s.mu.Unlock()
}

func (s *Stats) originLocked(origin string) *OriginStats {
	if s.origins == nil {
		s.origins = make(map[string]*OriginStats)
	}
	o := s.origins[origin]
	if o == nil {
		o = &OriginStats{Status: make(map[int]int64)}
		s.origins[origin] = o
	}
	return o
}

func (s *Stats) deferred(origin string) {
	s.mu.Lock()
	s.originLocked(origin).Deferred++
	s.mu.Unlock()
}

func (s *Stats) sent(origin string, r push.Result) {
	s.mu.Lock()
	o := s.originLocked(origin)
	o.Sends++
	if r.Status == 0 {
		o.Errors++
	} else {
		o.Status[r.Status]++
	}
	if r.Status == 429 {
		o.Rate429s++
	}
	s.mu.Unlock()
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Snapshot{
		Delivered: s.delivered.Load(),
		Gone:      s.gone.Load(),
		Skipped:   s.skipped.Load(),
		DLQ:       make(map[topology.Reason]int64, len(s.dlq)),
		Retries:   make(map[string]int64, len(s.retries)),
		Origins:   make(map[string]OriginStats, len(s.origins)),
	}
	for k, v := range s.dlq {
		out.DLQ[k] = v
	}
	for k, v := range s.retries {
		out.Retries[k] = v
	}
	for k, v := range s.origins {
		c := *v
		c.Status = make(map[int]int64, len(v.Status))
		for st, n := range v.Status {
			c.Status[st] = n
		}
		out.Origins[k] = c
	}
	return out
}

// SortedKeys returns m's keys in order, for stable tables.
func SortedKeys[K ~string, V any](m map[K]V) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
