package binlog

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The replication connection: how much go-mysql reads ahead of the reader,
// and how silence is noticed.
//
// go-mysql reads and decodes events into a buffer of eventCacheCount events
// whatever their size: with one-row transactions a few hundred KB, with
// large rows or large events many MB of decoded rows, which the garbage
// collector marks again and again under the relay's soft memory limit (a
// quarter of the relay's CPU in bulk catch-up went to the GC, its live heap
// at 55-60 MB). So the replication connection's reads wait once readAheadBytes
// were read while the reader was busy with what it took before (converting
// it, or waiting for the loop to take it). They never wait while the reader
// waits for an event: an event larger than the bound, or one cut across
// reads, is always read whole, so the bound cannot stall the stream.

// readAheadBytes bounds the binlog bytes read off the connection while the
// reader is busy: about one reader batch.
const readAheadBytes = batchBytes

// readAhead holds the replication connection's reads (see above).
type readAhead struct {
	limit int64
	total atomic.Int64 // every byte read

	mu      sync.Mutex
	read    int64         // bytes read since the reader last went for events
	idle    bool          // the reader waits for go-mysql's next event
	open    bool          // released for good (the connection closed, Run ended)
	holding bool          // a read waits
	wake    chan struct{} // closed when a waiting read may go on
}

func newReadAhead(limit int64) *readAhead {
	return &readAhead{limit: limit, idle: true, wake: make(chan struct{})}
}

// hold waits while the bound is reached and the reader is busy.
func (g *readAhead) hold() {
	g.mu.Lock()
	for !g.open && !g.idle && g.read >= g.limit {
		w := g.wake
		g.holding = true
		g.mu.Unlock()
		<-w
		g.mu.Lock()
	}
	g.holding = false
	g.mu.Unlock()
}

// got counts n bytes read.
func (g *readAhead) got(n int) {
	if n <= 0 {
		return
	}
	g.total.Add(int64(n))
	g.mu.Lock()
	g.read += int64(n)
	g.mu.Unlock()
}

// waiting tells that the reader is about to wait for go-mysql's events (on:
// reads go on, and the count starts again) or has taken them (off).
func (g *readAhead) waiting(on bool) {
	g.mu.Lock()
	g.idle = on
	if on {
		g.read = 0
		g.wakeLocked()
	}
	g.mu.Unlock()
}

// release lets every read go on from now on.
func (g *readAhead) release() {
	g.mu.Lock()
	g.open = true
	g.wakeLocked()
	g.mu.Unlock()
}

// held reports whether a read waits on the bound.
func (g *readAhead) held() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.holding
}

// wakeLocked lets a waiting read go on; without one there is nothing to
// wake (waiting runs once per burst of events: no channel made for nothing).
func (g *readAhead) wakeLocked() {
	if !g.holding {
		return
	}
	close(g.wake)
	g.wake = make(chan struct{})
}

// watchdog closes the replication connection when nothing, not even the
// server's heartbeat, arrives for a while. It counts reads on the socket, so
// the hot path pays one atomic add per read instead of a deadline syscall.
// The first connection dialed (the replication connection; go-mysql dials
// another only to KILL it when closing) reads through ahead.
type watchdog struct {
	reads  atomic.Uint64
	inRead atomic.Int32 // reads waiting on the socket
	conn   atomic.Pointer[net.Conn]
	fired  atomic.Bool
	ahead  *readAhead
	dialed atomic.Bool // the first connection was dialed
	// base dials the socket: syncerDialer (deadline.go) in the reader,
	// whose KILL connection it bounds; a plain dialer when nil.
	base func(ctx context.Context, network, addr string) (net.Conn, error)
}

func (w *watchdog) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	base := w.base
	if base == nil {
		d := net.Dialer{KeepAlive: 15 * time.Second}
		base = d.DialContext
	}
	c, err := base(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	var nc net.Conn = countingConn{Conn: c, reads: &w.reads, inRead: &w.inRead}
	if first := w.dialed.CompareAndSwap(false, true); first && w.ahead != nil {
		nc = gatedConn{Conn: c, reads: &w.reads, ahead: w.ahead, inRead: &w.inRead}
	}
	w.conn.Store(&nc)
	return nc, nil
}

// start checks every silence/3 and closes the connection after silence
// without a read. Only a read waiting on the socket counts: go-mysql not
// reading (its buffer full, or a read held by the read-ahead bound) is the
// relay being busy, not the server being silent. The returned func stops it
// and waits for it to return.
func (w *watchdog) start(silence time.Duration) func() {
	stop := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(silence / 3)
		defer tick.Stop()
		last, quiet := w.reads.Load(), time.Duration(0)
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if now := w.reads.Load(); now != last || w.inRead.Load() == 0 {
				last, quiet = now, 0
				continue
			}
			if quiet += silence / 3; quiet >= silence {
				if c := w.conn.Load(); c != nil {
					w.fired.Store(true)
					_ = (*c).Close()
				}
				return
			}
		}
	}()
	return func() { close(stop); <-exited }
}

type countingConn struct {
	net.Conn
	reads  *atomic.Uint64
	inRead *atomic.Int32
}

func (c countingConn) Read(p []byte) (int, error) {
	if c.inRead != nil {
		c.inRead.Add(1)
		defer c.inRead.Add(-1)
	}
	n, err := c.Conn.Read(p)
	c.reads.Add(1)
	return n, err
}

// gatedConn is the replication connection: counted, and bounded by ahead.
type gatedConn struct {
	net.Conn
	reads  *atomic.Uint64
	ahead  *readAhead
	inRead *atomic.Int32
}

func (c gatedConn) Read(p []byte) (int, error) {
	c.ahead.hold()
	if c.inRead != nil {
		c.inRead.Add(1)
		defer c.inRead.Add(-1)
	}
	n, err := c.Conn.Read(p)
	c.reads.Add(1)
	c.ahead.got(n)
	return n, err
}

// Close releases the reads for good: a read waiting on the bound returns
// the closed connection's error.
func (c gatedConn) Close() error {
	c.ahead.release()
	return c.Conn.Close()
}
