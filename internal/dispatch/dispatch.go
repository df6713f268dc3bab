// Package dispatch sends one notification to its push service over a
// shared, tuned HTTP client, and classifies the answer: RFC 8291 encryption
// with the standard library's crypto (ecdh, hkdf, AES-GCM), the same
// message webpush-go builds, and an RFC 8292 VAPID JWT per app and push
// service that is signed once and reused, not signed per send. An event's
// app picks the VAPID identity that signs it. It does not decide
// where a record goes next (package topology does) nor how fast to send
// (package pacing).
package dispatch

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierpush/tierpush/internal/push"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tierpush/tierpush/internal/event"
	"github.com/tierpush/tierpush/internal/netguard"
)

// Sender sends one notification and classifies the answer.
type Sender interface {
	// Send signs e with the VAPID identity of e.App, sends it with the
	// remaining ttl and classifies the answer.
	Send(ctx context.Context, e *event.Event, ttl time.Duration) push.Result
	// Signs reports whether Send has a VAPID identity for app; "" is the
	// default identity. An event whose app it has none for must not be
	// sent: no key would match its subscription.
	Signs(app string) bool
}

// Config tunes the sender. Zero fields take the documented defaults.
type Config struct {
	// VAPID is the default identity, that of events without an app (the
	// --vapid-* flags). The zero VAPID means there is none; Apps must then
	// hold at least one identity.
	VAPID VAPID
	// Apps are the identities of named apps (--vapid-keys), by the event's
	// app.
	Apps map[string]VAPID
	// Timeout bounds one send, connection included. Default 10s.
	Timeout time.Duration
	// JWTLifetime is the exp of the VAPID JWTs minted. Default 12h; push
	// services accept at most 24h.
	JWTLifetime time.Duration
	// JWTRefresh is how long one JWT is reused per audience. Default 1h, the
	// shortest interval Apple allows.
	JWTRefresh time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
	if c.JWTLifetime == 0 {
		c.JWTLifetime = 12 * time.Hour
	}
	if c.JWTRefresh == 0 {
		c.JWTRefresh = time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// WebPush is the Web Push Sender.
type WebPush struct {
	cfg Config
	// rt is the transport of the client New was given. Send calls it
	// directly: http.Client.Do cloned every request's header for redirects
	// (which a push sender must not follow) and set up a deadline the
	// per-send context already sets, 8 of an event's 125 allocations in
	// bench a.
	rt http.RoundTripper
	// ids holds one JWT cache per identity, by app ("" is the default).
	ids  map[string]*vapidCache
	ttls ttlValues
}

// ttlValues keeps the TTL header values of the last few TTLs sent, one per
// residue of the seconds mod len: events sent close together have TTLs
// within a few seconds of each other, and the value and its slice were two
// allocations per send. Like the other shared header values, the
// transport only reads them.
type ttlValues [8]atomic.Pointer[ttlValue]

type ttlValue struct {
	secs int
	v    []string
}

// value returns the TTL header value of secs.
func (t *ttlValues) value(secs int) []string {
	slot := &t[uint(secs)%uint(len(t))]
	if v := slot.Load(); v != nil && v.secs == secs {
		return v.v
	}
	v := &ttlValue{secs: secs, v: []string{strconv.Itoa(secs)}}
	slot.Store(v)
	return v.v
}

var _ Sender = (*WebPush)(nil)

// New returns a WebPush sender that sends through hc's Transport (its
// DefaultTransport when nil); hc should come from NewHTTPClient. Send bounds
// every request by cfg.Timeout itself, follows no redirect (a 3xx is an
// answer, classified like any other) and sends no cookies, so hc's Timeout,
// CheckRedirect and Jar are not used. The default identity, unless zero, must pass
// ValidateVAPID, and each of Apps ValidateApp; one identity at least must
// exist.
func New(cfg Config, hc *http.Client) (*WebPush, error) {
	cfg.defaults()
	if cfg.VAPID != (VAPID{}) || len(cfg.Apps) == 0 {
		if err := ValidateVAPID(cfg.VAPID); err != nil {
			return nil, err
		}
	}
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	w := &WebPush{cfg: cfg, rt: rt, ids: make(map[string]*vapidCache, len(cfg.Apps)+1)}
	if cfg.VAPID != (VAPID{}) {
		w.ids[""] = w.newCache(cfg.VAPID)
	}
	for _, app := range slices.Sorted(maps.Keys(cfg.Apps)) {
		v := cfg.Apps[app]
		if err := ValidateApp(app, v); err != nil {
			return nil, err
		}
		w.ids[app] = w.newCache(v)
	}
	return w, nil
}

func (w *WebPush) newCache(v VAPID) *vapidCache {
	k, _ := parseIdentity(v, identityFields{}, false) // New validated v
	return &vapidCache{
		key:      k.private,
		pub:      k.public,
		subject:  subjectClaim(v.Subject),
		lifetime: w.cfg.JWTLifetime,
		refresh:  w.cfg.JWTRefresh,
		now:      w.cfg.Now,
		byAud:    make(map[audience]vapidHeader),
	}
}

// Signs reports whether w has a VAPID identity for app ("" is the
// default).
func (w *WebPush) Signs(app string) bool {
	_, ok := w.ids[app]
	return ok
}

// Send encrypts and posts e with the remaining ttl, then classifies the
// answer. The response body is always drained and closed so the connection
// is reused.
func (w *WebPush) Send(ctx context.Context, e *event.Event, ttl time.Duration) push.Result {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	if c, ok := w.rt.(*conns); ok && e.EndpointURL != nil {
		c.connected(ctx, e.EndpointURL)
	}
	b := newBody()
	req, err := w.request(ctx, e, ttl, b)
	if err != nil {
		b.recycle()
		switch {
		case errors.Is(err, errPayloadTooLarge):
			return push.Result{Class: push.TooLarge, Err: err.Error()}
		case errors.Is(err, errNoIdentity):
			// The caller asks Signs first; nothing was sent.
			return push.Result{Class: push.Rejected, Err: err.Error()}
		}
		return Classify(0, nil, err, w.cfg.Now())
	}
	b.holders.Store(2) // Send and the transport
	resp, err := w.rt.RoundTrip(req)
	if err != nil {
		b.release()
		if isBlocked(err) {
			return push.Result{Class: push.Blocked, Err: "endpoint address refused at dial time"}
		}
		return Classify(0, nil, err, w.cfg.Now())
	}
	b.drain = io.LimitedReader{R: resp.Body, N: 64 << 10}
	_, _ = io.Copy(io.Discard, &b.drain)
	b.drain.R = nil
	resp.Body.Close()
	b.release()
	return Classify(resp.StatusCode, resp.Header, nil, w.cfg.Now())
}

// errNoIdentity: the event's app has no VAPID identity.
var errNoIdentity = errors.New("no VAPID identity for the event's app")

// Header values every push request shares. The transport only reads a
// request's header, so one slice serves every request.
var (
	hdrAES128GCM   = []string{"aes128gcm"}
	hdrOctetStream = []string{"application/octet-stream"}
	hdrUrgency     = map[string][]string{
		event.UrgencyVeryLow: {event.UrgencyVeryLow}, event.UrgencyLow: {event.UrgencyLow},
		event.UrgencyNormal: {event.UrgencyNormal}, event.UrgencyHigh: {event.UrgencyHigh},
	}
)

// request builds the RFC 8030 push request: the body encrypted into b, TTL,
// Urgency, Topic and the cached VAPID Authorization of the event's app for
// the endpoint's origin.
func (w *WebPush) request(ctx context.Context, e *event.Event, ttl time.Duration, b *body) (*http.Request, error) {
	id, ok := w.ids[e.App]
	if !ok {
		return nil, errNoIdentity
	}
	msg, err := encryptTo(b.msg.buf[:0], e.Payload, e.P256dh, e.PublicKey(), e.Auth)
	if err != nil {
		return nil, err
	}
	b.msg.buf = msg
	b.r.Reset(msg)
	var req *http.Request
	if u := e.EndpointURL; u != nil {
		// Decode parsed and checked it: no second parse per send.
		req = (&http.Request{Method: http.MethodPost, URL: u, Host: u.Host, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}).WithContext(ctx)
	} else if req, err = http.NewRequestWithContext(ctx, http.MethodPost, e.Endpoint, nil); err != nil {
		return nil, err
	}
	req.Body, req.ContentLength, req.GetBody = b, int64(len(msg)), b.rewind
	secs := int(ttl / time.Second) // always set: an absent TTL is 0 at some push services
	if secs == 0 && ttl > 0 {
		secs = 1 // TTL 0 means "now or never"; a sub-second remainder is not that
	}
	auth, err := id.header(req.URL.Scheme, req.URL.Host)
	if err != nil {
		return nil, err
	}
	h := make(http.Header, 6)
	h["Content-Encoding"] = hdrAES128GCM
	h["Content-Type"] = hdrOctetStream
	h["Ttl"] = w.ttls.value(secs)
	if e.Topic != "" {
		h["Topic"] = []string{e.Topic}
	}
	if u, ok := hdrUrgency[e.Urgency]; ok {
		h["Urgency"] = u
	}
	h["Authorization"] = auth
	req.Header = h
	return req, nil
}

// body is the request body of one send, over a message buffer of
// recordSize bytes from messages: one send allocated 4 KiB for its
// message, the largest share of the bytes the processor allocated.
//
// The buffer goes back to messages once both Send and the transport are
// done with the body (release, and the transport's Close), and only if the
// transport never asked for a second copy (GetBody, on a retry of the
// request). Whichever of the two is last recycles it: HTTP/2 closes a
// request body on a goroutine of its own, mostly after Send has its answer,
// so a check in Send alone recycled few buffers. A body once closed stays
// closed and reads nothing, and Read and Close exclude each other: the
// HTTP/2 writer may still be reading when the body is closed under it (a
// stream aborted, or answered before its body was written), and no read
// may reach a buffer another send has taken since.
type body struct {
	msg *message

	mu     sync.Mutex
	r      bytes.Reader // over msg.buf
	closed bool

	// drain reads what the push service answered, bounded (a field here
	// rather than an io.LimitReader per send).
	drain   io.LimitedReader
	holders atomic.Int32 // 2 while the transport has it; 0: recycle
	rewound atomic.Bool
}

// message is a buffer of recordSize bytes for one encrypted message.
type message struct{ buf []byte }

var messages = sync.Pool{New: func() any { return &message{buf: make([]byte, 0, recordSize)} }}

func newBody() *body { return &body{msg: messages.Get().(*message)} }

// errBodyClosed is what a read of a closed body gets.
var errBodyClosed = errors.New("push request body read after close")

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errBodyClosed
	}
	return b.r.Read(p)
}

