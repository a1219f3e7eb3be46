package relay

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// testAssembler assembles the transactions of a MariaDB source from cp
// (nil: none).
func testAssembler(t *testing.T, cp *checkpoint.Checkpoint) (*assembler, *metrics.Metrics) {
	t.Helper()
	m := metrics.New("test")
	a, err := newAssembler("mariadb", cp, m, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	return a, m
}

// rowsEvent is a rows event of app.outbox in gtid with n rows.
func rowsEvent(gtid string, op binlog.Op, n int) *binlog.Event {
	ev := &binlog.Event{Kind: binlog.KindRows, GTID: gtid, Table: outboxTable, Op: op}
	for range n {
		ev.Rows = append(ev.Rows, []any{"e", "order", "1", "created", []byte("{}"), ""})
	}
	return ev
}

// The rows a split checkpoint says are published (its partial) are
// skipped when their transaction is read again, and only those: the rest
// of it, and every other transaction, are published.
func TestAssemblerSkipsWhatTheCheckpointsPartPublished(t *testing.T) {
	a, _ := testAssembler(t, nil)
	published := checkpoint.Partial{GTID: "0-1-5", Rows: 3}
	var skipped []bool
	for _, gtid := range []string{"0-1-5", "0-1-6"} {
		ev := rowsEvent(gtid, binlog.OpInsert, 4)
		a.enter(ev.GTID)
		for range ev.Rows {
			skipped = append(skipped, a.next(published))
		}
		a.leave()
	}
	want := []bool{true, true, true, false, false, false, false, false}
	for i := range want {
		if skipped[i] != want[i] {
			t.Fatalf("skipped %v, want %v", skipped, want)
		}
	}
}

// DELETEs after as many INSERTs in one transaction are the
// delete-after-insert pattern, only counted; more, and UPDATEs, are
// invalid operations: warned about, or a stop with invalid_op fatal.
func TestAssemblerInvalidOperations(t *testing.T) {
	a, m := testAssembler(t, nil)
	a.enter("0-1-1")
	a.next(checkpoint.Partial{})
	a.next(checkpoint.Partial{})
	if err := a.invalidOp("app.outbox", "warn", rowsEvent("0-1-1", binlog.OpDelete, 3)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.InvalidOps.WithLabelValues("app.outbox", "delete_after_insert")); got != 2 {
		t.Fatalf("delete after insert counted %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.InvalidOps.WithLabelValues("app.outbox", "delete")); got != 1 {
		t.Fatalf("deletes beyond the inserts counted %v, want 1", got)
	}
	a.leave()
	a.enter("0-1-2")
	if err := a.invalidOp("app.outbox", "warn", rowsEvent("0-1-2", binlog.OpDelete, 1)); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.InvalidOps.WithLabelValues("app.outbox", "delete")); got != 2 {
		t.Fatalf("a delete in a transaction without inserts counted %v as invalid, want 2 in all", got)
	}
	a.enter("0-1-3")
	if err := a.invalidOp("app.outbox", "fatal", rowsEvent("0-1-3", binlog.OpUpdate, 1)); !errors.Is(err, ErrInvalidOp) {
		t.Fatalf("an update with invalid_op fatal: %v, want ErrInvalidOp", err)
	}
}

// An XA transaction's rows are held from its prepare to its commit (then
// handed over as rows of the commit's transaction) and listed in every
// checkpoint meanwhile, with where a restart reads again from; a rollback
// drops them; the commit of one prepared before the relay's start is not
// known (looked up), a one-phase commit without rows wrote none.
func TestAssemblerXA(t *testing.T) {
	a, _ := testAssembler(t, nil)
	at := xaAt{before: "0-1-9"}
	a.holdXA(&binlog.Event{Kind: binlog.KindRows, GTID: "0-1-10", XID: "x1", Rows: [][]any{{1}, {2}}})
	a.prepareXA(&binlog.Event{Kind: binlog.KindPrepare, GTID: "0-1-10", XID: "x1"}, at)
	a.prepareXA(&binlog.Event{Kind: binlog.KindPrepare, GTID: "0-1-11", XID: "x2"}, xaAt{before: "0-1-10"})
	xa := a.xaCheckpoint()
	if xa == nil || len(xa.Prepared) != 2 || xa.Prepared[0].Rows != 2 || xa.Resume == nil || *xa.Resume != "0-1-9" {
		t.Fatalf("checkpoint's XA part %+v: want x1 (2 rows) and x2 prepared, read again from 0-1-9", xa)
	}
	a.endXA("x2") // XA ROLLBACK
	rows, known, err := a.commitXA(&binlog.Event{Kind: binlog.KindCommit, GTID: "0-1-12", XID: "x1"}, checkpoint.Partial{})
	if err != nil || !known || len(rows) != 1 || rows[0].GTID != "0-1-12" || rows[0].XID != "" {
		t.Fatalf("XA COMMIT: %d rows events (%v, known %v), want x1's, as rows of 0-1-12", len(rows), err, known)
	}
	if a.xaCheckpoint() == nil {
		t.Fatal("x1 is unlisted before its rows are out")
	}
	a.endXA("x1")
	if xa := a.xaCheckpoint(); xa != nil {
		t.Fatalf("XA part %+v after every XA transaction ended", xa)
	}
	if _, known, _ := a.commitXA(&binlog.Event{Kind: binlog.KindCommit, GTID: "0-1-13", XID: "x9"}, checkpoint.Partial{}); known {
		t.Fatal("the XA COMMIT of a prepare never read is known")
	}
	if rows, known, _ := a.commitXA(&binlog.Event{Kind: binlog.KindCommit, GTID: "0-1-14", XID: "x9", OnePhase: true}, checkpoint.Partial{}); !known || len(rows) != 0 {
		t.Fatal("a one-phase commit without rows is not known as empty")
	}
}

// Restarted from before a prepared XA transaction, the assembler reads
// again what the checkpoint covered: those transactions are replayed (not
// published again), but the listed prepare's rows are collected, and its
// row count must match the checkpoint's; once the position covers what was
// published, the replay ends.
func TestAssemblerReplaysFromBeforeAPreparedXA(t *testing.T) {
	before := "0-1-9"
	cp := &checkpoint.Checkpoint{GTIDSet: "0-1-20", XA: &checkpoint.XA{Resume: &before,
		Prepared: []checkpoint.PreparedXA{{XID: "x1", GTID: "0-1-10", Rows: 2}}}}
	a, _ := testAssembler(t, cp)
	if !a.replays() || !a.replaying("0-1-15") || a.replaying("0-1-21") {
		t.Fatal("the transactions the checkpoint covers are not replayed, or others are")
	}
	a.holdXA(&binlog.Event{Kind: binlog.KindRows, GTID: "0-1-10", XID: "x1", Rows: [][]any{{1}}})
	a.holdXA(&binlog.Event{Kind: binlog.KindRows, GTID: "0-1-12", XID: "x0", Rows: [][]any{{1}}}) // ended before the checkpoint
	a.prepareXA(&binlog.Event{Kind: binlog.KindPrepare, GTID: "0-1-10", XID: "x1"}, xaAt{before: before})
	if _, ok := a.xa.txs["x0"]; ok {
		t.Fatal("rows of an XA transaction that ended before the checkpoint were collected")
	}
	_, _, err := a.commitXA(&binlog.Event{Kind: binlog.KindCommit, GTID: "0-1-21", XID: "x1"}, checkpoint.Partial{})
	if !errors.Is(err, ErrUnknownXA) {
		t.Fatalf("1 row read again where the checkpoint recorded 2: %v, want ErrUnknownXA", err)
	}
	set, err := binlog.ParseSet("mariadb", "0-1-20")
	if err != nil {
		t.Fatal(err)
	}
	a.advanced(set)
	if a.replays() || a.replaying("0-1-15") {
		t.Fatal("the replay did not end once the position covered the checkpoint")
	}
}
