//go:build integration

package binlog_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/schema"
)

// The replication connection's read-ahead bound on a real server: with the
// loop not taking anything, the reader stops reading the binlog well before
// its end (go-mysql alone would read 512 events ahead, here all of it), and
// a stop ends the reader while a read is held; then, taken, every row
// arrives once and in order, a row far larger than the bound among them.
func TestReadAheadBoundMariaDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: t.TempDir(),
		// One rows event per 200-row INSERT (MariaDB splits at 8 KB by default).
		Settings: map[string]string{"binlog-row-event-max-size": "4194304"}})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.Exec("CREATE DATABASE app", "CREATE TABLE app.outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload LONGTEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg := binlog.Config{Hosts: []string{srv.Addr}, User: "root", Password: devdb.RootPassword, Flavor: "auto",
		Tables: []string{"app.outbox"}, ConnectTimeout: 5 * time.Second, ServerID: 4243, HeartbeatPeriod: time.Second}
	info, err := binlog.Inspect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	const statements, perStatement, payload = 60, 200, 1000
	big := 3 << 20 // one row, one event, three times the bound
	var stmts []string
	for s := range statements {
		var b strings.Builder
		b.WriteString("INSERT INTO app.outbox (payload) VALUES ")
		for i := range perStatement {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "(REPEAT('%c', %d))", 'a'+s%26, payload)
		}
		stmts = append(stmts, b.String())
		if s == statements/2 {
			stmts = append(stmts, fmt.Sprintf("INSERT INTO app.outbox (payload) VALUES (REPEAT('B', %d))", big))
		}
	}
	if err := srv.Exec(stmts...); err != nil {
		t.Fatal(err)
	}
	total := int64(statements*perStatement*payload + big)
	rows := statements*perStatement + 1

	start := func() (*binlog.Reader, chan []binlog.Event, chan error, context.CancelFunc) {
		r := binlog.NewReader(cfg, info, schema.New(cfg.Tables, nil, nil), nil)
		out := make(chan []binlog.Event)
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx, info.Head, out) }()
		return r, out, done, stop
	}
	held := func(t *testing.T, r *binlog.Reader) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !binlog.ReadAheadHeld(r) {
			if time.Now().After(deadline) {
				t.Fatalf("no read held with nothing taken from the reader: %d of about %d binlog bytes read", r.Received(), total)
			}
			time.Sleep(time.Millisecond)
		}
		if got := r.Received(); got > total/2 {
			t.Fatalf("%d bytes read ahead of a reader nobody takes from (the binlog holds about %d)", got, total)
		}
		t.Logf("held after %d of about %d bytes", r.Received(), total)
	}

	t.Run("stop while held", func(t *testing.T) {
		r, _, done, stop := start()
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
		r, out, done, stop := start()
		defer stop()
		held(t, r)
		var next int64 = 1
		sawBig := false
		for next <= int64(rows) {
			select {
			case batch := <-out:
				for _, ev := range batch {
					if ev.Kind != binlog.KindRows {
						continue
					}
					for _, row := range ev.Rows {
						id, ok := row[0].(int64)
						if !ok || id != next {
							t.Fatalf("row %v (%T) where row %d was due", row[0], row[0], next)
						}
						if p, _ := row[1].([]byte); len(p) == big {
							sawBig = true
						}
						next++
					}
				}
			case err := <-done:
				t.Fatalf("the reader ended at row %d: %v", next, err)
			case <-time.After(30 * time.Second):
				t.Fatalf("no batch for 30 s at row %d of %d", next, rows)
			}
		}
		if !sawBig {
			t.Fatalf("the %d-byte row did not arrive whole", big)
		}
	})
}