// Close is the transport's: it is done with b.
func (b *body) Close() error {
	b.mu.Lock()
	first := !b.closed
	b.closed = true
	b.mu.Unlock()
	if first {
		b.drop()
	}
	return nil
}

// rewind is the request's GetBody: a reader of its own over the message,
// whose buffer is then never recycled.
func (b *body) rewind() (io.ReadCloser, error) {
	b.rewound.Store(true)
	return io.NopCloser(bytes.NewReader(b.msg.buf)), nil
}

// recycle puts b's buffer back in messages; nothing reads it any more.
func (b *body) recycle() {
	b.msg.buf = b.msg.buf[:0]
	messages.Put(b.msg)
}

// release is Send's: it is done with b after the transport had it.
func (b *body) release() { b.drop() }

// drop recycles b's buffer when the last of its holders lets go, unless a
// copy of it was handed out.
func (b *body) drop() {
	if b.holders.Add(-1) == 0 && !b.rewound.Load() {
		b.recycle()
	}
}

// isBlocked reports a connection the dial-time address check refused: zero
// bytes reached the address.
func isBlocked(err error) bool {
	var b *netguard.BlockedError
	return errors.As(err, &b)
}

// vapidCache holds, for one identity, one VAPID Authorization header per
// audience (push service origin), re-signed every refresh: push services
// (Apple first) ask
// senders not to sign a fresh JWT per send, and signing costs more CPU than
// the encryption.
type vapidCache struct {
	key      *ecdsa.PrivateKey
	pub      string
	subject  string
	lifetime time.Duration
	refresh  time.Duration
	now      func() time.Time

	mu    sync.Mutex
	byAud map[audience]vapidHeader
}

