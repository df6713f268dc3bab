package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"
)

// h2stream is one request on an h2conn, and the body of its answer.
type h2stream struct {
	c   *h2conn
	id  uint32
	ctx context.Context
	// sendWindow and sent are c.mu's: what the service lets the stream
	// send, and whether its END_STREAM is queued.
	sendWindow int32
	sent       bool

	// got is closed once resp or err is set (answer, under bmu);
	// gotHeaders is the read loop's.
	got        chan struct{}
	resp       *http.Response
	err        error
	gotHeaders bool

	// bmu guards the answer and its body as it arrives, until read.
	bmu        sync.Mutex
	answered   bool
	buf        []byte
	eof        bool  // the service ended the stream
	berr       error // the stream broke under its body
	closed     bool  // the body's reader closed it
	recvWindow int32 // what the service may still send
	unacked    int32 // bytes read and not yet given back
	ready      chan struct{}
}

// maxRequestBody bounds a request body the client buffers; a push
// message is one record of 4,096 bytes.
const maxRequestBody = 1 << 20

var bodyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// RoundTrip sends req on a stream Reserve took and returns the answer;
// its body streams as it arrives. An error wrapping errUnprocessed means
// the service never saw the request.
func (c *h2conn) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	var data []byte
	if req.Body != nil && req.Body != http.NoBody {
		buf := bodyBufs.Get().(*[]byte)
		defer bodyBufs.Put(buf)
		var err error
		data, err = readBody(req.Body, req.ContentLength, (*buf)[:0])
		req.Body.Close()
		if err != nil {
			c.unreserve()
			return nil, err
		}
		*buf = data[:0]
	}
	s := &h2stream{c: c, ctx: ctx, got: make(chan struct{}), ready: make(chan struct{}, 1), recvWindow: h2StreamWindow}
	c.mu.Lock()
	c.reserved--
	if c.broken != nil {
		err := c.broken
		c.mu.Unlock()
		c.hook()
		return nil, fmt.Errorf("%w: %w", errUnprocessed, err)
	}
	if err := c.encodeLocked(req, int64(len(data))); err != nil {
		c.mu.Unlock()
		c.hook()
		return nil, err
	}
	s.id = c.nextID
	c.nextID += 2
	if c.nextID > 1<<31-1 {
		c.broken = errors.New("http2: stream ids used up")
	}
	c.out = appendHeaders(c.out, s.id, c.hbuf.b, len(data) == 0, int(c.maxFrame))
	s.sent = len(data) == 0
	s.sendWindow = c.initWindow
	c.streams[s.id] = s
	data = c.sendLocked(s, data)
	c.kickLocked()
	c.mu.Unlock()
	for len(data) > 0 {
		// The service's windows are full: wait for them to open. A
		// WINDOW_UPDATE may have come since the last try, with nobody
		// waiting: try again under the lock before waiting.
		c.mu.Lock()
		if _, open := c.streams[s.id]; open {
			data = c.sendLocked(s, data)
			c.kickLocked()
		}
		if len(data) == 0 {
			c.mu.Unlock()
			break
		}
		if c.windows == nil {
			c.windows = make(chan struct{})
		}
		windows := c.windows
		c.mu.Unlock()
		select {
		case <-windows:
		case <-s.got:
			data = nil // answered (or failed) before the body was sent
		case <-ctx.Done():
			c.reset(s, http2.ErrCodeCancel)
			return nil, ctx.Err()
		}
	}
	select {
	case <-s.got:
	case <-ctx.Done():
		c.reset(s, http2.ErrCodeCancel)
		return nil, ctx.Err()
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.resp, nil
}

// unreserve gives back a reservation RoundTrip did not use.
func (c *h2conn) unreserve() {
	c.mu.Lock()
	c.reserved--
	c.mu.Unlock()
	c.hook()
}

// readBody reads a request body of n bytes (0 or less: as many as it has,
// up to maxRequestBody) into buf.
func readBody(r io.Reader, n int64, buf []byte) ([]byte, error) {
	if n > maxRequestBody {
		return nil, fmt.Errorf("http2: request body of %d bytes, limit %d", n, maxRequestBody)
	}
	if n > 0 {
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("http2: request body: %w", err)
		}
		return buf, nil
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if len(buf) > maxRequestBody {
			return nil, fmt.Errorf("http2: request body over %d bytes", maxRequestBody)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("http2: request body: %w", err)
		}
	}
}

