//go:build integration

package itest

// Conformance matrix, part 2 (issue 11): XA transactions. MariaDB 10.5+
// logs a prepared XA transaction as a GTID group of its own (GTID event with
// the XA flag, the rows, Query `XA END`, XA_PREPARE_LOG_EVENT) and its
// outcome as another (`XA COMMIT X'..',X'',1` or `XA ROLLBACK ...`) that can
// come much later, after other transactions. XA COMMIT ... ONE PHASE is an
// ordinary transaction ending in an XID. A prepared xid can be committed
// from another connection only once the preparing one has disconnected
// (before that: ERROR 1397 XAER_NOTA).

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
)

// XA START, rows, XA END, XA PREPARE, another transaction committed in
// between, XA COMMIT (same connection): every row once, the XA rows only
// once XA COMMIT is in the binlog (checked live in Straight mode).
func TestShapeXACommit(t *testing.T) {
	BrokerOnlyAsSink(t)
	matrix(t, AllModes, ShapeOptions{}, shapeXACommit, nil)
}

func shapeXACommit(r *ShapeRun, x execer, cs []*client.Conn, live bool) {
	a, b := cs[0], cs[1]
	xid := r.XID()
	agg := "xa-" + xid
	x(b, r.Must("xn", 1))
	q, xaIDs := r.Insert(agg, 3)
	x(a, "XA START '"+xid+"'", q, fmt.Sprintf("INSERT INTO %s.alarm_record (device_id, level, temp, seq) VALUES ('xa', 'INFO', 1, 1)", r.S.Name),
		"XA END '"+xid+"'", "XA PREPARE '"+xid+"'")
	qb, between := r.Insert("xn", 2)
	x(b, qb)
	if live {
		r.WaitVisible(between...)
		if v := r.Visible(xaIDs...); len(v) > 0 {
			r.T.Fatalf("XA rows %v published at XA PREPARE, before XA COMMIT", v)
		}
	}
	x(a, "XA COMMIT '"+xid+"'")
	x(b, r.Must("xn", 1))
}

// XA ROLLBACK after XA PREPARE: the prepared rows are in the binlog, the
// outcome says rollback. Nothing of it is ever published, and never even
// produced into a Kafka transaction that is aborted later.
func TestShapeXARollbackAfterPrepare(t *testing.T) {
	BrokerOnlyAsSink(t)
	matrix(t, AllModes, ShapeOptions{}, shapeXARollback, func(r *ShapeRun) { r.RequireNeverProduced(r.Ghosts) })
}

func shapeXARollback(r *ShapeRun, x execer, cs []*client.Conn, live bool) {
	a, b := cs[0], cs[1]
	xid := r.XID()
	agg := "xa-" + xid
	x(b, r.Must("xr", 1))
	x(a, "XA START '"+xid+"'", r.Ghost(agg, 3), "XA END '"+xid+"'", "XA PREPARE '"+xid+"'")
	qb, between := r.Insert("xr", 1)
	x(b, qb)
	if live {
		r.WaitVisible(between...)
		if v := r.Visible(r.Ghosts...); len(v) > 0 {
			r.T.Fatalf("XA rows %v published at XA PREPARE; they are rolled back next", v)
		}
	}
	x(a, "XA ROLLBACK '"+xid+"'")
	x(b, r.Must("xr", 1))
	// Rolled back before PREPARE (never in the binlog), for contrast.
	xid2 := r.XID()
	x(a, "XA START '"+xid2+"'", r.Ghost("xa-"+xid2, 1), "XA END '"+xid2+"'", "XA ROLLBACK '"+xid2+"'")
	x(b, r.Must("xr", 1))
}

// XA COMMIT ... ONE PHASE: logged as an ordinary transaction.
func TestShapeXAOnePhase(t *testing.T) {
	BrokerOnlyAsSink(t)
	matrix(t, AllModes, ShapeOptions{}, shapeXAOnePhase, nil)
}

func shapeXAOnePhase(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	a := cs[0]
	x(a, r.Must("x1p", 1))
	xid := r.XID()
	x(a, "XA START '"+xid+"'", r.Must("x1p", 3), "XA END '"+xid+"'", "XA COMMIT '"+xid+"' ONE PHASE")
	x(a, r.Must("x1p", 1))
}

// XA PREPARE seen by the relay, then the relay stops (SIGTERM, and
// separately kill -9) and starts again before XA COMMIT, with transactions
// committed before the stop, while it is down and after the restart; the
// preparing client disconnects and a recovering client commits the xid
// from another connection. The XA rows are published once, at XA COMMIT;
// the transactions in between exactly once.
func TestShapeXAPreparedAcrossRelayRestart(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, stop := range []string{"sigterm", "kill-9"} {
		t.Run(stop, func(t *testing.T) {
			r := env.NewShapeRun(t, Straight, ShapeOptions{})
			b, recovery := r.Conn(), r.Conn()
			a, err := r.Env.DB.Root()
			if err != nil {
				t.Fatal(err)
			}
			xid := r.XID()
			agg := "xa-" + xid
			r.Exec(b, r.Must("xs", 1))
			q, xaIDs := r.Insert(agg, 3)
			r.Exec(a, "XA START '"+xid+"'", q, "XA END '"+xid+"'", "XA PREPARE '"+xid+"'")
			q1, beforeStop := r.Insert("xs", 2)
			r.Exec(b, q1)
			r.WaitVisible(beforeStop...)
			if v := r.Visible(xaIDs...); len(v) > 0 {
				t.Fatalf("XA rows %v published at XA PREPARE", v)
			}
			// MariaDB: another connection cannot commit the xid while the
			// preparing one is connected.
			_, err = recovery.Execute("XA COMMIT '" + xid + "'")
			var me *mysql.MyError
			if !errors.As(err, &me) || me.Code != 1397 {
				t.Fatalf("XA COMMIT of a prepared xid from another connection while its owner is connected: %v, want ERROR 1397 XAER_NOTA", err)
			}
			switch stop {
			case "sigterm":
				r.terminate(r.Live, "SIGTERM with an XA transaction prepared")
			default:
				r.Live.Kill()
			}
			a.Close() // the application dies; the xid stays prepared
			rows, err := r.Env.DB.Query("XA RECOVER")
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, row := range rows {
				found = found || row[len(row)-1] == xid
			}
			if !found {
				t.Fatalf("XA RECOVER does not list %s after its connection closed: %v", xid, rows)
			}
			q2, whileDown := r.Insert("xs", 2)
			r.Exec(b, q2)
			r.Live = r.start("")
			r.WaitVisible(whileDown...)
			if v := r.Visible(xaIDs...); len(v) > 0 {
				t.Fatalf("XA rows %v published after the restart, before XA COMMIT", v)
			}
			r.Exec(b, r.Must("xs", 1))
			r.Exec(recovery, "XA COMMIT '"+xid+"'")
			r.Exec(b, r.Must("xs", 1))
			if res := r.Drive(); res.Stopped {
				t.Fatalf("the relay stopped (exit %d):\n%s", res.Code, lastLines(res.Output, 15))
			}
			r.Finish()
		})
	}
}
