package dispatch

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"golang.org/x/net/http2"
)

// readLoop reads the service's frames until the connection breaks.
func (c *h2conn) readLoop() {
	for {
		f, err := c.fr.ReadFrame()
		if err == nil {
			err = c.frame(f)
		}
		if err != nil {
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				c.mu.Lock()
				if c.aliveLocked() {
					c.out = appendGoAway(c.out, 0, http2.ErrCode(ce))
					c.closing = true
					c.kickLocked()
				}
				c.mu.Unlock()
			}
			c.fail(fmt.Errorf("http2: connection to the push service: %w", err))
			return
		}
	}
}

// frame takes one frame; an error breaks the connection.
func (c *h2conn) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		return c.headers(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded(), f.StreamEnded())
	case *http2.ContinuationFrame:
		return c.headers(f.StreamID, f.HeaderBlockFragment(), f.HeadersEnded(), false)
	case *http2.DataFrame:
		return c.data(f)
	case *http2.RSTStreamFrame:
		c.rstStream(f.StreamID, f.ErrCode)
	case *http2.SettingsFrame:
		return c.settings(f)
	case *http2.WindowUpdateFrame:
		return c.windowGrew(f.StreamID, f.Increment)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.mu.Lock()
			c.out = appendPingAck(c.out, f.Data)
			c.kickLocked()
			c.mu.Unlock()
		}
	case *http2.GoAwayFrame:
		c.goAway(f.LastStreamID)
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // push is off (SETTINGS)
	}
	return nil // PRIORITY and unknown frames say nothing to a client
}

// headers decodes a header block fragment; the block, once ended, is the
// answer of its stream, informational (1xx) ones aside, or its trailers.
// Every block is decoded, a stream's that was reset too: the decoder's
// table follows the service's encoder.
func (c *h2conn) headers(id uint32, frag []byte, ended, endStream bool) error {
	if _, err := c.hdec.Write(frag); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	if endStream {
		c.fields.endStream = true
	}
	if !ended {
		return nil
	}
	if err := c.hdec.Close(); err != nil {
		return http2.ConnectionError(http2.ErrCodeCompression)
	}
	h := c.fields
	c.fields.reset()
	c.mu.Lock()
	s := c.streams[id]
	c.mu.Unlock()
	if s == nil {
		return nil
	}
	switch {
	case h.over:
		c.resetWith(s, http2.ErrCodeCancel, fmt.Errorf("http2: response headers over %d bytes", MaxResponseHeaderBytes))
		return nil
	case s.gotHeaders:
		// Trailers: nothing a sender reads.
		if !h.endStream {
			c.resetWith(s, http2.ErrCodeProtocol, errors.New("http2: trailers without END_STREAM"))
			return nil
		}
		c.endOfStream(s)
		return nil
	}
	code, err := strconv.Atoi(h.status)
	if err != nil || h.invalid || code < 100 || code > 999 {
		c.resetWith(s, http2.ErrCodeProtocol, errors.New("http2: malformed response headers"))
		return nil
	}
	if code < 200 {
		if h.endStream {
			c.resetWith(s, http2.ErrCodeProtocol, errors.New("http2: stream ended on an informational answer"))
		}
		return nil // 1xx: the answer is still to come
	}
	s.gotHeaders = true
	if h.header == nil {
		h.header = http.Header{}
	}
	resp := &http.Response{Status: statusLine(code), StatusCode: code, Proto: "HTTP/2.0", ProtoMajor: 2,
		Header: h.header, ContentLength: -1, Body: s}
	if cl := h.header["Content-Length"]; len(cl) == 1 {
		if n, err := strconv.ParseInt(cl[0], 10, 64); err == nil && n >= 0 {
			resp.ContentLength = n
		}
	}
	if h.endStream {
		resp.Body, resp.ContentLength = http.NoBody, 0
		c.endOfStream(s)
	}
	s.answer(resp)
	return nil
}

// statusLines are the Status of each response code that has a name.
var statusLines = func() map[int]string {
	m := make(map[int]string)
	for code := 100; code < 600; code++ {
		if t := http.StatusText(code); t != "" {
			m[code] = strconv.Itoa(code) + " " + t
		}
	}
	return m
}()

func statusLine(code int) string {
	if s, ok := statusLines[code]; ok {
		return s
	}
	return strconv.Itoa(code)
}

// endOfStream: the service ended s. A request the service answered before
// its body was all sent is reset, so the stream closes on both sides.
func (c *h2conn) endOfStream(s *h2stream) {
	s.bmu.Lock()
	s.eof = true
	s.bmu.Unlock()
	s.signal()
	c.mu.Lock()
	if c.streams[s.id] == s {
		c.removeLocked(s)
		if !s.sent && c.aliveLocked() {
			c.out = appendRSTStream(c.out, s.id, http2.ErrCodeCancel)
			c.kickLocked()
		}
	}
	c.mu.Unlock()
	c.hook()
}

