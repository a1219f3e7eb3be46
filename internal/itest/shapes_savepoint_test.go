//go:build integration

package itest

// Conformance matrix: savepoints (RELEASE, ROLLBACK TO, several, the large
// INSERT ... SELECT after one, ROLLBACK TO with a non-transactional table).
// The other shapes of part 1 are in shapes_test.go; the driver is shapes.go.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
)

// SAVEPOINT and RELEASE SAVEPOINT inside a transaction (Django's nested
// atomic(), Rails requires_new, SQLAlchemy begin_nested(), Spring NESTED):
// the SAVEPOINT is a Query event inside the transaction; RELEASE is not
// logged. Every row once, none lost to a restart inside the transaction.
func TestShapeSavepointRelease(t *testing.T) {
	BrokerOnlyAsSink(t)
	matrix(t, AllModes, ShapeOptions{}, shapeSavepointRelease, nil)
}

func shapeSavepointRelease(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	c := cs[0]
	x(c, r.Must("sp", 1))
	x(c, "BEGIN", r.Must("sp", 2), "SAVEPOINT s1", r.Must("sp", 3), "RELEASE SAVEPOINT s1", r.Must("sp", 2), "COMMIT")
	x(c, r.Must("sp", 1))
}

// ROLLBACK TO SAVEPOINT with InnoDB only: the server cuts the rolled-back
// rows out of the transaction's binlog cache; they must never appear, not
// even in an aborted Kafka transaction.
func TestShapeRollbackToSavepoint(t *testing.T) {
	BrokerOnlyAsSink(t)
	matrix(t, AllModes, ShapeOptions{}, shapeRollbackToSavepoint, func(r *ShapeRun) { r.RequireNeverProduced(r.Ghosts) })
}

func shapeRollbackToSavepoint(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	c := cs[0]
	x(c, r.Must("rb", 1))
	x(c, "BEGIN", r.Must("rb", 2), "SAVEPOINT s1", r.Ghost("rb", 2), "ROLLBACK TO SAVEPOINT s1", r.Must("rb", 2), "COMMIT")
	x(c, r.Must("rb", 1))
}

// Several savepoints, nested, released, rolled back to (an outer one too),
// a name reused; business rows in between.
func TestShapeSeveralSavepoints(t *testing.T) {
	BrokerOnlyAsSink(t)
	matrix(t, AllModes, ShapeOptions{}, shapeSeveralSavepoints, func(r *ShapeRun) { r.RequireNeverProduced(r.Ghosts) })
}

func shapeSeveralSavepoints(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	c := cs[0]
	alarm := fmt.Sprintf("INSERT INTO %s.alarm_record (device_id, level, temp, seq) VALUES ('sp-dev', 'INFO', 1, 1)", r.S.Name)
	x(c, "BEGIN",
		r.Must("ssp", 2),
		"SAVEPOINT p1", r.Must("ssp", 1), alarm,
		"SAVEPOINT p2", r.Ghost("ssp", 2),
		"SAVEPOINT p3", r.Ghost("ssp", 1), alarm,
		"ROLLBACK TO SAVEPOINT p2", // p3 goes with it
		r.Must("ssp", 1),
		"SAVEPOINT p4", r.Must("ssp", 2), "RELEASE SAVEPOINT p4",
		"SAVEPOINT p5", r.Ghost("ssp", 1), "ROLLBACK TO SAVEPOINT p5",
		"SAVEPOINT p5", r.Must("ssp", 1), // reused name
		"COMMIT")
	// An outer rollback undoes every inner savepoint's rows.
	x(c, "BEGIN", r.Must("ssp", 1), "SAVEPOINT a", r.Ghost("ssp", 1), "SAVEPOINT b", r.Ghost("ssp", 2), alarm,
		"ROLLBACK TO SAVEPOINT a", r.Must("ssp", 1), "COMMIT")
	// Only the savepoint bookkeeping and business rows: no outbox row left.
	x(c, "BEGIN", "SAVEPOINT z", r.Ghost("ssp", 1), "ROLLBACK TO SAVEPOINT z", alarm, "COMMIT")
	x(c, r.Must("ssp", 1))
}

