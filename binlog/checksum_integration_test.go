//go:build integration

package binlog_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/schema"
	"github.com/outbox-relay/outbox-relay/source"
)

// MariaDB, binlog_checksum=CRC32 (its default), checksums the events its
// dump thread makes as well as those of its binlog: the reader, which
// verifies heartbeats and rotations once the format description said
// CRC32, reads a stream of heartbeats and rotations to new files
// (FLUSH BINARY LOGS) without a mismatch, and follows them to the newest
// file.
func TestReaderVerifiesMariaDBHeartbeatsAndRotations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: t.TempDir(), Settings: map[string]string{"binlog-checksum": "CRC32"}})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	if err := srv.Exec("CREATE DATABASE app", "CREATE TABLE app.outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload LONGTEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg := binlog.Config{Hosts: []string{srv.Addr}, User: "root", Password: devdb.RootPassword, Flavor: "auto",
		Tables: []string{"app.outbox"}, ConnectTimeout: 5 * time.Second, ServerID: 4244, HeartbeatPeriod: 100 * time.Millisecond}
	info, err := source.Inspect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := binlog.NewReader(cfg, info, schema.New(cfg.Tables, nil, nil), nil)
	out := make(chan []binlog.Event, 16)
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx, info.Head, out) }()
	var rows, beats int
	// take reads the reader's hand-offs until ok says what was wanted came.
	take := func(what string, ok func() bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for !ok() {
			select {
			case batch := <-out:
				for _, ev := range batch {
					switch ev.Kind {
					case binlog.KindRows:
						rows += len(ev.Rows)
					case binlog.KindHeartbeat:
						beats++
					}
				}
				r.Release(batch)
			case err := <-done:
				t.Fatalf("waiting for %s: the reader ended: %v", what, err)
			case <-timeout:
				t.Fatalf("no %s within 30 s (%d rows, %d heartbeats)", what, rows, beats)
			}
		}
	}
	take("heartbeats", func() bool { return beats >= 3 })
	first, _ := r.ReadPosition()
	for i := range 3 {
		if err := srv.Exec("FLUSH BINARY LOGS", "INSERT INTO app.outbox (payload) VALUES ('{}')"); err != nil {
			t.Fatal(err)
		}
		n := i + 1
		take("the row after a rotation", func() bool { return rows >= n })
		b := beats
		take("heartbeats after the rotation", func() bool { return beats >= b+2 })
	}
	// Three rotations later the reader is three files on.
	file, _ := r.ReadPosition()
	if a, b := fileNumber(t, first), fileNumber(t, file); b != a+3 {
		t.Fatalf("the reader started in %q and is in %q after three rotations", first, file)
	}
}

func fileNumber(t *testing.T, file string) int {
	t.Helper()
	_, n, ok := strings.Cut(file, ".")
	v, err := strconv.Atoi(n)
	if !ok || err != nil {
		t.Fatalf("binlog file %q", file)
	}
	return v
}
