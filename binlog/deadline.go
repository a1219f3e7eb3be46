package binlog

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// Deadlines on every connection to the source. A host that accepts TCP and
// never answers (a stopped or overloaded mysqld, a half-open load balancer)
// must not hang the relay, `check` or a shutdown: go-mysql bounds only the
// TCP connect (its context reaches the dialer alone), so every connection
// to the source is dialed by dialSource, whose connection bounds each wait
// for the server by the phase it is in:
//
//   - connect: the TCP connect, within source.connect_timeout;
//   - login: the handshake, TLS and authentication, each wait within
//     source.connect_timeout;
//   - query: every wait for an answer after the login (the relay's
//     inspection, sampling and admin queries, `check`, a replication
//     connection's registration), within source.query_timeout;
//   - stream: a replication connection once the binlog dump has started:
//     no deadline per read (a syscall's worth of CPU per packet in
//     catch-up); the reader's watchdog (conn.go) notices silence instead.
//
// A wait past its bound fails with a *NoAnswerError naming the phase and
// the host ("login to 10.0.0.1:3306: no answer within 5s"), and the end of
// the caller's context closes the connection, so that a stop never waits
// on a socket.

// Phases of a source connection.
const (
	phaseConnect  = "connect to"
	phaseLogin    = "login to"
	phaseQuery    = "query on"
	phaseRegister = "start the binlog stream on"
	phaseStream   = "" // no deadline
)

// Default bounds, for a Config that leaves them unset.
const (
	defaultConnectTimeout = 5 * time.Second
	defaultQueryTimeout   = 30 * time.Second
)

// NoAnswerError: a source host did not answer within its phase's bound.
type NoAnswerError struct {
	Phase string // "connect to", "login to", "query on", ...
	Addr  string
	Limit time.Duration
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("%s %s: no answer within %s", e.Phase, e.Addr, e.Limit)
}

// Timeout marks it a timeout for net.Error users.
func (e *NoAnswerError) Timeout() bool { return true }

func (cfg Config) connectLimit() time.Duration {
	if cfg.ConnectTimeout > 0 {
		return cfg.ConnectTimeout
	}
	return defaultConnectTimeout
}

func (cfg Config) queryLimit() time.Duration {
	if cfg.QueryTimeout > 0 {
		return cfg.QueryTimeout
	}
	return defaultQueryTimeout
}

// sourceConn is a connection to a source host with the deadlines above.
type sourceConn struct {
	net.Conn
	addr          string
	login, answer time.Duration

	mu    sync.Mutex // orders a phase change against arming a deadline
	phase string
	until time.Time   // when set, no deadline is armed past it
	free  atomic.Bool // phaseStream: reads and writes are not armed

	timedOut atomic.Pointer[NoAnswerError] // the bound that expired, if any
	ctx      context.Context
	canceled atomic.Bool
	stop     func() bool   // stops closing on ctx's end
	closed   chan struct{} // closed once ctx's end has closed the socket
}

// dialSource dials addr within cfg's connect bound (or dctx's end) and
// returns the connection in the login phase; the end of ctx (the caller's
// own, which outlives the dial) closes it.
func dialSource(ctx, dctx context.Context, cfg Config, network, addr string) (*sourceConn, error) {
	limit := cfg.connectLimit()
	d := net.Dialer{Timeout: limit, KeepAlive: 15 * time.Second}
	c, err := d.DialContext(dctx, network, addr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", phaseConnect, addr, context.Cause(ctx))
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &NoAnswerError{Phase: phaseConnect, Addr: addr, Limit: limit}
		}
		return nil, err
	}
	sc := &sourceConn{Conn: c, addr: addr, login: limit, answer: cfg.queryLimit(), phase: phaseLogin, ctx: ctx, closed: make(chan struct{})}
	sc.stop = context.AfterFunc(ctx, func() {
		defer close(sc.closed)
		sc.canceled.Store(true)
		_ = c.Close()
	})
	return sc, nil
}

// setPhase moves the connection to phase (phaseStream: no deadline from
// now on, and none left on the socket).
func (c *sourceConn) setPhase(phase string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.phase = phase
	if phase == phaseStream {
		c.free.Store(true)
		_ = c.Conn.SetDeadline(time.Time{})
	}
}

// limit is the bound of the current phase; mu held.
func (c *sourceConn) limitLocked() time.Duration {
	if c.phase == phaseLogin {
		return c.login
	}
	return c.answer
}

// deadlineLocked is the deadline of a wait starting now; mu held.
func (c *sourceConn) deadlineLocked() time.Time {
	d := time.Now().Add(c.limitLocked())
	if !c.until.IsZero() && c.until.Before(d) {
		return c.until
	}
	return d
}

func (c *sourceConn) Read(p []byte) (int, error) {
	if e := c.timedOut.Load(); e != nil {
		return 0, e // the server did not answer: nothing more on this connection
	}
	if !c.free.Load() {
		c.mu.Lock()
		if c.phase != phaseStream {
			_ = c.Conn.SetReadDeadline(c.deadlineLocked())
		}
		c.mu.Unlock()
	}
	n, err := c.Conn.Read(p)
	if err != nil {
		err = c.why(err)
	}
	return n, err
}

func (c *sourceConn) Write(p []byte) (int, error) {
	if e := c.timedOut.Load(); e != nil {
		return 0, e
	}
	if !c.free.Load() {
		c.mu.Lock()
		if c.phase != phaseStream {
			_ = c.Conn.SetWriteDeadline(c.deadlineLocked())
		}
		c.mu.Unlock()
	}
	n, err := c.Conn.Write(p)
	if err != nil {
		err = c.why(err)
	}
	return n, err
}

