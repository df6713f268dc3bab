package dispatch_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/dispatch"
)

// h2Server is an HTTPS server speaking HTTP/2 with cfg, and a client of
// NewHTTPClient trusting it.
func h2Server(t *testing.T, cfg *http.HTTP2Config, h http.HandlerFunc) (*httptest.Server, *http.Client) {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Config.HTTP2 = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{TLS: &dispatch.TLSConfig{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}})
	t.Cleanup(hc.CloseIdleConnections)
	return srv, hc
}

func post(ctx context.Context, hc *http.Client, url string, body []byte, header ...string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return hc.Transport.RoundTrip(req)
}

// TestH2Exchange: requests at once each get their own answer: status,
// headers, and bodies larger than a stream's window, read whole; request
// bodies larger than the service's windows arrive whole; the request's
// headers arrive as sent, and a User-Agent when none was.
func TestH2Exchange(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 16<<10) // 256 KiB: four of the client's windows
	sumOf := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:8]) }
	srv, hc := h2Server(t, &http.HTTP2Config{MaxReceiveBufferPerStream: 16 << 10, MaxReceiveBufferPerConnection: 64 << 10},
		func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil || r.ProtoMajor != 2 || r.Header.Get("Ttl") != "60" || r.Header.Get("Authorization") != "vapid t=x, k=y" || r.UserAgent() == "" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.Header().Set("Retry-After", "7")
			w.Header().Set("X-Body-Sum", sumOf(body))
			if r.URL.Path == "/big" {
				w.Write(big)
				return
			}
			w.WriteHeader(http.StatusTooManyRequests)
		})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			path, body := "/small", []byte("a push message")
			if i%4 == 0 {
				path, body = "/big", big
			}
			resp, err := post(context.Background(), hc, srv.URL+path, body, "Ttl", "60", "Authorization", "vapid t=x, k=y")
			if err != nil {
				t.Errorf("%s: %v", path, err)
				return
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			switch {
			case err != nil:
				t.Errorf("%s: reading the body: %v", path, err)
			case resp.Header.Get("Retry-After") != "7" || resp.Header.Get("X-Body-Sum") != sumOf(body):
				t.Errorf("%s: %s, headers %v: the request did not arrive whole", path, resp.Status, resp.Header)
			case path == "/big" && (resp.StatusCode != 200 || !bytes.Equal(got, big)):
				t.Errorf("%s: %s and %d bytes, want 200 and %d bytes", path, resp.Status, len(got), len(big))
			case path == "/small" && (resp.Status != "429 Too Many Requests" || len(got) != 0):
				t.Errorf("%s: %q and %d bytes, want 429 and none", path, resp.Status, len(got))
			}
		})
	}
	wg.Wait()
}

// TestH2StreamLimit: a connection never has more streams open than the
// service allows; the rest wait for one, or for the next connection.
func TestH2StreamLimit(t *testing.T) {
	var mu sync.Mutex
	open, most := map[string]int{}, 0
	srv, hc := h2Server(t, &http.HTTP2Config{MaxConcurrentStreams: 5}, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		open[r.RemoteAddr]++
		most = max(most, open[r.RemoteAddr])
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		open[r.RemoteAddr]--
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	if failed := burst(t, hc, srv.URL, 60); failed > 0 {
		t.Errorf("%d of 60 requests failed", failed)
	}
	if most > 5 {
		t.Errorf("%d streams open at once on one connection, the service allows 5", most)
	}
}

// TestH2Cancel: a request whose context ends while it waits for the
// answer returns at once, and the service sees its stream reset; the
// connection goes on serving.
func TestH2Cancel(t *testing.T) {
	reset := make(chan struct{}, 1)
	srv, hc := h2Server(t, nil, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-r.Context().Done()
			reset <- struct{}{}
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := post(ctx, hc, srv.URL+"/slow", []byte("x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request past its deadline returned %v", err)
	}
	select {
	case <-reset:
	case <-time.After(10 * time.Second):
		t.Fatal("the service never saw the stream reset")
	}
	resp, err := post(context.Background(), hc, srv.URL+"/fast", []byte("x"))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the next request: %v, %v", resp, err)
	}
	resp.Body.Close()
}

// TestH2GoAway: a service that shuts down gracefully answers the streams
// it took; the requests after it go on a new connection.
func TestH2GoAway(t *testing.T) {
	var dials atomic.Int64
	release := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/held" {
			<-release
		}
		w.WriteHeader(http.StatusCreated)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	hc := countingClient(srv, &dials)
	defer hc.CloseIdleConnections()

	held := make(chan error, 1)
	go func() {
		resp, err := post(context.Background(), hc, srv.URL+"/held", nil)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				err = errors.New(resp.Status)
			}
		}
		held <- err
	}()
	time.Sleep(50 * time.Millisecond) // the held request is on the connection
	// Shutdown sends GOAWAY and waits for the held stream.
	shut := make(chan struct{})
	go func() {
		defer close(shut)
		srv.Config.Shutdown(context.Background())
	}()
	time.Sleep(50 * time.Millisecond)
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("the stream the service held before its GOAWAY: %v", err)
	}
	<-shut
	if dials.Load() != 1 {
		t.Fatalf("%d dials before the restart, want 1", dials.Load())
	}
}

// TestH2ResponseHeaderLimit: an answer whose headers pass
// MaxResponseHeaderBytes fails its request, not the connection.
func TestH2ResponseHeaderLimit(t *testing.T) {
	srv, hc := h2Server(t, nil, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/huge" {
			w.Header().Set("X-Huge", strings.Repeat("h", dispatch.MaxResponseHeaderBytes))
		}
		w.WriteHeader(http.StatusCreated)
	})
	if resp, err := post(context.Background(), hc, srv.URL+"/huge", nil); err == nil {
		resp.Body.Close()
		t.Fatalf("an answer with %d bytes of headers: %s, want an error", dispatch.MaxResponseHeaderBytes, resp.Status)
	}
	resp, err := post(context.Background(), hc, srv.URL+"/small", nil)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("the next request: %v, %v", resp, err)
	}
	resp.Body.Close()
}
