package testenv

import (
	"crypto/tls"
	"testing"
	"testing/synctest"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestDialTLSCloseDoesNotWaitForThePeer: closing a DialTLS connection
// whose peer is writing, not reading (kfake answering a fetch the closing
// client gave up on), takes none of the bubble's clock and fails the
// peer's write. A plain tls.Conn waits for its close_notify to be read,
// up to a write deadline that kgo may clear meanwhile (DialTLS).
func TestDialTLSCloseDoesNotWaitForThePeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pki := NewPKI(t)
		e := &Env{tb: t, VN: new(kfake.VirtualNetwork), PKI: pki, clientTLS: pki.ClientConfig(t)}
		l, err := e.VN.Listen("tcp", "127.0.0.1:9092")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		peer := make(chan error, 1)
		go func() {
			raw, err := l.Accept()
			if err != nil {
				peer <- err
				return
			}
			srv := tls.Server(raw, e.PKI.ServerConfig(t, true))
			defer srv.Close()
			_, err = srv.Write([]byte("a response nobody reads"))
			peer <- err
		}()

		conn, err := e.DialTLS(t.Context(), "tcp", "127.0.0.1:9092")
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.(resetOnClose).Handshake(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := conn.Close(); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("Close took %s of the bubble's clock, want none: it waited for the peer to read", d)
		}
		if err := <-peer; err == nil {
			t.Error("the peer's write went through on a closed connection")
		}
	})
}
