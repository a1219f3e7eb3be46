//go:build integration

package itest

// Statement-logged changes, DBA maintenance and foreign XA transactions
// against the real MariaDB: inputs that real applications, DBAs and
// transaction managers produce.

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// An outbox row written by a trigger under statement logging stops the
// relay, never moves the checkpoint past it. The failure guarded against: a
// trigger that feeds the outbox (a common way) and a session that logs
// statements (SET SESSION binlog_format='STATEMENT', or a MIXED server):
// the binlog holds only `INSERT INTO alarm_record ...`; the trigger's
// outbox row is committed but in no binlog event. The relay only logs a
// warning and moves its checkpoint past it: the row is lost. The contract
// says anything that could hide outbox rows stops the relay.
func TestTriggerUnderStatementLoggingStops(t *testing.T) {
	BrokerOnlyAsSink(t)
	r := env.NewShapeRun(t, Straight, ShapeOptions{})
	c, st := r.Conn(), r.Conn()
	r.Exec(c, fmt.Sprintf("CREATE TRIGGER %s.alarm_to_outbox AFTER INSERT ON %s.alarm_record FOR EACH ROW "+
		"INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) "+
		"VALUES (CONCAT('%s-trig-', NEW.device_id), 'shape', 'trig', 'AlarmRaised', '{\"seq\":1}')",
		r.S.Name, r.S.Name, r.S.Table(), r.S.Name))
	r.Exec(c, r.Must("n", 1))
	r.Exec(st, "SET SESSION binlog_format='STATEMENT'",
		fmt.Sprintf("INSERT INTO %s.alarm_record (device_id, level, temp, seq) VALUES ('d1', 'HIGH', 90, 1)", r.S.Name))
	r.Exec(c, r.Must("n", 1))
	if res := r.Drive(); res.Stopped {
		t.Logf("relay stopped (good): %s", stopError(res.Output))
		return
	}
	r.Finish() // fails: the trigger's row is missing
}

// DBA maintenance on the outbox table, logged as a statement, does not stop
// the relay. The failure guarded against: DBA maintenance on the outbox
// table, logged by MariaDB as a standalone statement in ROW format: the
// framer hands it to dmlTargets, whose TiDB parser cannot read it, and the
// statement names the outbox, so the relay stops with ErrStatementLogged
// ("changed ... with a statement"), fatal, for a statement that changes no
// row.
func TestDBAMaintenanceStatementDoesNotStop(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, tc := range []struct{ name, q string }{
		{"analyze-persistent", "ANALYZE TABLE %s PERSISTENT FOR ALL"},
		{"repair", "REPAIR TABLE %s"},
		{"optimize", "OPTIMIZE TABLE %s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := env.NewShapeRun(t, Straight, ShapeOptions{})
			c := r.Conn()
			r.Exec(c, r.Must("n", 1))
			if _, err := c.Execute(fmt.Sprintf(tc.q, r.S.Table())); err != nil {
				t.Fatal(err)
			}
			r.Exec(c, r.Must("n", 1))
			if res := r.Drive(); res.Stopped {
				t.Fatalf("%s: the relay stopped on a maintenance statement that changes no row:\n%s",
					fmt.Sprintf(tc.q, r.S.Table()), stopError(res.Output))
			}
			r.Finish()
		})
	}
}

