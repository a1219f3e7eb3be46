package binlog

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

func TestParseXID(t *testing.T) {
	const x1 = "7831,,1" // gtrid 'x1', no bqual, format 1
	for _, tc := range []struct {
		in, want string // want "": an error
	}{
		{"'x1'", x1},
		{" 'x1' ", x1},
		{"X'7831'", x1},
		{"x'7831'", x1},
		{"X'7831',X'',1", x1},
		{"'x1','',1", x1},
		{"'x1' , '' , 1", x1},
		{"0x7831", x1},
		{"0x7831,'',1", x1},
		{`"x1"`, x1},
		{"'x1';", x1},
		{"'x1' ; ", x1},
		{"'x1','b'", "7831,62,1"},
		{"'x1','b',7", "7831,62,7"},
		{"X'7835',X'6235',7", "7835,6235,7"},
		{"'x1','b',-1", "7831,62,-1"},
		{"'x1','b',0", "7831,62,0"},
		{"'it''s'", "69742773,,1"},
		{`"say ""hi"""`, "7361792022686922,,1"},
		{`'it\'s'`, "69742773,,1"},
		{`'a\\b'`, "615c62,,1"},
		{"''", ",,1"},
		{"X''", ",,1"},
		{"'x1' junk", ""},
		{"'x1' ONE PHASE", ""},
		{"'x1',", ""},
		{"'x1','b',", ""},
		{"'x1','b',seven", ""},
		{"'x1','b',7,8", ""},
		{"'x1", ""},
		{"X'78", ""},
		{"X'783'", ""},
		{"X'zz'", ""},
		{"0X7831", ""},
		{"0x78g1", ""},
		{"x1", ""},
		{"", ""},
	} {
		got, err := parseXID(tc.in)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("parseXID(%q) = %q, want an error", tc.in, got)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("parseXID(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// Every spelling of one xid is the same canonical xid, which is also what
// XA_PREPARE_LOG_EVENT decodes to.
func TestXIDSpellingsAgree(t *testing.T) {
	_, fromEvent, err := decodeXAPrepare(xaPrepareBody(false, xaID{format: 1, gtrid: "x1"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"'x1'", "X'7831'", "'x1','',1", "0x7831", `"x1"`, "X'7831',X'',1"} {
		if got, err := parseXID(s); err != nil || got != fromEvent {
			t.Errorf("parseXID(%q) = %q, %v; the prepare event gives %q", s, got, err, fromEvent)
		}
	}
}

func TestXAEnd(t *testing.T) {
	for _, tc := range []struct {
		in       string
		xid      string // "": an error
		onePhase bool
	}{
		{"'x1'", "7831,,1", false},
		{"X'7831',X'',1", "7831,,1", false},
		{"'x1';", "7831,,1", false},
		{"'x1' ONE PHASE", "7831,,1", true},
		{"X'7831',X'',1 one   phase ;", "7831,,1", true},
		{"'x1' ONE", "", false},
		{"'x1' ONE PHASE now", "", false},
		{"'x1' PHASE", "", false},
		{"'x1' ONEPHASE", "", false},
		{"'x1' junk", "", false},
		{"", "", false},
	} {
		xid, onePhase, err := xaEnd(tc.in)
		switch {
		case tc.xid == "" && err == nil:
			t.Errorf("xaEnd(%q) = %q, %v; want an error", tc.in, xid, onePhase)
		case tc.xid != "" && (err != nil || xid != tc.xid || onePhase != tc.onePhase):
			t.Errorf("xaEnd(%q) = %q, %v, %v; want %q, %v", tc.in, xid, onePhase, err, tc.xid, tc.onePhase)
		}
	}
}

func TestDecodeXAPrepare(t *testing.T) {
	body := func(onePhase byte, format int32, gl, bl uint32, data string) []byte {
		b := []byte{onePhase}
		b = binary.LittleEndian.AppendUint32(b, uint32(format))
		b = binary.LittleEndian.AppendUint32(b, gl)
		b = binary.LittleEndian.AppendUint32(b, bl)
		return append(b, data...)
	}
	for _, tc := range []struct {
		name     string
		data     []byte
		xid      string // "": an error
		onePhase bool
	}{
		{"prepare", body(0, 1, 2, 0, "x1"), "7831,,1", false},
		{"one phase", body(1, 1, 2, 0, "x1"), "7831,,1", true},
		{"bqual and format", body(0, 7, 2, 2, "x5b5"), "7835,6235,7", false},
		{"negative format", body(0, -1, 1, 1, "gb"), "67,62,-1", false},
		{"empty gtrid", body(0, 0, 0, 0, ""), ",,0", false},
		{"longest xid", body(0, 1, 64, 64, strings.Repeat("g", 64)+strings.Repeat("b", 64)),
			strings.Repeat("67", 64) + "," + strings.Repeat("62", 64) + ",1", false},
		{"empty", nil, "", false},
		{"short", body(0, 1, 2, 0, "")[:12], "", false},
		{"gtrid longer than the data", body(0, 1, 3, 0, "x1"), "", false},
		{"bqual longer than the data", body(0, 1, 2, 1, "x1"), "", false},
		{"gtrid over 64 bytes", body(0, 1, 65, 0, strings.Repeat("g", 65)), "", false},
		{"bqual over 64 bytes", body(0, 1, 0, 65, strings.Repeat("b", 65)), "", false},
		{"lengths that overflow", body(0, 1, 0xffffffff, 0xffffffff, "x1"), "", false},
	} {
		onePhase, xid, err := decodeXAPrepare(tc.data)
		switch {
		case tc.xid == "" && err == nil:
			t.Errorf("%s: decoded %q, %v; want an error", tc.name, xid, onePhase)
		case tc.xid != "" && (err != nil || xid != tc.xid || onePhase != tc.onePhase):
			t.Errorf("%s: %q, %v, %v; want %q, %v", tc.name, xid, onePhase, err, tc.xid, tc.onePhase)
		}
	}
}

func TestDMLTargets(t *testing.T) {
	for _, tc := range []struct {
		db, q  string
		tables []string // nil: not DML
		err    bool
	}{
		{"a", "INSERT INTO outbox(v) VALUES('st')", []string{"a.outbox"}, false},
		{"a", "insert into `outbox` (v) values ('st')", []string{"a.outbox"}, false},
		{"", "INSERT INTO a.outbox VALUES (1, 'x')", []string{"a.outbox"}, false},
		{"other", "INSERT INTO `a`.`outbox` VALUES (1, 'x')", []string{"a.outbox"}, false},
		{"a", "INSERT INTO outbox SET v = 1 ON DUPLICATE KEY UPDATE v = 2", []string{"a.outbox"}, false},
		{"a", "INSERT INTO outbox SELECT * FROM b.business", []string{"a.outbox"}, false},
		{"a", "REPLACE INTO outbox VALUES (1, 'x')", []string{"a.outbox"}, false},
		{"a", "REPLACE outbox SELECT * FROM business", []string{"a.outbox"}, false},
		// The outbox only read: the target is the other table.
		{"a", "INSERT INTO business SELECT * FROM outbox", []string{"a.business"}, false},
		{"a", "INSERT INTO business SELECT * FROM outbox UNION SELECT * FROM outbox2", []string{"a.business"}, false},
		{"a", "INSERT INTO business VALUES ((SELECT max(id) FROM outbox))", []string{"a.business"}, false},
		{"a", "INSERT INTO business TABLE outbox", []string{"a.business"}, false},
		{"a", "UPDATE business SET v = (SELECT v FROM outbox LIMIT 1)", []string{"a.business"}, false},
		{"a", "UPDATE business SET v = 'x' WHERE id IN (SELECT id FROM outbox)", []string{"a.business"}, false},
		{"a", "DELETE FROM business WHERE id IN (SELECT id FROM outbox)", []string{"a.business"}, false},
		{"a", "WITH t AS (SELECT id FROM outbox) UPDATE business b JOIN t ON t.id = b.id SET b.v = 1",
			[]string{"a.business", "a.t"}, false},
		// Single-table changes of the outbox.
		{"a", "UPDATE outbox SET v = 1 WHERE id IN (SELECT id FROM business)", []string{"a.outbox"}, false},
		{"a", "UPDATE `a`.`outbox` AS o SET o.v = 1", []string{"a.outbox"}, false},
		{"b", "UPDATE outbox SET v = 1", []string{"b.outbox"}, false},
		{"a", "DELETE FROM outbox WHERE id < 3", []string{"a.outbox"}, false},
		{"a", "WITH t AS (SELECT id FROM business) DELETE FROM outbox WHERE id IN (SELECT id FROM t)",
			[]string{"a.outbox"}, false},
		// Multi-table statements name every joined table.
		{"a", "UPDATE business b JOIN outbox o ON o.id = b.id SET b.v = o.v", []string{"a.business", "a.outbox"}, false},
		{"a", "UPDATE business, outbox SET business.v = outbox.v", []string{"a.business", "a.outbox"}, false},
		{"a", "DELETE FROM a.outbox USING a.outbox JOIN b.business ON 1", []string{"a.outbox", "b.business", "a.outbox"}, false},
		// LOAD DATA.
		{"a", "LOAD DATA INFILE '/tmp/x' INTO TABLE outbox", []string{"a.outbox"}, false},
		{"a", "LOAD DATA LOCAL INFILE 'x' INTO TABLE b.outbox", []string{"b.outbox"}, false},
		// Several statements.
		{"a", "INSERT INTO outbox VALUES (1); UPDATE business SET v = 2", []string{"a.outbox", "a.business"}, false},
		// Not DML.
		{"a", "CREATE TABLE business2 (id int)", nil, false},
		{"a", "SELECT * FROM outbox", []string{}, false}, // a stored function call, as far as a statement log tells
		{"a", "TRUNCATE TABLE outbox", nil, false},
		{"a", "SAVEPOINT `s1`", nil, false},
		// Unreadable.
		{"a", "INSERT INTO outbox(v) VALUES('x') RETURNING id", nil, true},
		{"a", "LOAD XML INFILE 'x' INTO TABLE outbox", nil, true},
		{"a", "INSERT INTO", nil, true},
	} {
		tables, dml, err := dmlTargets(tc.db, tc.q)
		switch {
		case tc.err != (err != nil):
			t.Errorf("%q: error %v", tc.q, err)
		case dml != (tc.tables != nil) || !slices.Equal(tables, tc.tables) && tc.tables != nil:
			t.Errorf("%q in %q: %v (dml %v), want %v", tc.q, tc.db, tables, dml, tc.tables)
		}
	}
	// A multi-table DELETE names the joined tables (and its aliases, read
	// as tables: harmless, they only add names to check).
	tables, dml, err := dmlTargets("a", "DELETE b FROM business b JOIN outbox o ON o.id = b.id")
	if err != nil || !dml || !slices.Contains(tables, "a.outbox") || !slices.Contains(tables, "a.business") {
		t.Errorf("multi-table delete: %v, %v, %v", tables, dml, err)
	}
}

func TestStatementWords(t *testing.T) {
	for _, tc := range []struct {
		q    string
		word string
		is   bool
	}{
		{"BEGIN", "BEGIN", true},
		{"begin", "BEGIN", true},
		{"BEGIN;", "BEGIN", true},
		{"BEGIN WORK", "BEGIN", true},
		{"BEGIN /* c */", "BEGIN", true},
		{"BEGINNING", "BEGIN", false},
		{"COMMIT", "COMMIT", true},
		{"COMMIT AND CHAIN", "COMMIT", false},
		{"ROLLBACK", "ROLLBACK", true},
		{"ROLLBACK TO `s1`", "ROLLBACK", false},
	} {
		if got := isWord(tc.q, tc.word); got != tc.is {
			t.Errorf("isWord(%q, %q) = %v", tc.q, tc.word, got)
		}
	}
	for _, tc := range []struct {
		in, want string
	}{
		{"/* app */ BEGIN", "BEGIN"},
		{"# note\nCOMMIT", "COMMIT"},
		{"-- note\n  SAVEPOINT s", "SAVEPOINT s"},
		{"/*!40000 ALTER TABLE t */", "/*!40000 ALTER TABLE t */"},
		{"/* unterminated", "/* unterminated"},
	} {
		if got := stripComments(tc.in); got != tc.want {
			t.Errorf("stripComments(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		in, want string
	}{
		{" `s1`", "s1"},
		{"`S 2`;", "s 2"},
		{"s1", "s1"},
		{"`a``b`", "a`b"},
	} {
		if got := savepointName(tc.in); got != tc.want {
			t.Errorf("savepointName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, tc := range []struct {
		q  string
		is bool
	}{
		{"CREATE TABLE `t` (\n  `v` int\n) START TRANSACTION", true},
		{"create table t (v int) start transaction;", true},
		{"CREATE TABLE t (v int)", false},
		{"CREATE TABLE t_START_TRANSACTION (v int)", false},
		{"INSERT INTO t VALUES ('START TRANSACTION')", false},
		{"START TRANSACTION", false},
	} {
		if got := isCreateSelect(tc.q); got != tc.is {
			t.Errorf("isCreateSelect(%q) = %v", tc.q, got)
		}
	}
}
