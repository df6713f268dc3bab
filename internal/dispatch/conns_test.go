package dispatch_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/dispatch"
)

// burst sends n requests at once through hc and returns how many failed.
func burst(t *testing.T, hc *http.Client, url string, n int) int {
	t.Helper()
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, url, http.NoBody)
			resp, err := hc.Transport.RoundTrip(req)
			if err != nil {
				failed.Add(1)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}

// countingDial dials as a plain net.Dialer, counting its dials.
func countingDial(dials *atomic.Int64) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
}

// countingClient is NewHTTPClient trusting srv, counting its dials.
func countingClient(srv *httptest.Server, dials *atomic.Int64) *http.Client {
	return dispatch.NewHTTPClient(dispatch.HTTPConfig{
		TLS:         &dispatch.TLSConfig{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs},
		DialContext: countingDial(dials),
	})
}

// TestBurstDialsOnce: a burst of sends to an HTTP/2 push service dials a
// connection or two, not one per send. Through http.Transport, 300 sends
// at once to a service not yet connected set off 519 TLS handshakes and
// waited 0.73 s for them; 300 to a connection of 250 streams, 50.
func TestBurstDialsOnce(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("request over %s, want HTTP/2", r.Proto)
		}
		time.Sleep(20 * time.Millisecond) // the push service's latency
		w.WriteHeader(http.StatusCreated)
	}))
	srv.EnableHTTP2 = true // 250 streams a connection
	srv.StartTLS()
	defer srv.Close()
	var dials atomic.Int64
	hc := countingClient(srv, &dials)
	defer hc.CloseIdleConnections()

	for _, c := range []struct {
		name     string
		n        int
		maxDials int64
	}{
		// The first dial, and the next once a quarter of its 250
		// streams is left (a third at most).
		{"cold, 300 at once", 300, 3},
		// Two connections of 250 streams: the third dialled ahead.
		{"warm, 600 at once", 600, 2},
		{"warm, 300 at once", 300, 1},
	} {
		dials.Store(0)
		if failed := burst(t, hc, srv.URL, c.n); failed > 0 {
			t.Errorf("%s: %d of %d sends failed", c.name, failed, c.n)
		}
		if got := dials.Load(); got > c.maxDials {
			t.Errorf("%s: %d dials, want at most %d", c.name, got, c.maxDials)
		}
	}
}

// TestHTTP1Service: a push service that offers only HTTP/1.1 is sent to
// through the Transport's pool.
func TestHTTP1Service(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv.StartTLS()
	defer srv.Close()
	var dials atomic.Int64
	hc := countingClient(srv, &dials)
	defer hc.CloseIdleConnections()
	if failed := burst(t, hc, srv.URL, 20); failed > 0 {
		t.Errorf("%d of 20 sends to an HTTP/1.1 service failed", failed)
	}
}

// TestDialFailureFails: a service that cannot be reached fails the sends
// waiting for it, and the next send dials again.
func TestDialFailureFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + ln.Addr().String()
	ln.Close()
	var dials atomic.Int64
	hc := dispatch.NewHTTPClient(dispatch.HTTPConfig{DialContext: countingDial(&dials)})
	for round := 1; round <= 2; round++ {
		if failed := burst(t, hc, url, 10); failed != 10 {
			t.Errorf("round %d: %d of 10 sends to a closed port failed, want 10", round, failed)
		}
	}
	// Sends that arrive after the dial failed dial again: a dial to a
	// closed port fails in microseconds, and under the race detector on a
	// busy machine a round's goroutines start spread out (6 dials once).
	// A dial per send would be 20.
	if got := dials.Load(); got < 2 || got > 10 {
		t.Errorf("%d dials for two rounds of 10 sends to a closed port, want at least one a round and at most one for every two sends", got)
	}
	// A send whose context ends while it waits returns at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, http.NoBody)
	if _, err := hc.Transport.RoundTrip(req); !errors.Is(err, context.Canceled) && err == nil {
		t.Errorf("a cancelled send returned %v", err)
	}
}