// The XA COMMIT of an unrelated XA transaction prepared before the first
// start passes. The failure guarded against: an XA transaction of another
// application (it touches no captured table) is prepared when the relay
// first starts (start: now). Its XA COMMIT then stops the relay:
// ErrUnknownXA, fatal, at every restart. Any XA workload (a Java EE /
// Spring JTA application with XA data sources) has one in flight at almost
// every instant.
func TestUnrelatedXAPreparedBeforeFirstStartPasses(t *testing.T) {
	BrokerOnlyAsSink(t)
	a, err := env.DB.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	other := env.Unique("other")
	if err := env.DB.Exec("CREATE DATABASE "+other, "CREATE TABLE "+other+".t (id INT PRIMARY KEY) ENGINE=InnoDB"); err != nil {
		t.Fatal(err)
	}
	xid := other + "-xa"
	for _, q := range []string{"XA START '" + xid + "'", "INSERT INTO " + other + ".t VALUES (1)", "XA END '" + xid + "'", "XA PREPARE '" + xid + "'"} {
		if _, err := a.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	r := env.NewShapeRun(t, Straight, ShapeOptions{}) // pins start: now
	c := r.Conn()
	r.Exec(c, r.Must("n", 1))
	if _, err := a.Execute("XA COMMIT '" + xid + "'"); err != nil {
		t.Fatal(err)
	}
	r.Exec(c, r.Must("n", 1))
	if res := r.Drive(); res.Stopped {
		t.Fatalf("the relay stopped at the XA COMMIT of a transaction that touched no captured table:\n%s", stopError(res.Output))
	}
	r.Finish()
}

// checkpoint skip gets past a statement-logged change while an XA
// transaction with outbox rows is prepared. The failure guarded against:
// the operator's documented way past a statement-logged outbox change is
// `checkpoint skip --gtid G`. With an XA transaction with outbox rows
// prepared (pending) at that moment, skip only adds G to gtid_set; the
// restart reads from checkpoint.XA.Resume (before the prepare, before G),
// the framer meets G again and stops again: the relay cannot get past G
// until the XA transaction ends, and it cannot see that end either.
func TestSkipPastStatementWhileXAPrepared(t *testing.T) {
	BrokerOnlyAsSink(t)
	r := env.NewShapeRun(t, Straight, ShapeOptions{MaxRecords: 1})
	c, st := r.Conn(), r.Conn()
	x, err := r.Env.DB.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	xid := r.XID()
	q, _ := r.Insert("xa-"+xid, 1)
	r.Exec(x, "XA START '"+xid+"'", q, "XA END '"+xid+"'", "XA PREPARE '"+xid+"'")
	qb, before := r.Insert("n", 1)
	r.Exec(c, qb)
	r.WaitVisible(before...)
	beforeGTID := r.LastGTID(c)
	Eventually(t, 30*time.Second, func() error {
		if cp := r.Checkpoint(); !ContainsGTID(cp, beforeGTID) {
			return fmt.Errorf("checkpoint %+v does not cover %s yet", cp, beforeGTID)
		}
		return nil
	})
	r.Exec(st, "SET SESSION binlog_format='STATEMENT'")
	q1, ids := r.Insert("st", 1)
	r.Exec(st, q1)
	gtid := r.LastGTID(st)
	r.Skipped = append(r.Skipped, ids...)
	r.Exec(c, r.Must("n", 1))
	res := r.Drive()
	if !res.Stopped {
		t.Fatalf("the relay did not stop at statement-logged DML (%s)", gtid)
	}
	t.Logf("stopped: %s", stopError(res.Output))
	how := operatorSkip(t, r, gtid)
	if res := r.Resume(); res.Stopped {
		t.Fatalf("after %s with XA %s prepared, the relay stopped again:\n%s", how, xid, lastLines(res.Output, 10))
	}
	r.Exec(x, "XA COMMIT '"+xid+"'")
	r.Exec(c, r.Must("n", 1))
	if res := r.Drive(); res.Stopped {
		t.Fatalf("stopped: %s", stopError(res.Output))
	}
	r.Finish()
}

var _ = strings.Contains

// checkpoint skip is accepted when a full batch ended right before the
// stop. The failure guarded against: a committed transaction whose rows
// filled a batch (kafka.batch.max_records reached on its last row: a
// partial commit holding all of them) right before a statement-logged
// outbox change: the relay stops at the second without committing the first
// one's position (the commit waits for a tick). The checkpoint is "previous
// + partial N of the first", so the documented `checkpoint skip --gtid G`
// refuses G as "not the next" transaction; only --force gets past.
func TestSkipAcceptedAfterFullBatchBeforeStop(t *testing.T) {
	BrokerOnlyAsSink(t)
	r := env.NewShapeRun(t, Straight, ShapeOptions{MaxRecords: 1})
	c, st := r.Conn(), r.Conn()
	r.Exec(st, "SET SESSION binlog_format='STATEMENT'")
	r.Exec(c, r.Must("n", 1))
	q1, ids := r.Insert("st", 1)
	r.Exec(st, q1)
	gtid := r.LastGTID(st)
	r.Skipped = append(r.Skipped, ids...)
	if res := r.Drive(); !res.Stopped {
		t.Fatalf("the relay did not stop at statement-logged DML (%s)", gtid)
	}
	operatorSkip(t, r, gtid)
	if res := r.Resume(); res.Stopped {
		t.Fatalf("stopped again:\n%s", lastLines(res.Output, 10))
	}
	r.Finish()
}