// resetWith resets s for err, which its RoundTrip or body reader gets.
func (c *h2conn) resetWith(s *h2stream, code http2.ErrCode, err error) {
	s.end(err)
	c.reset(s, code)
}

// data takes a DATA frame: the connection's window is given back at once
// (each stream's bounds what is buffered), the stream's as its body is
// read.
func (c *h2conn) data(f *http2.DataFrame) error {
	n := int32(f.Length)
	c.mu.Lock()
	if c.recvUnacked += n; c.recvUnacked >= h2ConnWindow/4 {
		c.out = appendWindowUpdate(c.out, 0, uint32(c.recvUnacked))
		c.recvUnacked = 0
		c.kickLocked()
	}
	s := c.streams[f.StreamID]
	c.mu.Unlock()
	if s == nil {
		return nil // reset or ended: dropped
	}
	if !s.gotHeaders {
		c.resetWith(s, http2.ErrCodeProtocol, errors.New("http2: DATA before the response headers"))
		return nil
	}
	data := f.Data()
	s.bmu.Lock()
	if s.recvWindow -= n; s.recvWindow < 0 {
		s.bmu.Unlock()
		c.resetWith(s, http2.ErrCodeFlowControl, errors.New("http2: the push service overran the stream's window"))
		return nil
	}
	// Padding counts against the window and is never read: given back
	// with the bytes read.
	s.unacked += n - int32(len(data))
	if !s.closed {
		s.buf = append(s.buf, data...)
	}
	s.bmu.Unlock()
	s.signal()
	if f.StreamEnded() {
		c.endOfStream(s)
	}
	return nil
}

// rstStream: the service reset a stream. One it refused was never
// processed.
func (c *h2conn) rstStream(id uint32, code http2.ErrCode) {
	c.mu.Lock()
	s := c.streams[id]
	if s != nil {
		c.removeLocked(s)
	}
	c.mu.Unlock()
	if s == nil {
		return
	}
	if code == http2.ErrCodeRefusedStream {
		s.end(fmt.Errorf("%w: stream refused", errUnprocessed))
	} else {
		s.end(fmt.Errorf("http2: stream reset by the push service: %v", code))
	}
	c.hook()
}

// settings applies the service's settings and acknowledges them.
func (c *h2conn) settings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	first := !c.sawSettings
	c.sawSettings = true
	sawMax := false
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams, sawMax = int(min(s.Val, 1<<20)), true
		case http2.SettingInitialWindowSize:
			delta := int32(s.Val) - c.initWindow
			for _, st := range c.streams {
				st.sendWindow += delta
			}
			c.initWindow = int32(s.Val)
		case http2.SettingMaxFrameSize:
			c.maxFrame = s.Val
		case http2.SettingMaxHeaderListSize:
			c.maxHeaderList = s.Val
		case http2.SettingHeaderTableSize:
			c.henc.SetMaxDynamicTableSizeLimit(s.Val)
		}
		return nil
	})
	if err != nil {
		c.mu.Unlock()
		return err
	}
	if first && !sawMax {
		c.maxStreams = h2DefaultStreams
	}
	c.out = appendSettingsAck(c.out)
	c.kickLocked()
	c.windowsGrewLocked()
	c.mu.Unlock()
	c.hook() // more streams, perhaps
	return nil
}

// windowGrew takes a WINDOW_UPDATE.
func (c *h2conn) windowGrew(id, incr uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id == 0 {
		if int64(c.sendWindow)+int64(incr) > 1<<31-1 {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.sendWindow += int32(incr)
	} else if s := c.streams[id]; s != nil {
		s.sendWindow += int32(min(incr, 1<<31-1-uint32(max(s.sendWindow, 0))))
	}
	c.windowsGrewLocked()
	return nil
}

func (c *h2conn) windowsGrewLocked() {
	if c.windows != nil {
		close(c.windows)
		c.windows = nil
	}
}

// goAway: the service takes no new stream, and does not process those
// after last; the connection closes once the others are done.
func (c *h2conn) goAway(last uint32) {
	c.mu.Lock()
	if c.broken == nil {
		c.broken = errors.New("http2: the push service sent GOAWAY")
	}
	var refused []*h2stream
	for id, s := range c.streams {
		if id > last {
			refused = append(refused, s)
			delete(c.streams, id)
		}
	}
	if len(c.streams)+c.reserved == 0 && !c.closing {
		c.closing = true
		c.kickLocked()
	}
	c.mu.Unlock()
	for _, s := range refused {
		s.end(fmt.Errorf("%w: GOAWAY", errUnprocessed))
	}
	c.hook()
}
