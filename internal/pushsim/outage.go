package pushsim

import (
	"errors"
	"fmt"
	"net"
	"sync"
)

// OutageListener wraps a TCP listener so that tests can take the simulator off the network and
// bring it back on the same address, the way a real push service outage looks to a client:
// while down, the port is closed, so dials fail with "connection refused", and every
// connection accepted before is closed. Serve it with Server.Serve; Accept waits through an
// outage instead of failing, so serving resumes by itself on Up.
type OutageListener struct {
	addr net.Addr

	mu     sync.Mutex
	ln     net.Listener // nil while down
	conns  map[*outageConn]struct{}
	up     chan struct{} // closed while up
	closed bool
	done   chan struct{} // closed by Close
}

// NewOutageListener wraps ln, which is up. Up listens again on ln.Addr(): the port ln got,
// also when it was opened on port 0.
func NewOutageListener(ln net.Listener) *OutageListener {
	up := make(chan struct{})
	close(up)
	return &OutageListener{
		addr:  ln.Addr(),
		ln:    ln,
		conns: make(map[*outageConn]struct{}),
		up:    up,
		done:  make(chan struct{}),
	}
}

// Down closes the port and every accepted connection. It is a no-op while down.
func (l *OutageListener) Down() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return net.ErrClosed
	}
	if l.ln == nil {
		return nil
	}
	err := l.ln.Close()
	l.ln = nil
	l.up = make(chan struct{})
	for c := range l.conns {
		c.Conn.Close()
		delete(l.conns, c)
	}
	if err != nil {
		return fmt.Errorf("close push simulator listener: %w", err)
	}
	return nil
}

// Up listens on the same address again. It is a no-op while up.
func (l *OutageListener) Up() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return net.ErrClosed
	}
	if l.ln != nil {
		return nil
	}
	ln, err := net.Listen(l.addr.Network(), l.addr.String())
	if err != nil {
		return fmt.Errorf("listen again on %s: %w", l.addr, err)
	}
	l.ln = ln
	close(l.up)
	return nil
}

// Accept waits for the next connection, through outages, until Close.
func (l *OutageListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		ln, up := l.ln, l.up
		l.mu.Unlock()
		if ln == nil {
			select {
			case <-up:
				continue
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		c, err := ln.Accept()
		if err != nil {
			l.mu.Lock()
			replaced := l.ln != ln // Down (and maybe Up) happened meanwhile
			closed := l.closed
			l.mu.Unlock()
			if replaced && !closed && errors.Is(err, net.ErrClosed) {
				continue
			}
			return nil, err
		}
		l.mu.Lock()
		if l.ln != ln { // went down while accepting: this conn must not live
			l.mu.Unlock()
			c.Close()
			continue
		}
		oc := &outageConn{Conn: c, l: l}
		l.conns[oc] = struct{}{}
		l.mu.Unlock()
		return oc, nil
	}
}

// Close closes the listener for good, and every accepted connection.
func (l *OutageListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	close(l.done)
	var err error
	if l.ln != nil {
		err = l.ln.Close()
	}
	for c := range l.conns {
		c.Conn.Close()
		delete(l.conns, c)
	}
	return err
}

// Addr is the address listened on, also while down.
func (l *OutageListener) Addr() net.Addr { return l.addr }

// outageConn forgets itself when closed.
type outageConn struct {
	net.Conn
	l    *OutageListener
	once sync.Once
}

func (c *outageConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
