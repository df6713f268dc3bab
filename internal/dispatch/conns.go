package dispatch

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// conns is the RoundTripper every send goes through. Requests to a push
// service that speaks HTTP/2 over TLS go over connections it keeps per
// service (h2conn), dialled one at a time and one ahead of need; other
// requests go through the Transport.
//
// The Transport dials a connection for every request that finds its
// connections' streams taken, and keeps only the first to finish: 300
// sends at once to a service not yet connected set off 519 TLS handshakes
// and waited 0.73 s for them, and 300 to a connection of 250 streams set
// off 50. Here a burst waits for one dial, or for a stream to free (one
// round trip), and the next connection is dialled once a quarter of the
// streams is left, before they run out.
type conns struct {
	t         *http.Transport // for what is not HTTP/2 over TLS
	maxPerKey int
	dialFor   time.Duration
	// The Transport's dialer and TLS settings, read once: the Transport
	// writes its TLS config on its first request.
	dialCtx      func(ctx context.Context, network, addr string) (net.Conn, error)
	tlsConfig    *tls.Config
	tlsHandshake time.Duration

	mu    sync.Mutex
	hosts map[string]*hostConns // by the URL's host[:port]
}

func newConns(t *http.Transport, maxPerHost int, dialFor time.Duration) *conns {
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	var tc *tls.Config
	if t.TLSClientConfig != nil {
		tc = t.TLSClientConfig.Clone()
	}
	return &conns{t: t, maxPerKey: maxPerHost, dialFor: dialFor, hosts: make(map[string]*hostConns),
		dialCtx: dial, tlsConfig: tc, tlsHandshake: t.TLSHandshakeTimeout}
}

// hostConns is one push service's connections.
type hostConns struct {
	addr string

	mu      sync.Mutex
	live    []*h2conn
	dialing bool
	h1      bool  // the service did not offer HTTP/2: the Transport sends
	dials   int   // dials ended, failed or not
	dialErr error // the last dial's error, nil once one succeeds

	// wake is closed, and a new one made, whenever a stream may have
	// freed or a dial ended; gen counts those. The state hooks that signal
	// them run inside the connection's own calls (Reserve among them,
	// which take runs under mu), so they take wmu alone.
	gen  atomic.Uint64
	wmu  sync.Mutex
	wake chan struct{}
}

// RoundTrip sends req over a connection of its push service.
func (c *conns) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		return c.t.RoundTrip(req)
	}
	h := c.host(req.URL)
	for tries := 0; ; tries++ {
		cc, err := h.take(req.Context(), c)
		if err != nil {
			return nil, err
		}
		if cc == nil {
			return c.t.RoundTrip(req)
		}
		resp, err := cc.RoundTrip(req)
		if err == nil || tries == 2 || !unprocessed(err) {
			return resp, err
		}
		// The service never saw the request (a GOAWAY, a refused stream,
		// a connection closing under it): send it on another, as the
		// Transport would.
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, err
			}
			r := *req
			r.Body = body
			req = &r
		}
	}
}

// unprocessed tells whether err says the service did not process the
// request.
func unprocessed(err error) bool { return errors.Is(err, errUnprocessed) }

// CloseIdleConnections closes every connection with no request in
// flight, the Transport's among them.
func (c *conns) CloseIdleConnections() {
	c.mu.Lock()
	hosts := make([]*hostConns, 0, len(c.hosts))
	for _, h := range c.hosts {
		hosts = append(hosts, h)
	}
	c.mu.Unlock()
	for _, h := range hosts {
		h.mu.Lock()
		live := h.live[:0]
		for _, cc := range h.live {
			if cc.InFlight() == 0 {
				_ = cc.Close()
				continue
			}
			live = append(live, cc)
		}
		clear(h.live[len(live):])
		h.live = live
		h.mu.Unlock()
	}
	c.t.CloseIdleConnections()
}

// host is the connections of u's push service, keyed by u.Host as it is:
// the address is built once, not per send.
func (c *conns) host(u *url.URL) *hostConns {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.hosts[u.Host]
	if h == nil {
		port := u.Port()
		if port == "" {
			port = "443"
		}
		h = &hostConns{addr: net.JoinHostPort(u.Hostname(), port)}
		c.hosts[u.Host] = h
	}
	return h
}

