//go:build integration

package binlog_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
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
	e := startGateEnv(t, ctx, map[string]string{"binlog-checksum": "CRC32"}, nil, 0)
	e.cfg.HeartbeatPeriod = 100 * time.Millisecond
	r, out, done, stop := e.start(ctx, e.info.Head)
	defer stop()
	take := reading(t, r, out, done)
	take("heartbeats", 0, 3)
	first, _ := r.ReadPosition()
	for i := range 3 {
		if err := e.srv.Exec("FLUSH BINARY LOGS", "INSERT INTO app.outbox (payload) VALUES ('{}')"); err != nil {
			t.Fatal(err)
		}
		take(fmt.Sprintf("the row after rotation %d", i+1), 1, 0)
		take("heartbeats after the rotation", 0, 2)
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

// binlog_checksum changed at runtime: MariaDB rotates to a file whose
// format description says the new algorithm, and checksums the rotation
// and the heartbeats by the file they belong to. A reader following the
// change both ways reads every row and heartbeat without a mismatch, and
// so does a reader started before the changes, whose stream crosses files
// of both algorithms from their start.
func TestReaderFollowsBinlogChecksumChangedAtRuntime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := startGateEnv(t, ctx, map[string]string{"binlog-checksum": "CRC32"}, nil, 0)
	e.cfg.HeartbeatPeriod = 100 * time.Millisecond
	from := e.info.Head
	r, out, done, stop := e.start(ctx, from)
	defer stop()
	take := reading(t, r, out, done)
	take("heartbeats", 0, 3)
	for _, step := range [][]string{
		{"SET GLOBAL binlog_checksum = NONE"},
		{"FLUSH BINARY LOGS"},
		{"SET GLOBAL binlog_checksum = CRC32"},
		{"SET GLOBAL binlog_checksum = NONE", "SET GLOBAL binlog_checksum = CRC32"},
	} {
		if err := e.srv.Exec(append(step, "INSERT INTO app.outbox (payload) VALUES ('{}')")...); err != nil {
			t.Fatal(err)
		}
		take(strings.Join(step, ", ")+" and a row", 1, 2)
	}
	stop()
	// From the start again: the rows of files of both algorithms.
	r2, out2, done2, stop2 := e.start(ctx, from)
	defer stop2()
	reading(t, r2, out2, done2)("the rows again", 4, 2)
}

// reading returns take, which reads the reader's hand-offs until rows more
// rows and beats more heartbeats than it has counted came, failing the
// test if the reader ends or they do not come within 30 s.
func reading(t *testing.T, r *binlog.Reader, out chan []binlog.Event, done chan error) (take func(what string, rows, beats int)) {
	var gotRows, gotBeats int
	return func(what string, rows, beats int) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		rows, beats = gotRows+rows, gotBeats+beats
		for gotRows < rows || gotBeats < beats {
			select {
			case batch := <-out:
				for _, ev := range batch {
					switch ev.Kind {
					case binlog.KindRows:
						gotRows += len(ev.Rows)
					case binlog.KindHeartbeat:
						gotBeats++
					}
				}
				r.Release(batch)
			case err := <-done:
				t.Fatalf("waiting for %s: the reader ended: %v", what, err)
			case <-timeout:
				t.Fatalf("no %s within 30 s (%d rows, %d heartbeats)", what, gotRows, gotBeats)
			}
		}
	}
}
