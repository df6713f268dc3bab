// Package pushsim is an in-process Web Push service simulator for tests, benchmarks and the
// --dev mode. It mints subscriptions (keeping their private keys), accepts RFC 8030 push
// requests, checks the headers a real push service requires, verifies RFC 8292 VAPID and
// decrypts RFC 8291 aes128gcm bodies byte-exactly, then answers as scripted per subscription or
// as configured (rate limit, failure fractions, latency, a pool of workers per origin that
// queues what it cannot serve yet), and records what it received and how long it queued. A
// subscription made with an application server key is bound to it, as a browser's is: a push
// signed with any other key gets 403, as FCM answers.
//
// It owns no goroutine outside the HTTP server it runs and reads time only at request time, so
// it works on any net.Listener, including an in-memory one inside a testing/synctest bubble.
// It must not be used as a production push service: it keeps every key in memory and trusts
// the Host header to name the origin.
package pushsim

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Subscription is what a browser's PushSubscription would hand to the application server.
// Keys are base64url without padding; Endpoint is BaseURL + "/push/" + ID.
type Subscription struct {
	ID       string
	Endpoint string
	P256dh   string
	Auth     string
}

// Response is one scripted answer for a subscription.
type Response struct {
	// Status is the HTTP status answered; 0 means 201 Created.
	Status int
	// RetryAfter, when set, is sent as the Retry-After header (seconds or an HTTP-date).
	RetryAfter string
	// Header holds extra response headers (e.g. X-WNS-Status).
	Header map[string]string
	// Latency, when set, replaces the configured latency for this answer.
	Latency time.Duration
	// Repeat on the last element of a script repeats it forever.
	Repeat bool
}

// Server is the push service simulator. Create it with New.
type Server struct {
	cfg     Config
	logger  *slog.Logger
	srv     *http.Server
	mux     *http.ServeMux
	pool    *x509.CertPool
	certDER []byte // the self-signed certificate, when Config.TLS
	limiter *limiter
	workers *workers
	faults  atomic.Pointer[Faults]
	vapidK  []byte // cfg.VAPIDPublicKey decoded; nil accepts any key

	base    atomic.Pointer[string] // set by SetBaseURL or the first Serve
	baseSet atomic.Bool

	subsMu sync.RWMutex
	subs   map[string]*subscription

	requests atomic.Int64 // /push requests received
	verifyN  atomic.Int64 // header-valid requests, for VerifyEvery sampling
	msgSeq   atomic.Int64 // Location ids

	rec recorder

	closing   chan struct{}
	closeOnce sync.Once
}

type subscription struct {
	id     string
	appKey []byte // the application server key it was made with; nil: none
	key    *ecdh.PrivateKey
	auth   []byte
	script []Response
	sent   atomic.Int64 // requests that reached the script step
	gone   atomic.Bool
}

// New returns a simulator for cfg, which must be valid. logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("validate push simulator config: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:     cfg,
		logger:  logger,
		limiter: newLimiter(cfg.RateLimit, cfg.Burst, cfg.PerSecond),
		workers: newWorkers(cfg.Workers),
		subs:    make(map[string]*subscription),
		closing: make(chan struct{}),
	}
	s.rec.keep = cfg.KeepDeliveries
	s.faults.Store(&Faults{Fail503: cfg.Fail503, Fail429: cfg.Fail429, Fail410: cfg.Fail410, Fail500: cfg.Fail500})
	if cfg.VAPIDPublicKey != "" {
		k, err := parseVAPIDKey(cfg.VAPIDPublicKey)
		if err != nil {
			return nil, fmt.Errorf("parse --vapid-public-key: %w", err)
		}
		s.vapidK = k
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("POST /push/{id}", s.handlePush)
	s.mux.HandleFunc("POST /subscribe", s.handleSubscribe)
	s.mux.HandleFunc("DELETE /subscribe/{id}", s.handleUnsubscribe)
	s.mux.HandleFunc("GET /stats", s.handleStats)
	s.mux.HandleFunc("GET /deliveries", s.handleDeliveries)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })

	s.srv = &http.Server{
		Handler:           s.mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelDebug),
	}
	if cfg.TLS {
		cert, pool, err := selfSigned()
		if err != nil {
			return nil, err
		}
		s.pool, s.certDER = pool, cert.Certificate[0]
		s.srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	return s, nil
}

// Handler returns the simulator's HTTP handler, for httptest servers or custom serving.
// The origin it checks VAPID audiences against is the request's Host with https when the
// request came over TLS.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve serves on ln until Close: HTTPS with HTTP/2 when Config.TLS, otherwise plain HTTP/1.1.
// If no base URL was set, it derives one from ln's address. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	if !s.baseSet.Load() {
		if a, ok := ln.Addr().(*net.TCPAddr); ok {
			ip := a.IP
			if ip == nil || ip.IsUnspecified() {
				ip = net.IPv4(127, 0, 0, 1)
			}
			s.setBase(s.scheme() + "://" + net.JoinHostPort(ip.String(), fmt.Sprint(a.Port)))
		}
	}
	var err error
	if s.cfg.TLS {
		err = s.srv.ServeTLS(ln, "", "") // adds h2 to ALPN
	} else {
		err = s.srv.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("serve push simulator: %w", err)
	}
	return nil
}

