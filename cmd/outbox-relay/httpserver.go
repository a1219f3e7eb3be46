package main

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// httpLimits bound what a client of /metrics, /healthz and /readyz can
// hold, so that a probe is answered at once whatever other clients do (a
// liveness probe that times out restarts a healthy relay):
//
//   - at most conns connections are open at once (memory: a goroutine and
//     two small buffers each), but a new connection never waits for room.
//     At the cap, accepting it closes a connection waiting on its client
//     (idle after a request, or still sending its request: slowloris) of
//     the client host holding the most connections, the one that has
//     waited longest; failing those, one whose request has been served for
//     longer than busyGrace (a client reading its answer slowly). Only when
//     every connection is in a request younger than busyGrace is the new
//     one refused (closed), and requests here take milliseconds. A probe
//     (the kubelet, from its node) or a scrape sends its request at once:
//     it is neither the one that waited longest nor, under a flood from
//     another host, of the host holding the most;
//   - a connection that sends its request headers slowly (header), its
//     request slowly (read), reads the answer slowly (write) or stays open
//     idle (idle) is closed.
//
// A scrape or a probe needs one short request; nothing legitimate comes
// near these.
type httpLimits struct {
	header, read, write, idle time.Duration
	conns                     int
	busyGrace                 time.Duration
}

var defaultHTTPLimits = httpLimits{header: 2 * time.Second, read: 5 * time.Second, write: 10 * time.Second,
	idle: 10 * time.Second, conns: 32, busyGrace: time.Second}

// newHTTPServer serves h on ln within lim; the returned listener is the
// one to Serve.
func newHTTPServer(ln net.Listener, h http.Handler, lim httpLimits) (*http.Server, net.Listener) {
	l := &roomListener{Listener: ln, max: lim.conns, busyGrace: lim.busyGrace, conns: map[string]*roomConn{}}
	srv := &http.Server{Handler: l.track(h), ReadHeaderTimeout: lim.header, ReadTimeout: lim.read, WriteTimeout: lim.write,
		IdleTimeout: lim.idle, MaxHeaderBytes: 16 << 10}
	return srv, l
}

// roomListener keeps at most max connections open, making room for a new
// one as httpLimits says.
type roomListener struct {
	net.Listener
	max       int
	busyGrace time.Duration

	mu    sync.Mutex
	conns map[string]*roomConn // by remote address (what a request names)
}

// roomConn is an open connection: in a request (busy) or waiting on its
// client, since when.
type roomConn struct {
	net.Conn
	l     *roomListener
	key   string
	host  string // the client's IP address
	busy  bool
	since time.Time
	once  sync.Once
}

func (l *roomListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		rc := &roomConn{Conn: c, l: l, key: c.RemoteAddr().String(), since: time.Now()}
		rc.host, _, _ = net.SplitHostPort(rc.key)
		if l.admit(rc) {
			return rc, nil
		}
		_ = c.Close() // every connection is in a fresh request: no room
	}
}

// admit adds rc, closing the connection that waited longest when the
// listener is full; false when none may be closed.
func (l *roomListener) admit(rc *roomConn) bool {
	l.mu.Lock()
	var victim *roomConn
	if len(l.conns) >= l.max {
		victim = l.victimLocked(rc.since)
		if victim == nil {
			l.mu.Unlock()
			return false
		}
		delete(l.conns, victim.key)
	}
	l.conns[rc.key] = rc
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close() // its server goroutine sees the error and lets it go
	}
	return true
}

// victimLocked is the connection to close for a new one arriving at now.
func (l *roomListener) victimLocked(now time.Time) *roomConn {
	held := map[string]int{}
	for _, c := range l.conns {
		held[c.host]++
	}
	// before: a is a better victim than b (nil).
	before := func(a, b *roomConn) bool {
		if b == nil || held[a.host] != held[b.host] {
			return b == nil || held[a.host] > held[b.host]
		}
		return a.since.Before(b.since)
	}
	var waiting, busy *roomConn
	for _, c := range l.conns {
		switch {
		case !c.busy && before(c, waiting):
			waiting = c
		case c.busy && now.Sub(c.since) > l.busyGrace && before(c, busy):
			busy = c
		}
	}
	if waiting != nil {
		return waiting
	}
	return busy
}

// track marks a connection busy while h serves a request on it.
func (l *roomListener) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mark(r.RemoteAddr, true)
		defer l.mark(r.RemoteAddr, false)
		h.ServeHTTP(w, r)
	})
}

func (l *roomListener) mark(key string, busy bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.conns[key]; c != nil {
		c.busy, c.since = busy, time.Now()
	}
}

func (c *roomConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.key] == c {
			delete(c.l.conns, c.key)
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// open is the number of connections held.
func (l *roomListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
