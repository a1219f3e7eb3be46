//go:build integration

package binlog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// Payload sizes of the read-ahead tests' rows (startGateEnv, drain).
const (
	gatePayload = 1000
	gateBigRow  = 3 << 20 // one row, one event, three times the bound
)

// The replication connection's read-ahead bound on a real server: with the
// loop not taking anything, the reader stops reading the binlog well before
// its end (go-mysql alone would read 512 events ahead, here all of it), and
// a stop ends the reader while a read is held; then, taken, every row
// arrives once, whole and in order, a row far larger than the bound among
// them. (startGateEnv logs one rows event per 200-row INSERT.)
func TestReadAheadBoundMariaDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := startGateEnv(t, ctx, nil, nil, 60)
	if err := e.srv.Exec(fmt.Sprintf("INSERT INTO app.outbox (payload) VALUES (REPEAT('B', %d))", gateBigRow)); err != nil {
		t.Fatal(err)
	}
	e.rows++
	e.total += gateBigRow
	boundHolds(t, ctx, e, true)
}

// boundHolds checks, with e's rows in the binlog, that a read is held while
// nothing is taken from the reader (and, with farFromEnd, that it was held
// before half of the binlog was read), that the reader stops while a read is
// held, and that all rows arrive once taken.
func boundHolds(t *testing.T, ctx context.Context, e *gateEnv, farFromEnd bool) {
	held := func(t *testing.T, r *binlog.Reader) {
		t.Helper()
		waitHeld(t, r)
		if got := r.Received(); farFromEnd && got > e.total/2 {
			t.Fatalf("%d bytes read ahead of a reader nobody takes from (the binlog holds about %d)", got, e.total)
		}
		t.Logf("held after %d of about %d bytes", r.Received(), e.total)
	}
	t.Run("stop while held", func(t *testing.T) {
		r, _, done, stop := e.start(ctx, e.info.Head)
		held(t, r)
		stop()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the reader stopped with %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("the reader did not stop while a read was held")
		}
	})
	t.Run("taken after held", func(t *testing.T) {
		r, out, done, stop := e.start(ctx, e.info.Head)
		defer stop()
		held(t, r)
		n, err, ended := drain(t, out, done, e.rows, 60*time.Second)
		if ended || n != e.rows {
			t.Fatalf("%d of %d rows (the reader ended: %v, %v)", n, e.rows, ended, err)
		}
	})
}
