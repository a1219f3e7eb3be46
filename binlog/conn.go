package binlog

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// The replication connection: where go-mysql hands the reader its events,
// and how silence is noticed.
//
// go-mysql's reading goroutine hands each event it read to the reader's
// handler (go-mysql's SynchronousEventHandler, reader.go), which gathers a
// burst: no channel send, select and hand-off between goroutines per event
// (a tenth of the relay's CPU in one-row catch-up). The burst goes to the
// reader's goroutine, which converts it while go-mysql reads on, before the
// connection's next read of the socket, which is when go-mysql has handed
// on everything it had read (one burst per burst the server sent, one
// event when the stream is idle), or once it holds about batchBytes of
// binlog. While the reader has not taken the burst before (it is
// converting one, or waiting for the loop to take what it made of it),
// that read waits: nothing more is read off the connection, so what is
// held is a burst or two, their batches and go-mysql's buffer (64 KB). A
// read waits for nothing else: an event larger than batchBytes, or one cut
// across reads, is read whole, so the stream cannot stall on its own
// bound.
//
// (Before, go-mysql queued up to 512 events for the reader, one channel
// send each, whatever their size, and a read-ahead bound of 1 MB held its
// reads while the reader was busy: decoded rows waiting in a queue cost the
// garbage collector a quarter of the relay's CPU in bulk catch-up.)

// readGate is the replication connection's reads (see above).
type readGate struct {
	total atomic.Int64 // every byte read
	// before hands the reader's batch on, before a read of the socket;
	// nil: reads go on at once.
	before  func() error
	holding atomic.Bool // a read waits for the reader to take a burst
	closed  chan struct{}
	once    sync.Once
}

func newReadGate() *readGate { return &readGate{closed: make(chan struct{})} }

// hold runs before each read of the socket: the reader's batch is handed on
// first. An error fails the read (the stream ends with it).
func (g *readGate) hold() error {
	if g.before == nil {
		return nil
	}
	return g.before()
}

// got counts n bytes read.
func (g *readGate) got(n int) {
	if n > 0 {
		g.total.Add(int64(n))
	}
}

// handOn sends v to out, waiting (a read held by g) while it is not
// taken, until ctx or g ends.
func handOn[T any](g *readGate, ctx context.Context, out chan<- T, v T) error {
	select {
	case out <- v:
		return nil
	default:
	}
	g.holding.Store(true)
	defer g.holding.Store(false)
	select {
	case out <- v:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-g.closed:
		return errGateClosed
	}
}

// errGateClosed fails a read that waited for the reader when the connection
// closed or Run ended.
var errGateClosed = errors.New("the replication connection closed while a read waited for the reader to take a burst")

// release ends every wait for good (the connection closed, Run ended).
func (g *readGate) release() { g.once.Do(func() { close(g.closed) }) }

// held reports whether a read waits for the reader.
func (g *readGate) held() bool { return g.holding.Load() }

// watchdog closes the replication connection when nothing, not even the
// server's heartbeat, arrives for a while. It counts reads on the socket, so
// the hot path pays one atomic add per read instead of a deadline syscall.
// The first connection dialed (the replication connection; go-mysql dials
// another only to KILL it when closing) reads through gate.
type watchdog struct {
	reads  atomic.Uint64
	inRead atomic.Int32 // reads waiting on the socket
	conn   atomic.Pointer[net.Conn]
	fired  atomic.Bool
	gate   *readGate
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
	if first := w.dialed.CompareAndSwap(false, true); first && w.gate != nil {
		nc = gatedConn{Conn: c, reads: &w.reads, gate: w.gate, inRead: &w.inRead}
	}
	w.conn.Store(&nc)
	return nc, nil
}

// start checks every silence/3 and closes the connection after silence
// without a read. Only a read waiting on the socket counts: a read held
// while the reader has not taken the burst before (readGate) is the relay
// being busy, not the server being silent. The returned func stops it
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

// gatedConn is the replication connection: counted, each read of the
// socket after gate's hand-off.
type gatedConn struct {
	net.Conn
	reads  *atomic.Uint64
	gate   *readGate
	inRead *atomic.Int32
}

func (c gatedConn) Read(p []byte) (int, error) {
	if err := c.gate.hold(); err != nil {
		return 0, err
	}
	if c.inRead != nil {
		c.inRead.Add(1)
		defer c.inRead.Add(-1)
	}
	n, err := c.Conn.Read(p)
	c.reads.Add(1)
	c.gate.got(n)
	return n, err
}

// Close releases the gate for good: a read waiting for the reader returns
// errGateClosed.
func (c gatedConn) Close() error {
	c.gate.release()
	return c.Conn.Close()
}
