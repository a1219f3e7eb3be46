package main

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// httpLimits bound what a client of /metrics, /healthz and /readyz can
// hold: a connection that sends its request slowly, reads the answer
// slowly or stays open idle is closed, and at most conns connections are
// served at once (more wait in the kernel's accept queue). A scrape or a
// probe needs one short request; nothing legitimate comes near these.
type httpLimits struct {
	header, read, write, idle time.Duration
	conns                     int
}

var defaultHTTPLimits = httpLimits{header: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second,
	idle: 60 * time.Second, conns: 32}

// newHTTPServer serves h on ln within lim; the returned listener is the
// one to Serve.
func newHTTPServer(ln net.Listener, h http.Handler, lim httpLimits) (*http.Server, net.Listener) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: lim.header, ReadTimeout: lim.read, WriteTimeout: lim.write,
		IdleTimeout: lim.idle, MaxHeaderBytes: 16 << 10}
	return srv, limitListener(ln, lim.conns)
}

// limitListener accepts at most n connections open at once (as
// golang.org/x/net/netutil.LimitListener, which this module does not
// otherwise need).
func limitListener(ln net.Listener, n int) net.Listener {
	return &limitedListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitedListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
