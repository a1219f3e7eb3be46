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
//     two small buffers each), but a new connection never waits for room:
//     at the cap, accepting it closes another (roomListener.victimLocked)
//     or, when none may be closed, the new one;
//   - a connection that sends its request headers slowly (header), its
//     request slowly (read), reads the answer slowly (write) or stays open
//     idle (idle) is closed.
//
// Which connection makes room is decided by what each client host has
// shown. A host is in good standing once a request of its was answered,
// until one of its connections holds a place without use: it is closed (by
// a timeout, or to make room) before a request was answered on it, or it
// is closed to make room while a request was in progress on it for more
// than busyGrace after it opened. A probe (the kubelet, from its node) or
// a scrape sends one request and reads the answer at once: its host stays
// in good standing. A flood of connections that send nothing, send their
// headers or body slowly, or read their answers slowly, from however many
// addresses, puts every host it comes from out of it as soon as one of its
// connections is closed. The connection closed for a new one is, first,
// of a host not in good standing: waiting on its client, then in a request
// on a connection open longer than busyGrace, then, for a newcomer not out
// of good standing (never seen, or in it), in any request; then of a host
// in good standing: waiting on its client after a request or open longer
// than busyGrace, then in a request on a connection open longer than
// busyGrace, then, for a newcomer not out of good standing, any. Among
// equals: a connection not fresh (it has had busyGrace to send its request
// and read the answer, or had one answered) before a fresh one, then that
// of the host holding the most connections, then the oldest. So a probe's
// connection is never closed for a newcomer of a host out of good
// standing, and a probe finds room unless its own host is out of it and
// every place is held by requests younger than busyGrace. The listener
// remembers the standing of maxHosts hosts, forgetting first those not in
// good standing.
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

// maxHosts bounds the client hosts whose standing the listener keeps.
const maxHosts = 1024

// newHTTPServer serves h on ln within lim; the returned listener is the
// one to Serve.
func newHTTPServer(ln net.Listener, h http.Handler, lim httpLimits) (*http.Server, net.Listener) {
	l := &roomListener{Listener: ln, max: lim.conns, busyGrace: lim.busyGrace, conns: map[string]*roomConn{}, hosts: map[string]*hostStanding{}}
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
	conns map[string]*roomConn     // by remote address (what a request names)
	hosts map[string]*hostStanding // by client IP address
}

// hostStanding is what a client host has shown: when a request of its was
// last answered, and when one of its connections last held a place
// without use (httpLimits).
type hostStanding struct {
	served, strike, seen time.Time
}

func (h *hostStanding) good() bool { return h != nil && h.served.After(h.strike) }

// struck: the host's last connection to end held its place without use,
// and no request of its was answered since.
func (h *hostStanding) struck() bool {
	return h != nil && !h.strike.IsZero() && !h.served.After(h.strike)
}

// roomConn is an open connection: in a request (busy) or waiting on its
// client; served counts the requests answered on it.
type roomConn struct {
	net.Conn
	l      *roomListener
	key    string
	host   string // the client's IP address
	busy   bool
	since  time.Time // in its state (busy or waiting) since
	opened time.Time
	served int
	once   sync.Once
}

func (l *roomListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		now := time.Now()
		rc := &roomConn{Conn: c, l: l, key: c.RemoteAddr().String(), since: now, opened: now}
		rc.host, _, _ = net.SplitHostPort(rc.key)
		if l.admit(rc) {
			return rc, nil
		}
		_ = c.Close() // no connection may be closed for it: no room
	}
}

// admit adds rc, closing another connection when the listener is full;
// false when none may be closed.
func (l *roomListener) admit(rc *roomConn) bool {
	l.mu.Lock()
	var victim *roomConn
	if len(l.conns) >= l.max {
		victim = l.victimLocked(rc, rc.since)
		if victim == nil {
			l.mu.Unlock()
			return false
		}
		delete(l.conns, victim.key)
		if victim.served == 0 || victim.busy && rc.since.Sub(victim.opened) > l.busyGrace {
			l.standingLocked(victim.host, rc.since).strike = rc.since
		}
	}
	l.conns[rc.key] = rc
	l.standingLocked(rc.host, rc.since)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close() // its server goroutine sees the error and lets it go
	}
	return true
}

// standingLocked is host's record, made when missing (forgetting, past
// maxHosts, the host seen least recently among those out of good standing,
// else among all).
func (l *roomListener) standingLocked(host string, now time.Time) *hostStanding {
	h := l.hosts[host]
	if h == nil {
		if len(l.hosts) >= maxHosts {
			var oldest string
			for k, v := range l.hosts {
				if o := l.hosts[oldest]; oldest == "" || o.good() && !v.good() || o.good() == v.good() && v.seen.Before(o.seen) {
					oldest = k
				}
			}
			delete(l.hosts, oldest)
		}
		h = &hostStanding{}
		l.hosts[host] = h
	}
	h.seen = now
	return h
}

// victimLocked is the connection to close for newcomer rc arriving at now,
// nil when none may be (httpLimits).
func (l *roomListener) victimLocked(rc *roomConn, now time.Time) *roomConn {
	held := map[string]int{}
	for _, c := range l.conns {
		held[c.host]++
	}
	// A newcomer of a host never seen, or in good standing, may close a
	// request in progress of a host out of it.
	newcomerGood := !l.hosts[rc.host].struck()
	// rank is c's category (lower: closed first), -1 when it may not be
	// closed for rc. A connection is old once open for busyGrace (a
	// client pipelining requests starts one after another: its requests
	// stay young, its connection does not).
	rank := func(c *roomConn) int {
		good, old := l.hosts[c.host].good(), now.Sub(c.opened) > l.busyGrace
		switch {
		case !good && !c.busy:
			return 0
		case !good && old:
			return 1
		case !good && newcomerGood:
			return 2
		case !c.busy && (c.served > 0 || old):
			return 3
		case c.busy && old:
			return 4
		case newcomerGood:
			return 5
		}
		return -1
	}
	// fresh: not yet had the time to send its request and read the answer.
	fresh := func(c *roomConn) bool { return c.served == 0 && now.Sub(c.opened) <= l.busyGrace }
	var victim *roomConn
	best := -1
	for _, c := range l.conns {
		r := rank(c)
		if r < 0 {
			continue
		}
		if victim == nil || r < best || r == best && before(c, victim, fresh, held) {
			victim, best = c, r
		}
	}
	return victim
}

// before reports whether a is closed before b of the same category: not
// fresh before fresh, then of the host holding more, then opened earlier.
func before(a, b *roomConn, fresh func(*roomConn) bool, held map[string]int) bool {
	if fa, fb := fresh(a), fresh(b); fa != fb {
		return fb
	}
	if held[a.host] != held[b.host] {
		return held[a.host] > held[b.host]
	}
	return a.opened.Before(b.opened)
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
	c := l.conns[key]
	if c == nil {
		return
	}
	now := time.Now()
	c.busy, c.since = busy, now
	if !busy {
		c.served++
		l.standingLocked(c.host, now).served = now
	}
}

// Close closes the connection; one closed before a request was answered
// on it (a timeout, a client that sent nothing) puts its host out of good
// standing.
func (c *roomConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		if c.l.conns[c.key] == c {
			delete(c.l.conns, c.key)
			if c.served == 0 {
				now := time.Now()
				c.l.standingLocked(c.host, now).strike = now
			}
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