// sendLocked queues as much of data as the windows let through and
// returns the rest; the last frame ends the stream.
func (c *h2conn) sendLocked(s *h2stream, data []byte) []byte {
	for len(data) > 0 {
		n := min(len(data), int(c.maxFrame), int(c.sendWindow), int(s.sendWindow))
		if n <= 0 {
			return data
		}
		end := n == len(data)
		c.out = appendData(c.out, s.id, data[:n], end)
		c.sendWindow -= int32(n)
		s.sendWindow -= int32(n)
		s.sent = end
		data = data[n:]
	}
	return data
}

// reset ends s from the client's side: RST_STREAM, unless it had ended.
func (c *h2conn) reset(s *h2stream, code http2.ErrCode) {
	c.mu.Lock()
	if c.streams[s.id] != s {
		c.mu.Unlock()
		return
	}
	c.removeLocked(s)
	if c.aliveLocked() {
		c.out = appendRSTStream(c.out, s.id, code)
		c.kickLocked()
	}
	c.mu.Unlock()
	s.end(errStreamCancelled)
	c.hook()
}

var errStreamCancelled = errors.New("http2: stream cancelled")

// removeLocked takes s off the open streams; c.mu is held.
func (c *h2conn) removeLocked(s *h2stream) {
	delete(c.streams, s.id)
	if len(c.streams)+c.reserved == 0 {
		c.idleSince = time.Now()
		if c.broken != nil && !c.closing {
			// After a GOAWAY: the last stream is done.
			c.closing = true
			c.kickLocked()
		}
	}
}

// answer hands RoundTrip the response, once.
func (s *h2stream) answer(resp *http.Response) {
	s.bmu.Lock()
	if !s.answered {
		s.answered, s.resp = true, resp
		close(s.got)
	}
	s.bmu.Unlock()
}

// end fails s with err: its RoundTrip if no answer came, or else its body.
func (s *h2stream) end(err error) {
	s.bmu.Lock()
	switch {
	case !s.answered:
		s.answered, s.err = true, err
		close(s.got)
	case !s.eof && s.berr == nil:
		s.berr = err
	}
	s.bmu.Unlock()
	s.signal()
}

func (s *h2stream) signal() {
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Read reads the answer's body.
func (s *h2stream) Read(p []byte) (int, error) {
	for {
		s.bmu.Lock()
		if s.closed {
			s.bmu.Unlock()
			return 0, errBodyClosed
		}
		if len(s.buf) > 0 {
			n := copy(p, s.buf)
			s.buf = s.buf[n:]
			s.unacked += int32(n)
			var give int32
			if s.unacked >= h2StreamWindow/2 && !s.eof && s.berr == nil {
				give, s.unacked = s.unacked, 0
				s.recvWindow += give
			}
			s.bmu.Unlock()
			if give > 0 {
				s.c.windowUpdate(s, give)
			}
			return n, nil
		}
		eof, err := s.eof, s.berr
		s.bmu.Unlock()
		switch {
		case eof:
			return 0, io.EOF
		case err != nil:
			return 0, err
		}
		select {
		case <-s.ready:
		case <-s.ctx.Done():
			s.c.reset(s, http2.ErrCodeCancel)
			return 0, s.ctx.Err()
		}
	}
}

// Close drops the rest of the body; the stream is reset if it had not
// ended.
func (s *h2stream) Close() error {
	s.bmu.Lock()
	ended := s.eof || s.berr != nil
	s.buf, s.closed = nil, true
	s.bmu.Unlock()
	if !ended {
		s.c.reset(s, http2.ErrCodeCancel)
	}
	return nil
}

// windowUpdate gives the service back n bytes of s's window.
func (c *h2conn) windowUpdate(s *h2stream, n int32) {
	c.mu.Lock()
	if c.aliveLocked() && c.streams[s.id] == s {
		c.out = appendWindowUpdate(c.out, s.id, uint32(n))
		c.kickLocked()
	}
	c.mu.Unlock()
}
