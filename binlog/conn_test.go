package binlog

import (
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// waitFor polls cond every millisecond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// returns reports whether f returns within d, running it in a goroutine.
func returns(f func(), d time.Duration) (bool, chan struct{}) {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
		return true, done
	case <-time.After(d):
		return false, done
	}
}

func TestReadAheadHoldsOnlyWhileTheReaderIsBusy(t *testing.T) {
	g := newReadAhead(100)
	g.got(1000)
	if ok, _ := returns(g.hold, time.Second); !ok {
		t.Fatal("a read waits before the reader took anything (go-mysql's handshake, the first event)")
	}
	g.waiting(true)  // the reader goes for events,
	g.waiting(false) // and is busy with them
	if ok, _ := returns(g.hold, time.Second); !ok {
		t.Fatal("the count did not start again when the reader went for events")
	}
	g.got(99)
	if ok, _ := returns(g.hold, time.Second); !ok {
		t.Fatal("a read waits below the bound")
	}
	g.got(1)
	ok, done := returns(g.hold, 20*time.Millisecond)
	if ok {
		t.Fatal("a read goes on with the bound reached while the reader is busy")
	}
	waitFor(t, "the read to be held", g.held)
	g.waiting(true) // the reader waits for the next event
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the held read does not go on once the reader waits for events")
	}
	if g.held() {
		t.Fatal("held after the read went on")
	}
	// An event larger than the bound: read whole while the reader waits.
	g.got(500)
	if ok, _ := returns(g.hold, time.Second); !ok {
		t.Fatal("a read waits while the reader waits for an event")
	}
	g.waiting(false) // the big event is taken
	g.got(100)
	_, done = returns(g.hold, 0)
	waitFor(t, "the read to be held", g.held)
	g.release()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("release does not let a held read go on")
	}
	g.got(1000)
	if ok, _ := returns(g.hold, time.Second); !ok {
		t.Fatal("a read waits after release")
	}
	if got := g.total.Load(); got != 1000+99+1+500+100+1000 {
		t.Fatalf("total %d bytes", got)
	}
}

// A connection that goes quiet because the relay is busy (a read held by
// the bound) is not a silent server; once the read goes on and the server
// stays silent, the watchdog closes it.
func TestWatchdogAndHeldReads(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	ahead := newReadAhead(10)
	w := &watchdog{ahead: ahead}
	var nc net.Conn = gatedConn{Conn: client, reads: &w.reads, ahead: ahead, inRead: &w.inRead}
	w.conn.Store(&nc)
	ahead.waiting(false)
	ahead.got(10)
	readErr := make(chan error, 1)
	go func() {
		_, err := nc.Read(make([]byte, 16))
		readErr <- err
	}()
	waitFor(t, "the read to be held", ahead.held)
	const silence = 30 * time.Millisecond
	stop := w.start(silence)
	defer stop()
	// Ten times the silence with the read held: the watchdog must not fire.
	deadline := time.Now().Add(10 * silence)
	for time.Now().Before(deadline) {
		if w.fired.Load() {
			t.Fatal("the watchdog closed a connection whose read the relay held")
		}
		time.Sleep(time.Millisecond)
	}
	ahead.waiting(true) // the read goes on into a silent connection
	waitFor(t, "the watchdog to fire", w.fired.Load)
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("the read of a closed connection returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read did not end with the connection closed")
	}
}

// Closing the connection (go-mysql's Close, the watchdog) ends a read the
// bound holds.
func TestGatedConnCloseEndsAHeldRead(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	var reads atomic.Uint64
	ahead := newReadAhead(1)
	c := gatedConn{Conn: client, reads: &reads, ahead: ahead}
	ahead.waiting(false)
	ahead.got(1)
	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 16))
		readErr <- err
	}()
	waitFor(t, "the read to be held", ahead.held)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if err == nil {
			t.Fatal("a read of the closed connection returned no error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a held read did not end when the connection closed")
	}
}

// Only the first connection dialed (the replication connection) is gated:
// go-mysql dials another to KILL the first when closing, which must never
// wait on the bound.
func TestWatchdogGatesTheFirstConnectionOnly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	w := &watchdog{ahead: newReadAhead(1)}
	first, err := w.dial(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := w.dial(t.Context(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if _, ok := first.(gatedConn); !ok {
		t.Fatalf("the replication connection is a %T, not gated", first)
	}
	if _, ok := second.(countingConn); !ok {
		t.Fatalf("the second connection is a %T, not a plain counted one", second)
	}
}

// ReadAheadHeld reports whether r's replication connection has a read held
// by the read-ahead bound (for the integration test of package binlog_test).
func ReadAheadHeld(r *Reader) bool { return r.ahead.held() }