type vapidHeader struct {
	value  []string // the Authorization header
	minted time.Time
}

// audience is a push service origin, scheme and host[:port], the aud of
// its JWT; kept apart so a lookup builds no string.
type audience struct{ scheme, host string }

func (v *vapidCache) header(scheme, host string) ([]string, error) {
	now := v.now()
	v.mu.Lock()
	defer v.mu.Unlock()
	key := audience{scheme, host}
	if h, ok := v.byAud[key]; ok && now.Sub(h.minted) < v.refresh && now.After(h.minted.Add(-time.Minute)) {
		return h.value, nil
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{
		"aud": scheme + "://" + host,
		"exp": now.Add(v.lifetime).Unix(),
		"sub": v.subject,
	})
	s, err := tok.SignedString(v.key)
	if err != nil {
		return nil, fmt.Errorf("sign vapid jwt: %w", err)
	}
	// One slice per audience, shared by every request's header (the
	// transport only reads it).
	h := vapidHeader{value: []string{"vapid t=" + s + ", k=" + v.pub}, minted: now}
	if len(v.byAud) > 10_000 {
		clear(v.byAud) // bounded: audiences are push services, a handful in practice
	}
	v.byAud[key] = h
	return h.value, nil
}

// HTTPConfig tunes the shared HTTP client.
type HTTPConfig struct {
	// DialContext dials connections; it should refuse non-public addresses
	// (netguard). Default: a plain net.Dialer.
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// RootCAs, when set, replaces the system roots (tests, the simulator).
	TLS *TLSConfig
	// MaxConnsPerHost bounds connections per push service; 0 = 512.
	MaxConnsPerHost int
	// SendTimeout is the sender's bound on one send (Config.Timeout). The
	// client's own Timeout is 5 s more, for callers of the client other
	// than Send, so that the sender's bound is the one that counts. 0 = 10s.
	SendTimeout time.Duration
}

