package binlog

import (
	"context"
	"errors"
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

// A read of the replication connection first hands the burst read so far
// on: it waits (held) while the reader has not taken it, and goes on once
// it has; an empty hand-off, or one the reader takes at once, holds nothing;
// the gate's end, or ctx's, fails a waiting read without reading.
func TestReadGateReadWaitsWhileTheLoopHasNotTakenTheBatch(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	gate := newReadGate()
	out := make(chan []Event)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pending := []Event{{Kind: KindCommit}}
	gate.before = func() error {
		if pending == nil {
			return nil
		}
		err := handOn(gate, ctx, out, pending)
		pending = nil
		return err
	}
	var reads atomic.Uint64
	c := gatedConn{Conn: client, reads: &reads, gate: gate}
	read := func() chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.Read(make([]byte, 16))
			done <- err
		}()
		return done
	}
	done := read()
	waitFor(t, "the read to be held", gate.held)
	if reads.Load() != 0 {
		t.Fatal("the socket was read before the batch was taken")
	}
	if got := <-out; len(got) != 1 {
		t.Fatalf("the reader took %d events", len(got))
	}
	waitFor(t, "the read to go on", func() bool { return !gate.held() })
	if _, err := server.Write([]byte("abc")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if gate.total.Load() != 3 || reads.Load() != 1 {
		t.Fatalf("%d bytes in %d reads counted", gate.total.Load(), reads.Load())
	}
	// Nothing pending: the read goes straight to the socket.
	done = read()
	if _, err := server.Write([]byte("d")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A burst the reader does not take: ctx's end fails the read.
	pending = []Event{{Kind: KindCommit}}
	done = read()
	waitFor(t, "the read to be held", gate.held)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a held read ended with %v when the reader's context ended", err)
	}
	if gate.total.Load() != 4 {
		t.Fatalf("%d bytes counted", gate.total.Load())
	}
}

// A connection that goes quiet because the relay is busy (a read held
// while the reader has not taken the burst before) is not a silent server;
// once the read goes on and the server stays silent, the watchdog closes
// it.
func TestWatchdogAndHeldReads(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	gate := newReadGate()
	out := make(chan []Event)
	gate.before = func() error { return handOn(gate, t.Context(), out, []Event{{Kind: KindCommit}}) }
	w := &watchdog{gate: gate}
	var nc net.Conn = gatedConn{Conn: client, reads: &w.reads, gate: gate, inRead: &w.inRead}
	w.conn.Store(&nc)
	readErr := make(chan error, 1)
	go func() {
		_, err := nc.Read(make([]byte, 16))
		readErr <- err
	}()
	waitFor(t, "the read to be held", gate.held)
	const silence = 30 * time.Millisecond
	stop := w.start(silence)
	defer stop()
	// Ten times the silence with the read held: the watchdog must not fire.
	deadline := time.Now().Add(10 * silence)
	for time.Now().Before(deadline) {
		if w.fired.Load() {
			t.Fatal("the watchdog closed a connection whose read waited for the relay")
		}
		time.Sleep(time.Millisecond)
	}
	<-out // the reader takes the burst: the read goes on into a silent connection
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

// Closing the connection (go-mysql's Close, the watchdog) ends a read that
// waits for the reader.
func TestGatedConnCloseEndsAHeldRead(t *testing.T) {
	client, server := net.Pipe()
	defer server.Close()
	var reads atomic.Uint64
	gate := newReadGate()
	gate.before = func() error { return handOn(gate, t.Context(), make(chan []Event), []Event{{Kind: KindCommit}}) }
	c := gatedConn{Conn: client, reads: &reads, gate: gate}
	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 16))
		readErr <- err
	}()
	waitFor(t, "the read to be held", gate.held)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-readErr:
		if !errors.Is(err, errGateClosed) {
			t.Fatalf("a held read of the closed connection returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a held read did not end when the connection closed")
	}
	if reads.Load() != 0 {
		t.Fatal("the closed connection's socket was read")
	}
}

// Only the first connection dialed (the replication connection) is gated:
// go-mysql dials another to KILL the first when closing, which must never
// wait for the reader.
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
	w := &watchdog{gate: newReadGate()}
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
// while the reader has not taken the burst before (for the integration
// test of package binlog_test).
func ReadAheadHeld(r *Reader) bool { return r.gate.held() }