// The reproduction: BEGIN; one outbox row; SAVEPOINT s1; INSERT ...
// SELECT of 300,000 outbox rows; COMMIT. The relay is stopped by SIGTERM
// after its second Kafka commit inside the transaction (10,000 rows at
// max_records 5,000) and started again: all 300,001 rows exactly once. The
// old reader took the SAVEPOINT for a commit, so the checkpoint said "GTID
// done, partial N rows" and the restart skipped the rest.
func TestShapeBigInsertAfterSavepoint(t *testing.T) {
	BrokerOnlyAsSink(t)
	const n = 300000
	r := env.NewShapeRun(t, TermEveryCommit, ShapeOptions{MaxRecords: 5000, RunTimeout: 3 * time.Minute})
	c := r.Conn()
	r.Exec(c, "BEGIN", r.Must("first", 1), "SAVEPOINT s1",
		fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT CONCAT('%s-big-', seq), 'alarm', CONCAT('big-', seq %% 10), 'Bulk', JSON_OBJECT('seq', seq)
			FROM %s.seq_1_to_%d`, r.S.Table(), r.S.Name, r.S.Name, n),
		"COMMIT")
	gtid := r.LastGTID(c)
	start := time.Now()
	p := r.start("after-partial:2:term")
	code, err := p.Wait(3 * time.Minute)
	if err != nil {
		t.Fatalf("the SIGTERM failpoint inside the transaction did not stop the relay: %v\n%s", err, r.Tail())
	}
	r.checkCleanStop(p, code, "SIGTERM mid-transaction")
	cp := r.Checkpoint()
	visible := len(Consume(t, r.Kafka.Brokers, r.Prefix))
	t.Logf("stopped mid-transaction: checkpoint %s, partial %+v, %d records visible", cp.GTIDSet, cp.Partial, visible)
	if visible >= n+1 {
		t.Fatalf("everything (%d records) was published before the stop: the SIGTERM did not land inside the transaction", visible)
	}
	if ContainsGTID(cp, gtid) {
		t.Fatalf("after the stop the checkpoint (%s, partial %+v) covers the whole transaction %s, but only %d of its %d rows are published: "+
			"a restart skips the rest", cp.GTIDSet, cp.Partial, gtid, visible, n+1)
	}
	r.CheckSoFar("after the SIGTERM")
	if res := r.Resume(); res.Stopped {
		t.Fatalf("the restarted relay stopped (exit %d):\n%s", res.Code, lastLines(res.Output, 15))
	}
	rep := r.Finish()
	if rep.Expected != n+1 {
		t.Fatalf("outbox has %d rows, want %d", rep.Expected, n+1)
	}
	t.Logf("300,001 rows with a SIGTERM inside: %s", time.Since(start).Round(time.Millisecond))
}

// ROLLBACK TO SAVEPOINT after an outbox row when a MyISAM table was written
// after the savepoint: MariaDB then logs the rolled-back outbox row AND a
// `ROLLBACK TO` query inside the transaction (the MyISAM row goes out as a
// group of its own, before it). The relay must never publish the
// rolled-back row; it may instead stop with an error naming the GTID.
func TestShapeRollbackToSavepointWithMyISAM(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, m := range []Mode{Straight, TermEveryCommit, KillAfterCommit, KillAfterPartial} {
		t.Run(string(m), func(t *testing.T) {
			r := env.NewShapeRun(t, m, ShapeOptions{MaxRecords: 1})
			c := r.Conn()
			r.Exec(c, fmt.Sprintf("CREATE TABLE %s.audit_myisam (id INT NOT NULL) ENGINE=MyISAM", r.S.Name))
			r.Exec(c, r.Must("my", 1))
			qBefore, before := r.Insert("my", 1)
			qAfter, afterRB := r.Insert("my", 1)
			mark := r.Mark()
			r.Exec(c, "BEGIN", qBefore, "SAVEPOINT s1", r.Ghost("my", 1),
				fmt.Sprintf("INSERT INTO %s.audit_myisam VALUES (1)", r.S.Name),
				"ROLLBACK TO SAVEPOINT s1", qAfter, "COMMIT")
			gtid := r.GTIDHolding(mark, afterRB[0]) // by the binlog, not @@last_gtid
			qLater, later := r.Insert("my", 1)
			r.Exec(c, qLater)
			res := r.Drive()
			if v := r.Visible(r.Ghosts...); len(v) > 0 {
				t.Fatalf("%s: the rolled-back row %v is visible to read_committed consumers (relay stopped: %v):\n%s", m, v, res.Stopped, r.Tail())
			}
			if !res.Stopped {
				r.Finish()
				return
			}
			msg := stopError(res.Output)
			if !strings.Contains(msg, gtid) {
				t.Fatalf("%s: the relay stopped (exit %d) without naming the transaction %s:\n%s", m, res.Code, gtid, msg)
			}
			// A relay that splits transactions may have published the row
			// before the savepoint; nothing after the ROLLBACK TO, though.
			if v := r.Visible(append(afterRB, later...)...); len(v) > 0 {
				t.Fatalf("%s: the relay stopped at %s but published %v of that transaction after the ROLLBACK TO, or after it", m, gtid, v)
			}
			t.Logf("%s: row before the savepoint published: %v", m, r.Visible(before...))
			r.CheckSoFar("after the stop")
			t.Logf("%s: the relay stopped at the ROLLBACK TO transaction, as allowed: %s", m, msg)
			// The operator skips it; the rows after it are published once,
			// the rolled-back row never.
			r.Skipped = append(r.Skipped, afterRB...)
			r.Maybe = append(r.Maybe, before...)
			how := operatorSkip(t, r, gtid)
			if res := r.Resume(); res.Stopped {
				t.Fatalf("after %s the relay stopped again (exit %d):\n%s", how, res.Code, lastLines(res.Output, 15))
			}
			r.Finish()
		})
	}
}
