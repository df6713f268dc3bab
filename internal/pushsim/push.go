package pushsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxTopicLen is the RFC 8030 §5.4 limit on the Topic header.
const maxTopicLen = 32

// verdict is how the simulator answers one push request.
type verdict struct {
	status     int
	reason     string
	retryAfter string
	header     map[string]string
	latency    time.Duration
	latencySet bool // latency overrides the configured one
}

func reject(status int, reason string) verdict {
	return verdict{status: status, reason: reason}
}

// handlePush answers POST /push/{id}. The request is received whole (its body read, as a
// front end buffers it), then waits for a worker of its origin (Config.Workers), which checks
// it, decides the answer and holds it for the latency.
func (s *Server) handlePush(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	d := Delivery{SubID: r.PathValue("id"), At: time.Now(), Proto: r.Proto}
	org := origin(requestScheme(r), r.Host)
	body, readErr := readBody(r)
	if !s.workers.take(r.Context(), s.closing, org) {
		s.dropQueued(w, r, d)
		return
	}
	defer s.workers.release(org)
	d.Started = time.Now()
	d.Wait = d.Started.Sub(d.At)
	v := s.judge(r, org, body, readErr, &d)
	latency := v.latency
	if !v.latencySet {
		latency = s.cfg.Latency
		if j := s.cfg.LatencyJitter; j > 0 {
			latency += time.Duration(rand.Int64N(int64(j) + 1))
		}
	}
	ctx := r.Context()
	if s.cfg.Workers > 0 {
		// A worker does its work whether or not the sender still waits
		// for the answer: the next request in the queue waits for it all
		// the same. Without a pool nothing waits on it, and the record
		// is written as soon as the sender is gone.
		ctx = context.WithoutCancel(ctx)
	}
	s.delay(ctx, latency)

	d.Status, d.Reason = v.status, v.reason
	// The sender gave up on the request before it was answered (its
	// timeout, or it went away): it cannot know the answer, and one that
	// timed out sends the push again.
	d.ClientGone = r.Context().Err() != nil
	s.rec.add(d)
	if s.logger.Enabled(r.Context(), slog.LevelDebug) { // skip building attrs on the hot path
		s.logger.Debug("push answered", "sub", hashID(d.SubID), "status", v.status, "reason", v.reason)
	}

	h := w.Header()
	for k, val := range v.header {
		h.Set(k, val)
	}
	if v.retryAfter != "" {
		h.Set("Retry-After", v.retryAfter)
	}
	if v.status >= 200 && v.status < 300 {
		h.Set("Location", org+"/m/"+strconv.FormatInt(s.msgSeq.Add(1), 10))
		h.Set("TTL", strconv.Itoa(d.TTL))
		w.WriteHeader(v.status)
		return
	}
	http.Error(w, v.reason, v.status)
}

// readBody reads a push request's body, at most MaxBodySize+1 bytes (one
// more says it is too large): into a buffer of its announced length when
// it has one, where io.ReadAll grew one from 512 bytes, copying (a sixth
// of the simulator's CPU).
func readBody(r *http.Request) ([]byte, error) {
	n := r.ContentLength
	if n < 0 || n > MaxBodySize {
		return io.ReadAll(io.LimitReader(r.Body, MaxBodySize+1))
	}
	body := make([]byte, n, n+1)
	if _, err := io.ReadFull(r.Body, body); err != nil {
		return body, err
	}
	// A body longer than announced: the server's reader refuses it.
	if m, err := r.Body.Read(body[n : n+1]); m > 0 || (err != nil && err != io.EOF) {
		if err == nil {
			err = errors.New("body longer than its Content-Length")
		}
		return body[:n+int64(m)], err
	}
	return body, nil
}