// why names an error of the socket: the phase's bound, or the caller's end.
func (c *sourceConn) why(err error) error {
	c.mu.Lock()
	phase, limit := c.phase, c.limitLocked()
	c.mu.Unlock()
	switch {
	case c.canceled.Load():
		if phase == phaseStream {
			phase = "read the binlog stream of"
		}
		return fmt.Errorf("%s %s: %w", phase, c.addr, context.Cause(c.ctx))
	case phase != phaseStream && errors.Is(err, os.ErrDeadlineExceeded):
		e := &NoAnswerError{Phase: phase, Addr: c.addr, Limit: limit}
		c.timedOut.CompareAndSwap(nil, e)
		return e
	}
	return err
}

// Close closes the socket; when ctx's end is closing it, it waits for that
// goroutine, so that none outlives the connection's owner.
func (c *sourceConn) Close() error {
	if !c.stop() && c.canceled.Load() {
		<-c.closed
	}
	return c.Conn.Close()
}

// noAnswer is what a connection's bound or its caller's end did to conn,
// nil when neither: go-mysql words socket errors its own way ("connection
// was bad"), so callers ask the connection.
func noAnswer(conn *client.Conn) error {
	c := sourceConnOf(conn)
	if c == nil {
		return nil
	}
	if e := c.timedOut.Load(); e != nil {
		return e
	}
	if c.canceled.Load() {
		return fmt.Errorf("%s: %w", c.addr, context.Cause(c.ctx))
	}
	return nil
}

// Broken reports whether err, from a query on conn, leaves conn unusable:
// a bound expired on it or its caller ended (every later wait fails the
// same way), the connection failed (go-mysql's ErrBadConn: closed, killed
// by the server, reset), its answer broke go-mysql (ErrBrokenAnswer:
// closed), or the login guard closed it (a packet or an answer over its
// bound). An error the server answered with leaves it usable.
func Broken(conn *Conn, err error) bool {
	return err != nil && (noAnswer(conn.c) != nil || errors.Is(err, mysql.ErrBadConn) || errors.Is(err, ErrBrokenAnswer) ||
		conn.guard.err() != nil)
}

// ConnContext is the context whose end closes conn (Connect's), for the
// connections a query on conn leads to; Background when conn has none.
func ConnContext(conn *Conn) context.Context {
	if c := sourceConnOf(conn.c); c != nil {
		return c.ctx
	}
	return context.Background()
}

// sourceConnOf finds the sourceConn under conn, under its TLS layer and
// login guards too.
func sourceConnOf(conn *client.Conn) *sourceConn {
	if conn == nil || conn.Conn == nil {
		return nil
	}
	nc := conn.Conn.Conn
	for {
		switch c := nc.(type) {
		case *sourceConn:
			return c
		case *tls.Conn:
			nc = c.NetConn()
		case *guardConn:
			nc = c.Conn
		default:
			return nil
		}
	}
}

// syncerDialer is the Dialer of a go-mysql BinlogSyncer for cfg: its
// connections get the deadlines above and close when ctx ends (go-mysql
// dials with a context of its own). The first connection is the
// replication connection, returned to first (when not nil) for its phase
// changes; go-mysql dials later ones only to KILL the first while closing.
func syncerDialer(ctx context.Context, cfg Config, first func(*sourceConn)) func(context.Context, string, string) (net.Conn, error) {
	var dialed atomic.Bool
	return func(dctx context.Context, network, addr string) (net.Conn, error) {
		if dialed.CompareAndSwap(false, true) {
			c, err := dialSource(ctx, dctx, cfg, network, addr)
			if err != nil {
				return nil, err
			}
			if first != nil {
				first(c)
			}
			return c, nil
		}
		return dialKill(ctx, dctx, cfg, network, addr)
	}
}

// killDeadline bounds go-mysql's KILL connection (dial, handshake, KILL);
// killStopping when the caller has already ended (a stop: the replication
// connection is closed, the server ends its side on its next write).
const (
	killDeadline = 10 * time.Second
	killStopping = time.Second
)

// dialKill dials go-mysql's KILL connection at Close: it has no timeout of
// its own past the dial, so a frozen server would hang Close, and the
// reader, for good. Each wait is bounded as a login's (a frozen server is
// given up as soon as a login to it would be), and the whole of it by one
// deadline.
func dialKill(ctx, dctx context.Context, cfg Config, network, addr string) (net.Conn, error) {
	limit := killDeadline
	if ctx.Err() != nil {
		limit = killStopping
	}
	dctx, cancel := context.WithTimeout(dctx, limit)
	defer cancel()
	c, err := dialSource(context.Background(), dctx, cfg, network, addr)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.until = time.Now().Add(limit)
	c.mu.Unlock()
	return c, nil
}

// setPhase moves the replication connection in p, once dialed, to phase.
func setPhase(p *atomic.Pointer[sourceConn], phase string) {
	if c := p.Load(); c != nil {
		c.setPhase(phase)
	}
}

// phaseErr is err, or the bound or the stop that caused it on the
// replication connection in p (go-mysql words those its own way).
func phaseErr(p *atomic.Pointer[sourceConn], err error) error {
	c := p.Load()
	if c == nil {
		return err
	}
	if e := c.timedOut.Load(); e != nil {
		return e
	}
	if c.canceled.Load() {
		return fmt.Errorf("%s: %w", c.addr, context.Cause(c.ctx))
	}
	return err
}

// SetReadDeadline is go-mysql's way to end a read when it closes a
// syncer; a connection already closed by its caller's end has no read to
// end (and the socket's error would be logged as a failure).
func (c *sourceConn) SetReadDeadline(t time.Time) error {
	if c.canceled.Load() {
		return nil
	}
	return c.Conn.SetReadDeadline(t)
}