// ListenAndServe listens on Config.Addr and serves until ctx is done or Close is called, then
// shuts down gracefully (up to 5 s). It returns nil on a clean shutdown.
func (s *Server) ListenAndServe(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	s.logger.Info("push simulator listening", "addr", ln.Addr().String(), "tls", s.cfg.TLS)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := s.Close(sctx); err != nil {
				s.logger.Warn("push simulator shutdown", "err", err)
			}
		case <-done:
		}
	})
	err = s.Serve(ln)
	close(done)
	wg.Wait()
	return err
}

// Close stops serving and waits for in-flight requests (whose latency is cut short) until ctx
// is done. It is safe to call more than once.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() { close(s.closing) })
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down push simulator: %w", err)
	}
	return nil
}

// CertPool returns a pool trusting the self-signed certificate, or nil when Config.TLS is off.
func (s *Server) CertPool() *x509.CertPool { return s.pool }

// CertPEM returns the self-signed certificate in PEM, for clients in other processes
// (SSL_CERT_FILE, NODE_EXTRA_CA_CERTS), or nil when Config.TLS is off.
func (s *Server) CertPEM() []byte {
	if s.certDER == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.certDER})
}

// TLSConfig returns a copy of the server's TLS configuration, for serving Handler on a
// listener of one's own; nil when Config.TLS is off. h2 is offered through ALPN.
func (s *Server) TLSConfig() *tls.Config {
	if s.srv.TLSConfig == nil {
		return nil
	}
	c := s.srv.TLSConfig.Clone()
	c.NextProtos = []string{"h2", "http/1.1"}
	return c
}

// SetBaseURL sets the scheme://host[:port] that Subscribe mints endpoints under, e.g. an
// httptest server's URL. A trailing slash is ignored.
func (s *Server) SetBaseURL(u string) {
	s.setBase(strings.TrimRight(u, "/"))
	s.baseSet.Store(true)
}

func (s *Server) setBase(u string) { s.base.Store(&u) }

// BaseURL returns the base URL endpoints are minted under: the one set by SetBaseURL, else
// the one derived by Serve, else scheme://Config.Addr.
func (s *Server) BaseURL() string {
	if p := s.base.Load(); p != nil {
		return *p
	}
	return s.scheme() + "://" + s.cfg.Addr
}

func (s *Server) scheme() string {
	if s.cfg.TLS {
		return "https"
	}
	return "http"
}

// Subscribe creates a subscription with a fresh P-256 key pair and auth secret. Its first
// requests are answered by script[0], script[1], …; after that 201 Created (or the last
// element forever when it has Repeat). Without a script, the configured rate limit and failure
// fractions apply. A Status outside 0 and 200..599 is a programming error and panics.
func (s *Server) Subscribe(script ...Response) Subscription {
	for _, r := range script {
		if r.Status != 0 && (r.Status < 200 || r.Status > 599) {
			panic(fmt.Sprintf("pushsim: scripted status %d, want 0 or 200..599", r.Status))
		}
	}
	return s.subscribe(s.BaseURL(), nil, script)
}

// SubscribeWithKey is Subscribe for a subscription bound to the application server key appKey
// (a base64url uncompressed P-256 point, padded or not), as PushManager.subscribe with
// applicationServerKey makes one: pushes signed with another key get 403, whatever
// Config.VAPIDPublicKey says. An invalid appKey is a programming error and panics.
func (s *Server) SubscribeWithKey(appKey string, script ...Response) Subscription {
	k, err := parseVAPIDKey(appKey)
	if err != nil {
		panic(fmt.Sprintf("pushsim: application server key: %v", err))
	}
	for _, r := range script {
		if r.Status != 0 && (r.Status < 200 || r.Status > 599) {
			panic(fmt.Sprintf("pushsim: scripted status %d, want 0 or 200..599", r.Status))
		}
	}
	return s.subscribe(s.BaseURL(), k, script)
}

func (s *Server) subscribe(base string, appKey []byte, script []Response) Subscription {
	key, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		panic(fmt.Sprintf("pushsim: generate P-256 key: %v", err)) // crypto/rand never fails
	}
	sub := &subscription{
		id:     rand.Text(),
		appKey: appKey,
		key:    key,
		auth:   make([]byte, authLen),
		script: append([]Response(nil), script...),
	}
	rand.Read(sub.auth)
	s.subsMu.Lock()
	s.subs[sub.id] = sub
	s.subsMu.Unlock()
	return Subscription{
		ID:       sub.id,
		Endpoint: base + "/push/" + sub.id,
		P256dh:   base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes()),
		Auth:     base64.RawURLEncoding.EncodeToString(sub.auth),
	}
}

// Unsubscribe marks the subscription gone: later pushes to it get 410 Gone. It reports
// whether the subscription exists.
func (s *Server) Unsubscribe(id string) bool {
	sub := s.lookup(id)
	if sub == nil {
		return false
	}
	sub.gone.Store(true)
	return true
}

func (s *Server) lookup(id string) *subscription {
	s.subsMu.RLock()
	defer s.subsMu.RUnlock()
	return s.subs[id]
}

// hashID names a subscription in logs without revealing its endpoint.
func hashID(id string) string {
	h := sha256.Sum256([]byte(id))
	return hex.EncodeToString(h[:4])
}

// Faults are the fractions of unscripted requests answered with an error.
type Faults struct {
	Fail503, Fail429, Fail410, Fail500 float64
}

// SetFaults changes the failure fractions while serving (an outage that
// starts or ends). Fractions are clamped to 0..1.
func (s *Server) SetFaults(f Faults) {
	for _, p := range []*float64{&f.Fail503, &f.Fail429, &f.Fail410, &f.Fail500} {
		*p = min(max(*p, 0), 1)
	}
	s.faults.Store(&f)
}
