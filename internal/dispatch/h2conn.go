package dispatch

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2conn is one HTTP/2 connection to a push service, a client of the one
// exchange a sender makes: a request with a small body, an answer of a
// status and a few headers. It does in the caller's goroutine what
// net/http's client did in a goroutine per stream, writes every stream's
// frames through one writer that sends what the streams queued meanwhile
// in one TLS write (net/http flushed the HEADERS and the DATA of each
// request on their own: two writes a send), and never puts a request's
// path, the subscription's capability URL, in the HPACK table, where each
// new path evicted older entries, the Authorization value among them.
// At 30,000 events net/http's stream was a quarter of the processor's CPU.
//
// h2stream.go is one request's stream, h2read.go the read loop.
type h2conn struct {
	nc   net.Conn // the TLS connection
	hook func()   // a stream may have freed, or the connection broke

	// The read loop's own.
	fr     *http2.Framer
	hdec   *hpack.Decoder
	fields headerFields

	mu sync.Mutex
	// out holds the frames queued for the writer, in the order the
	// service must read them; henc and hbuf encode header blocks into it,
	// and stream ids are taken in the same order.
	out    []byte
	henc   *hpack.Encoder
	hbuf   headerBlock
	nextID uint32

	streams    map[uint32]*h2stream
	reserved   int
	maxStreams int
	// The service's settings: its frame size, header list size (0: no
	// limit), and each new stream's send window.
	maxFrame      uint32
	maxHeaderList uint32
	initWindow    int32
	sawSettings   bool
	sendWindow    int32 // the connection's
	recvUnacked   int32 // DATA bytes received and not yet given back
	// windows, when a stream waits for a send window, is closed when one
	// grows.
	windows chan struct{}
	// broken says why no stream may start: GOAWAY, an error, Close.
	broken    error
	idleSince time.Time
	closing   bool // close once out is written (goAwayAndClose)

	flush chan struct{} // capacity 1: out has frames
	done  chan struct{} // closed once the connection is closed
}

// Sizes of the client's side of the connection.
const (
	// Streams a connection counts until the service's SETTINGS say how
	// many, and when they set no limit (net/http's figures).
	h2InitialStreams = 100
	h2DefaultStreams = 1000
	// h2StreamWindow is what a stream may receive before its body is
	// read (the protocol's default: no setting to send); the
	// connection's window is given back as DATA arrives.
	h2StreamWindow = 65535
	h2ConnWindow   = 1 << 20
	// A write the service does not take in this time breaks the
	// connection; one idle this long is closed.
	h2WriteTimeout = 10 * time.Second
	h2IdleTimeout  = 90 * time.Second
	// h2KeepBuffer bounds the writer's two buffers kept between writes:
	// 768 sends in flight queue 3.3 MB at once, which append grows to
	// 4-7 MB, and a buffer dropped and regrown for every burst was 17% of
	// the bytes the processor allocated.
	h2KeepBuffer = 8 << 20
)

// errUnprocessed: the push service did not process the request (a GOAWAY
// before its stream, a refused stream, a connection that broke before the
// request was queued); it may be sent again on another connection.
var errUnprocessed = errors.New("http2: request not processed by the push service")

var (
	errConnClosed   = errors.New("http2: connection closed")
	errStreamsTaken = errors.New("http2: every stream taken")
)

// dialH2 opens a TLS connection to addr and, if the service chose HTTP/2,
// returns it as an h2conn; nil without error when it chose HTTP/1.1.
func dialH2(ctx context.Context, dial func(ctx context.Context, network, addr string) (net.Conn, error), cfg *tls.Config, handshake time.Duration, addr string, hook func()) (*h2conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	raw, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &tls.Config{}
	} else {
		cfg = cfg.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"h2", "http/1.1"}
	tc := tls.Client(raw, cfg)
	hctx := ctx
	if handshake > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, handshake)
		defer cancel()
	}
	if err := tc.HandshakeContext(hctx); err != nil {
		raw.Close()
		return nil, err
	}
	if tc.ConnectionState().NegotiatedProtocol != "h2" {
		_ = tc.Close()
		return nil, nil
	}
	c, err := newH2Conn(ctx, tc, hook)
	if err != nil {
		_ = tc.Close()
		return nil, err
	}
	return c, nil
}