// judge checks the request, whose body was read as body (or failed with readErr), as a push
// service would and decides the answer at d.Started, filling d.
func (s *Server) judge(r *http.Request, org string, body []byte, readErr error, d *Delivery) verdict {
	sub := s.lookup(d.SubID)
	if sub == nil {
		return reject(http.StatusNotFound, "no such subscription")
	}
	if sub.gone.Load() {
		return reject(http.StatusGone, "subscription expired or unsubscribed")
	}

	ttl, ok := r.Header["Ttl"]
	if !ok || len(ttl) == 0 {
		return reject(http.StatusBadRequest, "missing TTL header")
	}
	n, err := parseTTL(ttl[0])
	if err != nil {
		return reject(http.StatusBadRequest, err.Error())
	}
	d.TTL = n
	if u := r.Header.Get("Urgency"); u != "" {
		switch u {
		case "very-low", "low", "normal", "high":
			d.Urgency = u
		default:
			return reject(http.StatusBadRequest, "invalid Urgency header")
		}
	}
	if t := r.Header.Get("Topic"); t != "" {
		if !validTopic(t) {
			return reject(http.StatusBadRequest, "invalid Topic header: want at most 32 base64url characters")
		}
		d.Topic = t
	}

	if readErr != nil {
		return reject(http.StatusBadRequest, "read body: "+readErr.Error())
	}
	if len(body) > MaxBodySize {
		return reject(http.StatusRequestEntityTooLarge, "body larger than 4096 bytes")
	}
	if len(body) > 0 && !strings.EqualFold(strings.TrimSpace(r.Header.Get("Content-Encoding")), "aes128gcm") {
		return reject(http.StatusBadRequest, "Content-Encoding must be aes128gcm")
	}

	auth, err := parseVAPIDAuth(r.Header.Get("Authorization"))
	if err != nil {
		return reject(http.StatusUnauthorized, err.Error())
	}
	d.JWT, d.VAPIDKey = auth.token, auth.rawK
	switch {
	case sub.appKey != nil && !bytes.Equal(auth.key, sub.appKey):
		// FCM: "the credentials in the authorization header do not
		// correspond to the subscription".
		return reject(http.StatusForbidden, "vapid key is not the subscription's application server key")
	case sub.appKey == nil && s.vapidK != nil && !bytes.Equal(auth.key, s.vapidK):
		return reject(http.StatusForbidden, "vapid key is not the configured application server key")
	}
	verify := s.cfg.VerifyEvery <= 1 || s.verifyN.Add(1)%int64(s.cfg.VerifyEvery) == 1
	claims, err := readJWT(auth, verify)
	if err != nil {
		return reject(http.StatusForbidden, err.Error())
	}
	d.Audience, d.Subject, d.JWTExp = claims.aud, claims.sub, claims.exp
	if err := claims.check(org, d.Started); err != nil {
		return reject(http.StatusForbidden, err.Error())
	}
	if verify {
		if len(body) > 0 {
			plain, err := Decrypt(body, sub.key, sub.auth)
			if err != nil {
				return reject(http.StatusBadRequest, err.Error())
			}
			d.Payload = plain
		} else {
			d.Payload = []byte{}
		}
		d.Verified = true
	}
	return s.decide(sub, org, d.Started)
}

// StatusClientClosed is the status recorded for a request its sender gave up on while it
// waited for a worker (nginx's 499): it was dropped without work and never answered.
const StatusClientClosed = 499

// dropQueued records and ends a request that left the queue without a worker: its sender went
// away, or the simulator is closing (503).
func (s *Server) dropQueued(w http.ResponseWriter, r *http.Request, d Delivery) {
	d.Wait = time.Since(d.At)
	d.ClientGone = r.Context().Err() != nil
	d.Status, d.Reason = StatusClientClosed, "sender went away while queued"
	if !d.ClientGone {
		d.Status, d.Reason = http.StatusServiceUnavailable, "push service shutting down"
	}
	s.rec.add(d)
	http.Error(w, d.Reason, d.Status)
}

