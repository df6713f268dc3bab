package pushsim

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Delivery is one push request the simulator answered.
type Delivery struct {
	SubID string `json:"sub_id"`
	// Payload is the decrypted plaintext; nil when the request was not decrypted (sampled out
	// by VerifyEvery, or rejected before decryption).
	Payload  []byte    `json:"payload,omitempty"`
	Verified bool      `json:"verified"` // signature verified and body decrypted
	TTL      int       `json:"ttl"`
	Urgency  string    `json:"urgency,omitempty"`
	Topic    string    `json:"topic,omitempty"`
	Audience string    `json:"aud,omitempty"`
	Subject  string    `json:"sub,omitempty"`
	JWTExp   time.Time `json:"jwt_exp"`
	JWT      string    `json:"jwt,omitempty"`
	VAPIDKey string    `json:"vapid_key,omitempty"` // the k= parameter
	Proto    string    `json:"proto"`               // HTTP/1.1, HTTP/2.0
	Status   int       `json:"status"`              // what the simulator answered
	Reason   string    `json:"reason,omitempty"`    // why it answered an error status
	At       time.Time `json:"at"`                  // when the request arrived
	// Started is when a worker took the request up (Config.Workers; At
	// without a pool), zero when none did; Wait is how long it queued
	// for one: Started - At, or until it left the queue.
	Started time.Time     `json:"started,omitzero"`
	Wait    time.Duration `json:"wait_ns"`
	// ClientGone: the sender had closed the request (or its connection)
	// before the answer was written, so it never read the answer. Seen
	// when the simulator notices in time; false says nothing.
	ClientGone bool `json:"client_gone,omitempty"`
}

// Stats counts answered push requests.
type Stats struct {
	Requests  int64         `json:"requests"`
	Decrypted int64         `json:"decrypted"`
	ByStatus  map[int]int64 `json:"by_status"`
}

// recorder holds deliveries and counts under one short-held lock.
type recorder struct {
	keep int // 0 = unlimited

	mu        sync.Mutex
	ring      []Delivery // when keep > 0: ring buffer of up to keep entries starting at head
	head      int
	requests  int64
	decrypted int64
	byStatus  map[int]int64
	changed   chan struct{} // closed on the next record; nil when nobody waits
}

func (r *recorder) add(d Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byStatus == nil {
		r.byStatus = make(map[int]int64)
	}
	r.requests++
	r.byStatus[d.Status]++
	if d.Verified {
		r.decrypted++
	}
	if r.keep > 0 && len(r.ring) == r.keep {
		r.ring[r.head] = d
		r.head = (r.head + 1) % r.keep
	} else {
		r.ring = append(r.ring, d)
	}
	if r.changed != nil {
		close(r.changed)
		r.changed = nil
	}
}

// statsLocked returns a snapshot; r.mu must be held.
func (r *recorder) statsLocked() Stats {
	return Stats{Requests: r.requests, Decrypted: r.decrypted, ByStatus: maps.Clone(r.byStatus)}
}

// Deliveries returns a copy of the recorded deliveries, oldest first.
func (s *Server) Deliveries() []Delivery {
	r := &s.rec
	r.mu.Lock()
	out := make([]Delivery, 0, len(r.ring))
	out = append(out, r.ring[r.head:]...)
	out = append(out, r.ring[:r.head]...)
	r.mu.Unlock()
	for i := range out {
		out[i].Payload = bytes.Clone(out[i].Payload)
	}
	return out
}

// Waits returns, in ascending order, how long each kept request (Config.KeepDeliveries) that
// arrived at or after from waited in its origin's queue: until a worker took it up, or, for
// one dropped from the queue (StatusClientClosed), until it was dropped.
func (s *Server) Waits(from time.Time) []time.Duration {
	r := &s.rec
	r.mu.Lock()
	var out []time.Duration
	for i := range r.ring {
		if d := &r.ring[i]; !d.At.Before(from) {
			out = append(out, d.Wait)
		}
	}
	r.mu.Unlock()
	slices.Sort(out)
	return out
}

// Stats returns the counts of answered push requests.
func (s *Server) Stats() Stats {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	st := s.rec.statsLocked()
	if st.ByStatus == nil {
		st.ByStatus = map[int]int64{}
	}
	return st
}

// Requests returns how many push requests have arrived, including ones still being answered.
func (s *Server) Requests() int64 { return s.requests.Load() }

// WaitFor blocks until cond holds for the current Stats, re-checking after every answered
// request, or until ctx is done.
func (s *Server) WaitFor(ctx context.Context, cond func(Stats) bool) error {
	r := &s.rec
	for {
		r.mu.Lock()
		st := r.statsLocked()
		if st.ByStatus == nil {
			st.ByStatus = map[int]int64{}
		}
		if cond(st) {
			r.mu.Unlock()
			return nil
		}
		if r.changed == nil {
			r.changed = make(chan struct{})
		}
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for push simulator stats: %w", context.Cause(ctx))
		}
	}
}