// newH2Conn starts HTTP/2 on nc: the preface and settings, the service's
// settings read (a service may hold a stream to its own window from its
// first frame on, and says there how many streams it takes), then the
// read loop and the writer. ctx bounds the wait for the settings.
func newH2Conn(ctx context.Context, nc net.Conn, hook func()) (*h2conn, error) {
	c := &h2conn{nc: nc, hook: hook, nextID: 1, streams: make(map[uint32]*h2stream),
		maxStreams: h2InitialStreams, maxFrame: 16384, initWindow: 65535, sendWindow: 65535,
		flush: make(chan struct{}, 1), done: make(chan struct{}), idleSince: time.Now()}
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.fr = http2.NewFramer(nil, bufio.NewReaderSize(nc, 32<<10))
	c.fr.SetReuseFrames()
	c.hdec = hpack.NewDecoder(4096, c.fields.add)
	c.hdec.SetMaxStringLength(MaxResponseHeaderBytes)
	c.out = append(c.out, http2.ClientPreface...)
	c.out = appendSettings(c.out,
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: MaxResponseHeaderBytes})
	c.out = appendWindowUpdate(c.out, 0, h2ConnWindow-65535)
	deadline := time.Now().Add(h2WriteTimeout)
	if d, ok := ctx.Deadline(); ok {
		deadline = d
	}
	_ = nc.SetDeadline(deadline) // a failure shows in the handshake's own error
	if _, err := nc.Write(c.out); err != nil {
		return nil, err
	}
	c.out = c.out[:0]
	f, err := c.fr.ReadFrame()
	if err != nil {
		return nil, err
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return nil, errors.New("http2: the push service's first frame is not SETTINGS")
	}
	if err := c.settings(sf); err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	go c.readLoop()
	go c.writeLoop()
	time.AfterFunc(h2IdleTimeout, c.closeIfIdle)
	return c, nil
}

// Reserve takes a stream for one RoundTrip, or fails when every stream
// is taken or the connection takes no more.
func (c *h2conn) Reserve() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return c.broken
	}
	if len(c.streams)+c.reserved >= c.maxStreams {
		return errStreamsTaken
	}
	c.reserved++
	return nil
}

// Available is how many more streams Reserve would give.
func (c *h2conn) Available() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return 0
	}
	return max(c.maxStreams-len(c.streams)-c.reserved, 0)
}

// InFlight is the streams open or reserved.
func (c *h2conn) InFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams) + c.reserved
}

// Err is why the connection takes no more streams, or nil.
func (c *h2conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.broken
}

// Close closes the connection; its open streams fail.
func (c *h2conn) Close() error {
	c.fail(errConnClosed)
	return nil
}

// fail breaks the connection for err: every open stream fails with it
// and the connection is closed.
func (c *h2conn) fail(err error) {
	c.mu.Lock()
	select {
	case <-c.done:
		c.mu.Unlock()
		return
	default:
	}
	close(c.done)
	if c.broken == nil {
		c.broken = err
	}
	streams := c.streams
	c.streams = make(map[uint32]*h2stream)
	c.mu.Unlock()
	c.nc.Close()
	for _, s := range streams {
		s.end(err)
	}
	c.hook()
}

// aliveLocked: the connection is not closed; c.mu is held.
func (c *h2conn) aliveLocked() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// kickLocked wakes the writer; c.mu is held.
func (c *h2conn) kickLocked() {
	select {
	case c.flush <- struct{}{}:
	default:
	}
}

// writeLoop writes what the streams queued, all of it at once.
func (c *h2conn) writeLoop() {
	var spare []byte
	for {
		select {
		case <-c.flush:
		case <-c.done:
			return
		}
		c.mu.Lock()
		buf := c.out
		c.out = spare[:0]
		closing := c.closing
		c.mu.Unlock()
		if len(buf) > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(h2WriteTimeout)) // the write's error says it
			if _, err := c.nc.Write(buf); err != nil {
				c.fail(err)
				return
			}
		}
		if closing {
			// The GOAWAY, or the last stream after one, is written.
			c.fail(errConnClosed)
			return
		}
		if cap(buf) > h2KeepBuffer {
			buf = nil // a burst's buffer is not kept
		}
		spare = buf
	}
}

// closeIfIdle closes the connection once it had no stream for
// h2IdleTimeout, with a GOAWAY, and looks again later otherwise.
func (c *h2conn) closeIfIdle() {
	c.mu.Lock()
	if !c.aliveLocked() || c.closing {
		c.mu.Unlock()
		return
	}
	if len(c.streams)+c.reserved > 0 || time.Since(c.idleSince) < h2IdleTimeout {
		c.mu.Unlock()
		time.AfterFunc(h2IdleTimeout/4, c.closeIfIdle)
		return
	}
	if c.broken == nil {
		c.broken = errConnClosed
	}
	c.out = appendGoAway(c.out, 0, http2.ErrCodeNo)
	c.closing = true
	c.kickLocked()
	c.mu.Unlock()
	c.hook()
}
