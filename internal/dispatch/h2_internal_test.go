package dispatch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// scriptedService is the service's end of an h2conn, played by the test
// frame by frame.
type scriptedService struct {
	t      *testing.T
	fr     *http2.Framer
	frames chan http2.Frame // what the client wrote, copied
	enc    *hpack.Encoder
	ebuf   bytes.Buffer
}

// newScripted connects an h2conn to a scripted service, which sends
// settings first.
func newScripted(t *testing.T, settings ...http2.Setting) (*h2conn, *scriptedService) {
	t.Helper()
	cli, srv := net.Pipe()
	s := &scriptedService{t: t, fr: http2.NewFramer(srv, srv), frames: make(chan http2.Frame, 64)}
	s.enc = hpack.NewEncoder(&s.ebuf)
	go func() {
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(srv, preface); err != nil {
			return
		}
		for {
			f, err := s.fr.ReadFrame()
			if err != nil {
				close(s.frames)
				return
			}
			s.frames <- copyFrame(f)
		}
	}()
	wrote := make(chan error, 1)
	go func() { wrote <- s.fr.WriteSettings(settings...) }()
	c, err := newH2Conn(context.Background(), cli, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c, s
}

// copyFrame keeps what the tests read of a frame past the next ReadFrame.
func copyFrame(f http2.Frame) http2.Frame {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		h := *f
		return &headersCopy{HeadersFrame: h, block: bytes.Clone(f.HeaderBlockFragment())}
	case *http2.DataFrame:
		return &http2.DataFrame{FrameHeader: f.FrameHeader}
	}
	return f
}

type headersCopy struct {
	http2.HeadersFrame
	block []byte
}

// next returns the next frame of type T the client wrote, skipping others.
func next[T http2.Frame](s *scriptedService) T {
	s.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				s.t.Fatal("the client closed the connection")
			}
			if f, ok := f.(T); ok {
				return f
			}
		case <-timeout:
			var zero T
			s.t.Fatalf("no %T from the client", zero)
		}
	}
}

func (s *scriptedService) answer(id uint32, status string) {
	s.ebuf.Reset()
	s.enc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
	if err := s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: s.ebuf.Bytes(), EndHeaders: true, EndStream: true}); err != nil {
		s.t.Error(err)
	}
}

func pushRequest(ctx context.Context, path string) *http.Request {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://push.example"+path, strings.NewReader("message"))
	req.Header["Authorization"] = []string{"vapid t=" + strings.Repeat("j", 300) + ", k=" + strings.Repeat("k", 87)}
	req.Header["Ttl"] = []string{"60"}
	return req
}

// roundTrip sends req on c in the background.
func roundTrip(c *h2conn, req *http.Request) chan error {
	done := make(chan error, 1)
	if err := c.Reserve(); err != nil {
		done <- err
		return done
	}
	go func() {
		resp, err := c.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				err = errors.New(resp.Status)
			}
		}
		done <- err
	}()
	return done
}

// TestH2PathNeverIndexed: a request's path, the subscription's capability
// URL, is sent as a never-indexed literal every time; the Authorization
// value is indexed once and then costs a byte or two.
func TestH2PathNeverIndexed(t *testing.T) {
	c, s := newScripted(t)
	dec := hpack.NewDecoder(4096, nil)
	var sizes []int
	for i, path := range []string{"/push/first", "/push/second"} {
		done := roundTrip(c, pushRequest(context.Background(), path))
		h := next[*headersCopy](s)
		fields, err := dec.DecodeFull(h.block)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fields {
			if f.Name == ":path" && (!f.Sensitive || f.Value != path) {
				t.Errorf("request %d: :path %q sent indexable (sensitive %v)", i+1, f.Value, f.Sensitive)
			}
		}
		sizes = append(sizes, len(h.block))
		s.answer(h.StreamID, "201")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if sizes[1] > sizes[0]-300 {
		t.Errorf("header blocks of %d and %d bytes: the second did not take the Authorization from the table", sizes[0], sizes[1])
	}
}

// TestH2GoAwayUnprocessed: after a GOAWAY, the streams past its last one
// fail as unprocessed (conns sends them on another connection), those
// before it are answered, and the connection takes no new stream and
// closes once they are done.
func TestH2GoAwayUnprocessed(t *testing.T) {
	c, s := newScripted(t)
	var done []chan error
	var ids []uint32
	for i := range 3 {
		done = append(done, roundTrip(c, pushRequest(context.Background(), "/push/"+string(rune('a'+i)))))
		ids = append(ids, next[*headersCopy](s).StreamID)
	}
	s.fr.WriteGoAway(ids[1], http2.ErrCodeNo, nil)
	if err := <-done[2]; !errors.Is(err, errUnprocessed) {
		t.Errorf("the stream after the GOAWAY's last: %v, want unprocessed", err)
	}
	for c.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if c.Reserve() == nil {
		t.Error("a connection that had a GOAWAY took a new stream")
	}
	s.answer(ids[0], "201")
	s.answer(ids[1], "201")
	for i := range 2 {
		if err := <-done[i]; err != nil {
			t.Errorf("stream %d before the GOAWAY's last: %v", ids[i], err)
		}
	}
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Error("the connection stayed open after its last stream")
	}
}