// MaxResponseHeaderBytes bounds the headers of a push service's answer.
const MaxResponseHeaderBytes = 16 << 10

// NewHTTPClient returns the client every send shares: keep-alive, HTTP/2
// over TLS, bounded connection and handshake times, and headers of at most
// MaxResponseHeaderBytes. There is no ResponseHeaderTimeout: Send's context
// bounds the whole exchange, headers included, and the transport's timer
// for it was one more timer per request.
func NewHTTPClient(c HTTPConfig) *http.Client {
	if c.DialContext == nil {
		d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
		c.DialContext = d.DialContext
	}
	if c.MaxConnsPerHost == 0 {
		c.MaxConnsPerHost = 512
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = 10 * time.Second
	}
	t := &http.Transport{
		DialContext:           c.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   c.MaxConnsPerHost,
		MaxConnsPerHost:       c.MaxConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ExpectContinueTimeout: time.Second,
		// A push service's answer has a few short headers. Go's default
		// (10 MiB) would let a hostile endpoint make each of hundreds of
		// sends in flight buffer that much; HTTP/2 takes the same limit.
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
	}
	if c.TLS != nil {
		t.TLSClientConfig = c.TLS.clientConfig()
	}
	return &http.Client{
		Transport: newConns(t, c.MaxConnsPerHost, 10*time.Second),
		Timeout:   c.SendTimeout + 5*time.Second,
		// A push service answers; it does not redirect. Following one would
		// send the capability URL's payload somewhere unchecked.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