// connected returns once the push service of u has a connection, speaks
// only HTTP/1.1, or has ended the dial it had in hand (failed or not), or
// when ctx ends; at once for plain HTTP. Send asks it before encrypting: a
// burst to a service not yet connected otherwise encrypts every send at
// once while the one dial's handshake waits its turn behind them for the
// CPU. At the start of 6,000 events, 768 sends in flight, the first
// handshake took 113 ms in the processor and 5-8 ms alone.
func (c *conns) connected(ctx context.Context, u *url.URL) {
	if u.Scheme != "https" {
		return
	}
	h := c.host(u)
	gen := h.gen.Load()
	h.mu.Lock()
	if h.h1 || slices.ContainsFunc(h.live, func(cc *h2conn) bool { return cc.Err() == nil }) {
		h.mu.Unlock()
		return
	}
	// None is usable (take drops the broken ones): dial, unless a dial
	// is under way.
	if !h.dialing {
		h.dialing = true
		go h.dial(c)
	}
	h.mu.Unlock()
	if ch := h.waitFor(gen); ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// take returns a connection with a stream reserved for the request, or
// nil when the service speaks only HTTP/1.1. It waits for a stream or a
// dial; it fails when the dial it waited for failed and no connection is
// left, or when ctx ends.
func (h *hostConns) take(ctx context.Context, c *conns) (*h2conn, error) {
	for {
		gen := h.gen.Load()
		h.mu.Lock()
		if h.h1 {
			h.mu.Unlock()
			return nil, nil
		}
		var got *h2conn
		free, size := 0, 0
		live := h.live[:0]
		for _, cc := range h.live {
			if cc.Err() != nil {
				continue
			}
			live = append(live, cc)
			if got == nil && cc.Reserve() == nil {
				got = cc
			}
			a := cc.Available()
			free, size = free+a, max(size, a+cc.InFlight())
		}
		clear(h.live[len(live):])
		h.live = live
		// Dial the next connection once a quarter of the streams is left,
		// so that it is there before they run out; one dial at a time.
		if !h.dialing && len(live) < c.maxPerKey && (len(live) == 0 || free < max(size/4, 1)) {
			h.dialing = true
			go h.dial(c)
		}
		dials := h.dials
		h.mu.Unlock()
		if got != nil {
			return got, nil
		}
		if ch := h.waitFor(gen); ch != nil {
			select {
			case <-ch:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		// The dial waited for failed, and there is no connection to wait
		// on: the request fails (the next one dials again).
		h.mu.Lock()
		failed := h.dials != dials && h.dialErr != nil && len(h.live) == 0
		err := h.dialErr
		h.mu.Unlock()
		if failed {
			return nil, err
		}
	}
}

// waitFor returns the channel closed on the next signal, or nil when one
// came after gen was read.
func (h *hostConns) waitFor(gen uint64) <-chan struct{} {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	if h.gen.Load() != gen {
		return nil
	}
	if h.wake == nil {
		h.wake = make(chan struct{})
	}
	return h.wake
}

// signal wakes the requests waiting for a stream or a dial.
func (h *hostConns) signal() {
	h.gen.Add(1)
	h.wmu.Lock()
	if h.wake != nil {
		close(h.wake)
		h.wake = nil
	}
	h.wmu.Unlock()
}

// dial opens one connection to the service. One that offers HTTP/1.1
// only is closed: the Transport pools a connection per request in flight.
func (h *hostConns) dial(c *conns) {
	ctx, cancel := context.WithTimeout(context.Background(), c.dialFor)
	defer cancel()
	cc, err := dialH2(ctx, c.dialCtx, c.tlsConfig, c.tlsHandshake, h.addr, h.signal)
	h.mu.Lock()
	h.dialing = false
	h.dials++
	h.dialErr = err
	switch {
	case err != nil:
	case cc == nil:
		h.h1 = true
	default:
		h.live = append(h.live, cc)
	}
	h.mu.Unlock()
	h.signal()
}
