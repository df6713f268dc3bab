package deliver

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/tierpush/tierpush/internal/push"
	"github.com/tierpush/tierpush/topology"
)

// MaxOrigins bounds the push service origins Stats keeps counters for: any
// public host is a new origin, so the least recently used go first.
const MaxOrigins = 1024

// Stats are the processor's own counters, for the status table and tests.
// They are Hooks.
type Stats struct {
	delivered atomic.Int64
	gone      atomic.Int64
	skipped   atomic.Int64 // finished by a partition's previous owner

	mu      sync.Mutex
	dlq     map[topology.Reason]int64
	retries map[string]int64                 // by retry topic
	origins *lru.Cache[string, *OriginStats] // nil until the first send
	// apps counts by VAPID identity; only identities that exist are sent
	// with, so it holds at most one entry per identity.
	apps map[string]*AppStats
}

var _ Hooks = (*Stats)(nil)

// OriginStats counts sends to one push service.
type OriginStats struct {
	Sends    int64
	Status   map[int]int64
	Errors   int64
	Rate429s int64
	Deferred int64 // sends held back by pacing
}

// AppStats counts the sends of one VAPID identity.
type AppStats struct {
	Sends         int64
	Delivered     int64
	VAPIDRejected int64 // answered 401/403: the key does not match
}

// Snapshot is a copy of Stats at one moment.
type Snapshot struct {
	Delivered int64
	Gone      int64
	Skipped   int64 // records consumed again that the previous owner had finished
	DLQ       map[topology.Reason]int64
	Retries   map[string]int64
	Origins   map[string]OriginStats
	Apps      map[string]AppStats // by app; event.DefaultApp for the default identity
}

// Skipped counts records skipped because a partition's previous owner had
// finished them.
func (s *Stats) Skipped(n int) { s.skipped.Add(int64(n)) }

func (s *Stats) appLocked(app string) *AppStats {
	if s.apps == nil {
		s.apps = make(map[string]*AppStats)
	}
	a, ok := s.apps[app]
	if !ok {
		a = &AppStats{}
		s.apps[app] = a
	}
	return a
}

func (s *Stats) originLocked(origin string) *OriginStats {
	if s.origins == nil {
		s.origins, _ = lru.New[string, *OriginStats](MaxOrigins)
	}
	o, ok := s.origins.Get(origin)
	if !ok {
		o = &OriginStats{Status: make(map[int]int64)}
		s.origins.Add(origin, o)
	}
	return o
}

// Sent counts a send.
func (s *Stats) Sent(i SendInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.originLocked(i.Origin)
	o.Sends++
	if i.Result.Status == 0 {
		o.Errors++
	} else {
		o.Status[i.Result.Status]++
	}
	if i.Result.Status == 429 {
		o.Rate429s++
	}
	if i.App != "" {
		a := s.appLocked(i.App)
		a.Sends++
		if i.Result.Class == push.Delivered {
			a.Delivered++
		}
	}
}

// VAPIDRejected counts a push service's refusal of app's VAPID
// authorization.
func (s *Stats) VAPIDRejected(app string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.appLocked(app).VAPIDRejected++
}

// Retried counts a record routed to a retry topic.
func (s *Stats) Retried(r RetryInfo) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.retries == nil {
		s.retries = make(map[string]int64)
	}
	s.retries[r.Topic]++
	if r.Paced {
		s.originLocked(r.Origin).Deferred++
	}
}

// DeadLettered counts a DLQ record.
func (s *Stats) DeadLettered(r topology.Reason) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dlq == nil {
		s.dlq = make(map[topology.Reason]int64)
	}
	s.dlq[r]++
}

// Finished counts deliveries and gone endpoints.
func (s *Stats) Finished(f FinishInfo) {
	switch f.Outcome {
	case topology.OutcomeDelivered:
		s.delivered.Add(1)
	case topology.OutcomeGone:
		s.gone.Add(1)
	}
}

// Snapshot copies the counters.
func (s *Stats) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Snapshot{
		Delivered: s.delivered.Load(),
		Gone:      s.gone.Load(),
		Skipped:   s.skipped.Load(),
		DLQ:       maps.Clone(s.dlq),
		Retries:   maps.Clone(s.retries),
		Origins:   make(map[string]OriginStats),
		Apps:      make(map[string]AppStats, len(s.apps)),
	}
	for k, v := range s.apps {
		out.Apps[k] = *v
	}
	if out.DLQ == nil {
		out.DLQ = make(map[topology.Reason]int64)
	}
	if out.Retries == nil {
		out.Retries = make(map[string]int64)
	}
	if s.origins != nil {
		for _, k := range s.origins.Keys() {
			v, _ := s.origins.Peek(k)
			c := *v
			c.Status = maps.Clone(v.Status)
			out.Origins[k] = c
		}
	}
	return out
}

// SortedKeys returns m's keys in order, for stable tables.
func SortedKeys[K ~string, V any](m map[K]V) []K {
	return slices.Sorted(maps.Keys(m))
}