// decide answers a valid request: the subscription's script, else the rate limit, else the
// failure fractions, else 201.
func (s *Server) decide(sub *subscription, org string, now time.Time) verdict {
	if len(sub.script) > 0 {
		i := sub.sent.Add(1) - 1
		var resp Response
		switch last := sub.script[len(sub.script)-1]; {
		case i < int64(len(sub.script)):
			resp = sub.script[i]
		case last.Repeat:
			resp = last
		default:
			return verdict{status: http.StatusCreated}
		}
		v := verdict{
			status:     resp.Status,
			reason:     "scripted",
			retryAfter: resp.RetryAfter,
			header:     resp.Header,
			latency:    resp.Latency,
			latencySet: resp.Latency > 0,
		}
		if v.status == 0 {
			v.status = http.StatusCreated
		}
		return v
	}
	if !s.limiter.allow(org, now) {
		return verdict{status: http.StatusTooManyRequests, reason: "rate limited", retryAfter: s.retryAfter()}
	}
	fl := s.faults.Load()
	if f := fl.Fail503 + fl.Fail429 + fl.Fail410 + fl.Fail500; f > 0 {
		u := rand.Float64()
		switch {
		case u < fl.Fail503:
			return verdict{status: http.StatusServiceUnavailable, reason: "injected failure"}
		case u < fl.Fail503+fl.Fail429:
			return verdict{status: http.StatusTooManyRequests, reason: "injected failure", retryAfter: s.retryAfter()}
		case u < fl.Fail503+fl.Fail429+fl.Fail410:
			return verdict{status: http.StatusGone, reason: "injected failure"}
		case u < f:
			return verdict{status: http.StatusInternalServerError, reason: "injected failure"}
		}
	}
	return verdict{status: http.StatusCreated}
}

func (s *Server) retryAfter() string {
	if s.cfg.RetryAfter <= 0 {
		return ""
	}
	return strconv.Itoa(s.cfg.RetryAfter)
}

// delay waits d, cut short when the request is abandoned or the server closes.
func (s *Server) delay(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-s.closing:
	}
}

func requestScheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// parseTTL accepts a non-negative decimal integer of seconds.
func parseTTL(v string) (int, error) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 10 {
		return 0, errors.New("invalid TTL header: want a non-negative integer")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, errors.New("invalid TTL header: want a non-negative integer")
		}
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, errors.New("invalid TTL header: want a non-negative integer")
	}
	return n, nil
}

func validTopic(t string) bool {
	if len(t) > maxTopicLen {
		return false
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// subscriptionJSON is the PushSubscription JSON a browser would give the application server.
type subscriptionJSON struct {
	ID       string `json:"id"`
	Endpoint string `json:"endpoint"`
	Keys     struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// handleSubscribe answers POST /subscribe[?script=503,429:1,201,500*][&key=<app key>]: key, the
// application server key (base64url), binds the subscription to it.
func (s *Server) handleSubscribe(w http.ResponseWriter, r *http.Request) {
	script, err := ParseScript(r.URL.Query().Get("script"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var appKey []byte
	if k := r.URL.Query().Get("key"); k != "" {
		if appKey, err = parseVAPIDKey(k); err != nil {
			http.Error(w, "key: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	base := origin(requestScheme(r), r.Host)
	if s.baseSet.Load() {
		base = s.BaseURL()
	}
	sub := s.subscribe(base, appKey, script)
	var out subscriptionJSON
	out.ID, out.Endpoint, out.Keys.P256dh, out.Keys.Auth = sub.ID, sub.Endpoint, sub.P256dh, sub.Auth
	writeJSON(w, http.StatusCreated, out)
}

// handleUnsubscribe answers DELETE /subscribe/{id}.
func (s *Server) handleUnsubscribe(w http.ResponseWriter, r *http.Request) {
	if !s.Unsubscribe(r.PathValue("id")) {
		http.Error(w, "no such subscription", http.StatusNotFound)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleStats(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func (s *Server) handleDeliveries(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Deliveries())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}

// ParseScript parses a script as accepted by POST /subscribe?script=: comma-separated
// status[:retry-after] elements, the last optionally suffixed with * to repeat forever, e.g.
// "503,429:1,201" or "500*". An empty string is an empty script.
func ParseScript(s string) ([]Response, error) {
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	script := make([]Response, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		var resp Response
		if rest, ok := strings.CutSuffix(p, "*"); ok {
			if i != len(parts)-1 {
				return nil, fmt.Errorf("parse script element %q: only the last element may repeat", p)
			}
			resp.Repeat, p = true, rest
		}
		code, ra, _ := strings.Cut(p, ":")
		n, err := strconv.Atoi(code)
		if err != nil || n < 200 || n > 599 {
			return nil, fmt.Errorf("parse script element %q: want an HTTP status 200..599", p)
		}
		resp.Status, resp.RetryAfter = n, ra
		script = append(script, resp)
	}
	return script, nil
}
