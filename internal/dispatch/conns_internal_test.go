package dispatch

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// TestConnectedWaitsForTheFirstDial: a send to a push service with no
// connection waits for the dial before it encrypts; once connected, or
// once the dial failed, it goes on at once.
func TestConnectedWaitsForTheFirstDial(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	entered, release := make(chan struct{}, 8), make(chan struct{})
	var dials atomic.Int64
	d := &net.Dialer{}
	hc := NewHTTPClient(HTTPConfig{
		TLS: &TLSConfig{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			entered <- struct{}{}
			<-release
			return d.DialContext(ctx, network, addr)
		},
	})
	defer hc.CloseIdleConnections()
	c := hc.Transport.(*conns)
	u, _ := url.Parse(srv.URL + "/push/1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	done := make(chan struct{})
	go func() { defer close(done); c.connected(ctx, u) }()
	<-entered
	select {
	case <-done:
		t.Fatal("connected returned while the first dial was still under way")
	default:
	}
	close(release)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("connected did not return once the dial ended")
	}
	c.connected(ctx, u) // a connection is live: at once, no dial
	if n := dials.Load(); n != 1 {
		t.Errorf("%d dials, want 1", n)
	}

	// A service that cannot be reached: connected returns when the dial
	// fails, and the send's RoundTrip reports the error.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed, _ := url.Parse("https://" + ln.Addr().String() + "/push/1")
	ln.Close()
	c.connected(ctx, closed)
	if ctx.Err() != nil {
		t.Fatal("connected waited out the context for a dial that failed")
	}
	// Plain HTTP goes through the Transport: nothing to wait for.
	plain, _ := url.Parse("http://" + ln.Addr().String() + "/push/1")
	c.connected(ctx, plain)
}
