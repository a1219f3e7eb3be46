package binlog

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

func TestFramerStatements(t *testing.T) {
	runFrameCases(t, []frameCase{{
		name: "statement-logged insert into the outbox inside a transaction",
		build: func(s *script) {
			s.begin(1).q("a", "INSERT INTO outbox(v) VALUES('st')").xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
		errHas:  "a.outbox",
	}, {
		name: "statement-logged insert into the outbox as a group of its own",
		build: func(s *script) {
			s.gtid(1, flStandalone|flAllowParallel).q("", "INSERT INTO a.outbox(v) VALUES('st')")
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "statement-logged delete from the outbox (qualified, backquoted)",
		build: func(s *script) {
			s.begin(1).q("other", "DELETE FROM `a`.`outbox` WHERE id < 10").xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "statement-logged replace into the outbox after captured rows",
		build: func(s *script) {
			s.begin(1).insert(testTable, 1).q("a", "REPLACE INTO outbox VALUES (1, 'x')").xid()
		},
		want:    []string{"rows #1 a.outbox insert 1"},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "insert into another table reading the outbox: a warning (statement_dml warn)",
		build: func(s *script) {
			s.begin(1).q("a", "INSERT INTO business SELECT * FROM outbox").xid()
		},
		warn: true,
		want: []string{"warning #1", "commit #1 set=#1"},
	}, {
		name: "insert into another table: a stop by default (a trigger could write the outbox)",
		build: func(s *script) {
			s.begin(1).q("a", "INSERT INTO business VALUES (1)").xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "a stored function called by a statement-logged SELECT: a stop by default",
		build: func(s *script) {
			s.begin(1).q("a", "SELECT `a`.`f`(1)").xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "table maintenance the parser cannot read: ignored",
		build: func(s *script) {
			s.standalone(1, "a", "ANALYZE TABLE outbox PERSISTENT FOR ALL")
			s.standalone(2, "a", "REPAIR TABLE outbox QUICK EXTENDED USE_FRM")
		},
		want: []string{"ignored #1", "commit #1 set=#1", "ignored #2", "commit #2 set=#2"},
	}, {
		name: "update of another table: a warning (statement_dml warn)",
		build: func(s *script) {
			s.begin(1).q("a", "UPDATE business SET v = 'x' WHERE id IN (SELECT id FROM outbox)").q("", "COMMIT")
		},
		warn: true,
		want: []string{"warning #1", "commit #1 set=#1"},
	}, {
		name: "update of another table in another database named outbox: a warning (statement_dml warn)",
		build: func(s *script) {
			s.begin(1).q("b", "UPDATE outbox SET v = 'x'").xid()
		},
		warn: true,
		want: []string{"warning #1", "commit #1 set=#1"},
	}, {
		name: "multi-table update joining the outbox",
		build: func(s *script) {
			s.begin(1).q("a", "UPDATE business b JOIN outbox o ON o.id = b.id SET b.v = o.v").xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "multi-table delete naming the outbox",
		build: func(s *script) {
			s.begin(1).q("a", "DELETE b, o FROM business b JOIN outbox o ON o.id = b.id").xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "a statement the parser cannot read that writes the outbox",
		build: func(s *script) {
			s.begin(1).q("a", "INSERT INTO outbox(v) VALUES('x') RETURNING id, v, (((").xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "a statement the parser cannot read that does not name the outbox (statement_dml warn)",
		build: func(s *script) {
			s.begin(1).q("a", "INSERT INTO business(v) VALUES('x') RETURNING id, v, (((").xid()
		},
		warn: true,
		want: []string{"warning #1", "commit #1 set=#1"},
	}, {
		name: "a statement the parser cannot read that does not name the outbox: a stop by default",
		build: func(s *script) {
			s.begin(1).q("a", "INSERT INTO business(v) VALUES('x') RETURNING id, v, (((").xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "LOAD DATA logged as a statement",
		build: func(s *script) {
			s.begin(1)
			s.add(s.event(replication.BEGIN_LOAD_QUERY_EVENT, append(binary.LittleEndian.AppendUint32(nil, 1), "1\tx\n"...)))
			body := binary.LittleEndian.AppendUint32(nil, 7)
			body = binary.LittleEndian.AppendUint32(body, 0)
			body = append(body, 1)
			body = binary.LittleEndian.AppendUint16(body, 0)
			body = binary.LittleEndian.AppendUint16(body, 0)
			body = binary.LittleEndian.AppendUint32(body, 1)
			body = binary.LittleEndian.AppendUint32(body, 0)
			body = binary.LittleEndian.AppendUint32(body, 0)
			body = append(body, 0)
			body = append(body, "a\x00LOAD DATA INFILE '/tmp/x' INTO TABLE business"...)
			s.add(s.event(replication.EXECUTE_LOAD_QUERY_EVENT, body)).xid()
		},
		err:     ErrStatementLogged,
		errGTID: 1,
	}, {
		name: "DDL of another table",
		build: func(s *script) {
			s.standalone(1, "a", "CREATE TABLE business2 (id int primary key)")
		},
		want: []string{"commit #1 set=#1"},
	}, {
		name: "DDL of the outbox: the schema tracker sees it",
		build: func(s *script) {
			s.standalone(1, "", "CREATE TABLE a.outbox (id int primary key, v varchar(20))")
			s.standalone(2, "a", "ALTER TABLE outbox ADD COLUMN w int")
			s.standalone(3, "a", "ALTER TABLE business ADD COLUMN w int")
		},
		want: []string{"ddl #1", "commit #1 set=#1", "ddl #2", "commit #2 set=#2", "commit #3 set=#3"},
	}, {
		name: "a trigger that writes the outbox is a definition, not a change",
		build: func(s *script) {
			s.standalone(1, "a", "CREATE DEFINER=`root`@`%` TRIGGER alarm_outbox AFTER INSERT ON alarm FOR EACH ROW "+
				"INSERT INTO outbox(v) VALUES(NEW.v)")
		},
		want: []string{"ignored #1", "commit #1 set=#1"},
	}, {
		name: "a procedure that writes the outbox is a definition, not a change",
		build: func(s *script) {
			s.standalone(1, "a", "CREATE DEFINER=`root`@`%` PROCEDURE p() BEGIN INSERT INTO outbox(v) VALUES('p'); END")
		},
		want: []string{"ignored #1", "commit #1 set=#1"},
	}, {
		name: "MySQL 8.0.21+ CREATE TABLE ... SELECT: one transaction",
		only: mysql.MySQLFlavor,
		build: func(s *script) {
			s.gtid(1, 0).q("a", "CREATE TABLE `copy` (\n  `v` varchar(20) DEFAULT NULL\n) START TRANSACTION")
			s.insert("a.copy", 3).xid()
			s.begin(2).insert(testTable, 1).xid()
		},
		want: []string{"commit #1 set=#1", "rows #2 a.outbox insert 1", "commit #2 set=#2"},
	}, {
		name: "MariaDB CREATE TABLE ... SELECT: one transaction",
		only: mysql.MariaDBFlavor,
		build: func(s *script) {
			s.gtid(1, flDDL|flAllowParallel).q("", "CREATE TABLE `a`.`copy` (\n  `v` varchar(20) DEFAULT NULL\n)")
			s.insert("a.copy", 3).xid()
			s.begin(2).insert(testTable, 1).xid()
		},
		want: []string{"commit #1 set=#1", "rows #2 a.outbox insert 1", "commit #2 set=#2"},
	}})
}

func TestFramerUnframed(t *testing.T) {
	unknown := func(s *script) *script { return s.add(s.event(evUnknown, []byte{1, 2, 3})) }
	runFrameCases(t, []frameCase{{
		name:  "MySQL anonymous transaction",
		only:  mysql.MySQLFlavor,
		build: func(s *script) { s.add(s.mysqlGTID("", 0)) },
		err:   ErrUnframed,
	}, {
		name: "a GTID while a group is still open",
		build: func(s *script) {
			s.begin(1).insert(testTable, 1).begin(2)
		},
		want:    []string{"rows #1 a.outbox insert 1"},
		err:     ErrUnframed,
		errGTID: 1,
	}, {
		name: "a GTID after a standalone group's statement is fine",
		build: func(s *script) {
			s.standalone(1, "", "CREATE TABLE a.t (id int)").begin(2).xid()
		},
		want: []string{"commit #1 set=#1", "commit #2 set=#2"},
	}, {
		name: "rows outside a group",
		build: func(s *script) {
			s.begin(1).insert(testTable, 1).xid().insert(testTable, 1)
		},
		want: []string{"rows #1 a.outbox insert 1", "commit #1 set=#1"},
		err:  ErrUnframed,
	}, {
		name: "an XID outside a group",
		build: func(s *script) {
			s.begin(1).xid().xid()
		},
		want: []string{"commit #1 set=#1"},
		err:  ErrUnframed,
	}, {
		name: "a statement outside a group",
		build: func(s *script) {
			s.q("", "CREATE TABLE a.t (id int)")
		},
		err: ErrUnframed,
	}, {
		name: "an incident",
		build: func(s *script) {
			s.begin(1).insert(testTable, 1).add(s.event(replication.INCIDENT_EVENT, []byte{1, 0, 4, 'l', 'o', 's', 't'}))
		},
		want:    []string{"rows #1 a.outbox insert 1"},
		err:     ErrUnframed,
		errGTID: 1,
	}, {
		name: "an incident between groups",
		build: func(s *script) {
			s.add(s.event(replication.INCIDENT_EVENT, []byte{1, 0, 0}))
		},
		err: ErrUnframed,
	}, {
		name: "an unknown event before the captured table's map",
		build: func(s *script) {
			unknown(s.begin(1)).insert(testTable, 1).xid()
		},
		err:     ErrUnframed,
		errGTID: 1,
		errHas:  "(type 240)",
	}, {
		name: "an unknown event after the captured table's map",
		build: func(s *script) {
			unknown(s.begin(1).insert(testTable, 1)).xid()
		},
		want:    []string{"rows #1 a.outbox insert 1"},
		err:     ErrUnframed,
		errGTID: 1,
	}, {
		name: "an unknown event in a transaction of other tables",
		build: func(s *script) {
			unknown(s.begin(1).insert("a.business", 1)).insert("a.business", 1).xid()
		},
		want: []string{"commit #1 set=#1"},
	}, {
		name: "an unknown event between groups",
		build: func(s *script) {
			unknown(s.begin(1).xid()).begin(2).xid()
		},
		want: []string{"commit #1 set=#1", "commit #2 set=#2"},
	}, {
		name: "a group cut off: still open",
		build: func(s *script) {
			s.begin(1).insert(testTable, 1)
		},
		want: []string{"rows #1 a.outbox insert 1"},
		open: true,
	}})
}

// Events a group may hold that change nothing.
func TestFramerIgnorable(t *testing.T) {
	ignorable := func(s *script) {
		s.add(s.event(replication.MARIADB_ANNOTATE_ROWS_EVENT, []byte("INSERT INTO outbox VALUES (1)")))
		s.add(s.event(replication.ROWS_QUERY_EVENT, append([]byte{30}, "INSERT INTO outbox VALUES (1)"...)))
		s.add(s.event(replication.INTVAR_EVENT, append([]byte{2}, binary.LittleEndian.AppendUint64(nil, 5)...)))
		s.add(s.event(replication.RAND_EVENT, make([]byte, 16)))
		s.add(s.event(replication.USER_VAR_EVENT, append(binary.LittleEndian.AppendUint32(nil, 1), 'x', 1)))
		s.add(s.event(replication.HEARTBEAT_EVENT, []byte("binlog.000001")))
		s.add(s.event(replication.ROTATE_EVENT, append(binary.LittleEndian.AppendUint64(nil, 4), "binlog.000002"...)))
		s.add(s.event(replication.FORMAT_DESCRIPTION_EVENT, s.fde()))
		s.add(s.event(replication.PREVIOUS_GTIDS_EVENT, make([]byte, 8)))
	}
	runFrameCases(t, []frameCase{{
		name: "inside a transaction",
		build: func(s *script) {
			s.begin(1)
			ignorable(s)
			s.insert(testTable, 1)
			ignorable(s)
			s.xid()
		},
		want: []string{"rows #1 a.outbox insert 1", "commit #1 set=#1"},
	}, {
		name: "between groups",
		build: func(s *script) {
			ignorable(s)
			s.begin(1).insert(testTable, 1).xid()
			ignorable(s)
		},
		// A heartbeat between groups says the server had nothing more to
		// send (the relay's lag is 0); inside a group it is ignored.
		want: []string{"heartbeat ", "rows #1 a.outbox insert 1", "commit #1 set=#1", "heartbeat "},
	}, {
		name: "inside an XA transaction",
		build: func(s *script) {
			s.xaStart(1, x1)
			ignorable(s)
			s.insert(testTable, 1).xaEnd(x1)
			ignorable(s)
			s.xaPrepare(false, x1)
		},
		want: []string{"rows #1 a.outbox insert 1 xid=7831,,1", "prepare #1 xid=7831,,1 set=#1"},
	}})
}

// A statement-logged change run under MariaDB's SET STATEMENT ... FOR is
// found where the server found the statement: under NO_BACKSLASH_ESCAPES
// default_master_connection='\' is a whole string and the SELECT is in the
// next one; read with escapes, the prefix ended at the FOR inside it, and
// the insert into the outbox after the last FOR was never seen (its rows
// lost: source.statement_dml: warn only warned of a SELECT). Without the
// event's sql_mode, each reading is checked.
func TestFramerStopsOnOutboxChangeBehindSetStatementPrefix(t *testing.T) {
	q := `SET STATEMENT default_master_connection='\', default_master_connection=' FOR SELECT 1 -- ' FOR INSERT INTO outbox (v) VALUES (1)`
	for name, vars := range map[string][]byte{
		"NO_BACKSLASH_ESCAPES": sqlModeStatusVars(1 << 20),
		"sql_mode unknown":     nil,
	} {
		f := framer{state: stateTx, gtid: "0-1-7", allowStatements: true, // source.statement_dml: warn
			captured: func(db, table []byte) bool { return string(table) == "outbox" }}
		_, _, err := f.query(&replication.QueryEvent{Schema: []byte("a"), Query: []byte(q), StatusVars: vars})
		if !errors.Is(err, ErrStatementLogged) || !strings.Contains(err.Error(), "a.outbox") {
			t.Errorf("%s: error %v, warning %q: want ErrStatementLogged", name, err, f.warning)
		}
	}
}