// TestH2RefusedStream: a stream the service refuses fails as unprocessed;
// one it resets otherwise fails as processed.
func TestH2RefusedStream(t *testing.T) {
	c, s := newScripted(t)
	refused := roundTrip(c, pushRequest(context.Background(), "/push/refused"))
	s.fr.WriteRSTStream(next[*headersCopy](s).StreamID, http2.ErrCodeRefusedStream)
	if err := <-refused; !errors.Is(err, errUnprocessed) {
		t.Errorf("a refused stream: %v, want unprocessed", err)
	}
	reset := roundTrip(c, pushRequest(context.Background(), "/push/reset"))
	s.fr.WriteRSTStream(next[*headersCopy](s).StreamID, http2.ErrCodeInternal)
	if err := <-reset; err == nil || errors.Is(err, errUnprocessed) {
		t.Errorf("a stream reset with INTERNAL_ERROR: %v, want an error, not unprocessed", err)
	}
	if c.InFlight() != 0 {
		t.Errorf("%d streams in flight after both ended", c.InFlight())
	}
}

// TestH2SendWindow: a body larger than the service's window waits for its
// WINDOW_UPDATE and is sent whole after it.
func TestH2SendWindow(t *testing.T) {
	c, s := newScripted(t, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 100})
	req := pushRequest(context.Background(), "/push/big")
	body := bytes.Repeat([]byte("b"), 250)
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	done := roundTrip(c, req)
	id := next[*headersCopy](s).StreamID
	got := 0
	for got < 250 {
		d := next[*http2.DataFrame](s)
		got += int(d.Length)
		if got > 250 || (got%100 != 0 && !d.StreamEnded()) {
			t.Fatalf("%d bytes sent against windows of 100", got)
		}
		if !d.StreamEnded() {
			s.fr.WriteWindowUpdate(id, 100)
		}
	}
	s.answer(id, "201")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHeaderFieldsValues: the value slices that share one backing array
// stay apart; a repeated field keeps its values in order, and appending
// to one field's slice does not change another's.
func TestHeaderFieldsValues(t *testing.T) {
	var h headerFields
	for _, f := range []hpack.HeaderField{
		{Name: ":status", Value: "201"},
		{Name: "location", Value: "/m/1"},
		{Name: "ttl", Value: "60"},
		{Name: "x-extra", Value: "a"},
		{Name: "date", Value: "d"},
		{Name: "x-extra", Value: "b"},
		{Name: "content-length", Value: "0"},
		{Name: "retry-after", Value: "5"},
	} {
		h.add(f)
	}
	if h.invalid || h.over || h.status != "201" {
		t.Fatalf("status %q, invalid %v, over %v", h.status, h.invalid, h.over)
	}
	_ = append(h.header["Location"], "clobber")
	want := map[string][]string{
		"Location": {"/m/1"}, "Ttl": {"60"}, "X-Extra": {"a", "b"}, "Date": {"d"},
		"Content-Length": {"0"}, "Retry-After": {"5"},
	}
	if len(h.header) != len(want) {
		t.Fatalf("header %v, want %v", h.header, want)
	}
	for k, vs := range want {
		if strings.Join(h.header[k], ",") != strings.Join(vs, ",") {
			t.Errorf("%s: %q, want %q", k, h.header[k], vs)
		}
	}
}
