package pushsim_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/tierpush/tierpush/internal/pushsim"
)

// TestOutageListener takes a serving simulator off the network and back:
// while down, dials are refused and kept-alive connections are gone; after
// Up the same address serves again.
func TestOutageListener(t *testing.T) {
	s, err := pushsim.New(pushsim.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ol := pushsim.NewOutageListener(ln)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ol) }()
	addr := ol.Addr().String()
	url := "http://" + addr + "/healthz"
	client := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	get := func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	if err := get(); err != nil {
		t.Fatalf("before the outage: %v", err)
	}

	if err := ol.Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if err := ol.Down(); err != nil {
		t.Fatalf("Down twice: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, 5*time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial while down: %v, want connection refused", err)
	}
	// The client's kept-alive connection was closed too: the request needs
	// a new dial, which is refused.
	if err := get(); err == nil {
		t.Error("request while down succeeded")
	}
	if got := ol.Addr().String(); got != addr {
		t.Errorf("Addr while down = %s, want %s", got, addr)
	}

	if err := ol.Up(); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if err := ol.Up(); err != nil {
		t.Fatalf("Up twice: %v", err)
	}
	if err := get(); err != nil {
		t.Fatalf("after the outage: %v", err)
	}

	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve after Close = %v, want nil", err)
	}
	if err := ol.Up(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Up after Close = %v, want net.ErrClosed", err)
	}
}

// TestOutageListenerClosesWhileDown: Close during an outage ends Serve.
func TestOutageListenerClosesWhileDown(t *testing.T) {
	s, err := pushsim.New(pushsim.DefaultConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ol := pushsim.NewOutageListener(ln)
	served := make(chan error, 1)
	go func() { served <- s.Serve(ol) }()
	if err := ol.Down(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve still running 10s after Close")
	}
}
