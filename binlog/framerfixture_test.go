package binlog

// The framer tests' fixture: an encoder of real binlog events for each
// flavor, scripts of source transactions built from them, a syncer that
// stamps GTIDs as a server does, and the rendering of framed events the
// cases compare.

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/schema"
)

// mysql8PostHeaders is MySQL 8.0's format description post-header lengths
// (from go-mysql's own transaction payload test).
var mysql8PostHeaders = []byte{0x38, 0xd, 0x0, 0x8, 0x0, 0x12, 0x0, 0x4, 0x4, 0x4, 0x4, 0x12, 0x0, 0x0, 0x5c, 0x0, 0x4,
	0x1a, 0x8, 0x0, 0x0, 0x0, 0x8, 0x8, 0x8, 0x2, 0x0, 0x0, 0x0, 0xa, 0xa, 0xa, 0x19, 0x19, 0x0, 0x12, 0x34, 0x0, 0xa, 0x28, 0x0}

// mariadbPostHeaders is MariaDB 10.11's (from a real binlog).
var mariadbPostHeaders = mustHex("380d000800120004040404120000e400041a08000000080808020000000a0a0a0000000000000a0a0a" +
	strings.Repeat("00", 96) + "041304000d0808080a0a0a")

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// encoder writes binlog events of one flavor and decodes them with
// go-mysql's parser.
type encoder struct {
	t      testing.TB
	flavor string
	p      *replication.BinlogParser
	tables map[string]uint64
}

func newEncoder(t testing.TB, flavor string) *encoder {
	p := replication.NewBinlogParser()
	p.SetFlavor(flavor)
	// As the reader's syncer: rows of tables that are not captured are not
	// decoded; the relay's decoder takes the rows of the captured one.
	p.SetRowsEventDecodeFunc(rowsDecoder(func(schema, table []byte) bool {
		return string(schema)+"."+string(table) == testTable
	}, func() (int64, string) { return 1 << 30, "the test's" }))
	e := &encoder{t: t, flavor: flavor, p: p, tables: map[string]uint64{}}
	e.decode(e.raw(replication.FORMAT_DESCRIPTION_EVENT, e.fde()))
	return e
}

// fde is a format description event's body, checksums off.
func (e *encoder) fde() []byte {
	version, headers := "8.0.36", mysql8PostHeaders
	if e.flavor == mysql.MariaDBFlavor {
		version, headers = "10.11.19-MariaDB-log", mariadbPostHeaders
	}
	b := binary.LittleEndian.AppendUint16(nil, 4)
	b = append(b, make([]byte, 50)...)
	copy(b[2:], version)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, replication.EventHeaderSize)
	b = append(b, headers...)
	return append(b, byte(replication.BINLOG_CHECKSUM_ALG_OFF), 0, 0, 0, 0)
}

// raw is an event's bytes: a v4 header, then body.
func (e *encoder) raw(t replication.EventType, body []byte) []byte {
	h := binary.LittleEndian.AppendUint32(nil, 1_700_000_000)
	h = append(h, byte(t))
	h = binary.LittleEndian.AppendUint32(h, 1) // server_id
	h = binary.LittleEndian.AppendUint32(h, uint32(replication.EventHeaderSize+len(body)))
	h = binary.LittleEndian.AppendUint32(h, 0) // log_pos
	h = binary.LittleEndian.AppendUint16(h, 0) // flags
	return append(h, body...)
}

func (e *encoder) decode(raw []byte) *replication.BinlogEvent {
	e.t.Helper()
	ev, err := e.p.Parse(raw)
	if err != nil {
		e.t.Fatalf("go-mysql cannot decode a %s event: %v", replication.EventType(raw[4]), err)
	}
	return ev
}

func (e *encoder) event(t replication.EventType, body []byte) *replication.BinlogEvent {
	e.t.Helper()
	return e.decode(e.raw(t, body))
}

func (e *encoder) query(db, q string) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 7) // thread id
	b = binary.LittleEndian.AppendUint32(b, 0)    // exec time
	b = append(b, byte(len(db)))
	b = binary.LittleEndian.AppendUint16(b, 0) // error code
	b = binary.LittleEndian.AppendUint16(b, 0) // status vars
	b = append(b, db...)
	b = append(b, 0)
	return append(b, q...)
}

// tableMap: columns id INT and v VARCHAR(20), with their names (FULL row
// metadata).
func (e *encoder) tableMap(table string) *replication.BinlogEvent {
	db, tbl, _ := strings.Cut(table, ".")
	id, ok := e.tables[table]
	if !ok {
		id = uint64(100 + len(e.tables))
		e.tables[table] = id
	}
	b := binary.LittleEndian.AppendUint64(nil, id)[:6]
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = append(b, byte(len(db)))
	b = append(b, db...)
	b = append(b, 0, byte(len(tbl)))
	b = append(b, tbl...)
	b = append(b, 0)
	b = append(b, 2, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_VARCHAR)
	b = append(b, 2, 80, 0) // metadata: VARCHAR max length 80 bytes
	b = append(b, 0b10)     // nullable: v
	names := []byte{2, 'i', 'd', 1, 'v'}
	b = append(b, replication.TABLE_MAP_OPT_META_COLUMN_NAME, byte(len(names)))
	b = append(b, names...)
	return e.event(replication.TABLE_MAP_EVENT, b)
}

// rowsEvent of n rows (n row pairs for an update), v1 (MariaDB) or v2
// (MySQL), every column present and none NULL.
func (e *encoder) rowsEvent(op Op, table string, n int) *replication.BinlogEvent {
	return e.imageEvent(op, table, 0b11, n, false)
}

// imageEvent is a rows event of n rows (n row pairs for an update) whose
// images hold the columns present marks (bit 0: id, bit 1: v; both images
// of an update alike), v NULL in each when null. As the server writes a
// partial image (binlog_row_image MINIMAL or NOBLOB): the NULL bitmap and
// the values cover the present columns only.
func (e *encoder) imageEvent(op Op, table string, present byte, n int, null bool) *replication.BinlogEvent {
	return e.imageEventOf(op, false, table, present, n, null)
}

// partialUpdateEvent is MySQL's PARTIAL_UPDATE_ROWS_EVENT of n row pairs
// (binlog_row_value_options=PARTIAL_JSON): an update whose after images
// each start with the row's value options (partial JSON updates on; the
// table has no JSON column, so no partial bits follow).
func (e *encoder) partialUpdateEvent(table string, n int) *replication.BinlogEvent {
	return e.imageEventOf(OpUpdate, true, table, 0b11, n, false)
}

func (e *encoder) imageEventOf(op Op, partialJSON bool, table string, present byte, n int, null bool) *replication.BinlogEvent {
	types := map[Op][2]replication.EventType{
		OpInsert: {replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2},
		OpUpdate: {replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2},
		OpDelete: {replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2},
	}[op]
	t := types[1]
	if partialJSON {
		t = replication.PARTIAL_UPDATE_ROWS_EVENT
	}
	b := binary.LittleEndian.AppendUint64(nil, e.tables[table])[:6]
	b = binary.LittleEndian.AppendUint16(b, replication.RowsEventStmtEndFlag)
	if e.flavor == mysql.MariaDBFlavor {
		t = types[0]
	} else {
		b = binary.LittleEndian.AppendUint16(b, 2) // no extra row data
	}
	b = append(b, 2, present) // two columns
	if op == OpUpdate {
		b = append(b, present)
	}
	image := func(i int, v string) {
		var nulls byte
		if null && present&0b10 != 0 {
			nulls = 1 << bits.OnesCount8(present&0b01) // v's place among the present columns
		}
		b = append(b, nulls)
		if present&0b01 != 0 {
			b = binary.LittleEndian.AppendUint32(b, uint32(i))
		}
		if present&0b10 != 0 && nulls == 0 {
			b = append(b, byte(len(v)))
			b = append(b, v...)
		}
	}
	for i := 1; i <= n; i++ {
		image(i, "r"+strconv.Itoa(i))
		if op == OpUpdate {
			if partialJSON {
				b = append(b, 1) // value options: PARTIAL_JSON_UPDATES
			}
			image(i, "u"+strconv.Itoa(i))
		}
	}
	return e.event(t, b)
}

func (e *encoder) xidEvent() *replication.BinlogEvent {
	return e.event(replication.XID_EVENT, binary.LittleEndian.AppendUint64(nil, 42))
}

// mysqlGTID is a GTID event (gno 0 and a zero SID: anonymous).
func (e *encoder) mysqlGTID(sid string, gno int64) *replication.BinlogEvent {
	t := replication.GTID_EVENT
	b := []byte{1}
	if sid == "" {
		t, b = replication.ANONYMOUS_GTID_EVENT, append(b, make([]byte, 16)...)
	} else {
		u := uuid.MustParse(sid)
		b = append(b, u[:]...)
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(gno))
	b = append(b, replication.LogicalTimestampTypeCode)
	b = binary.LittleEndian.AppendUint64(b, 0)           // last committed
	b = binary.LittleEndian.AppendUint64(b, uint64(gno)) // sequence number
	return e.event(t, b)
}

// mariadbGTID is a MariaDB GTID event; x is the xid of an XA group.
func (e *encoder) mariadbGTID(seq uint64, flags byte, x *xaID) *replication.BinlogEvent {
	b := binary.LittleEndian.AppendUint64(nil, seq)
	b = binary.LittleEndian.AppendUint32(b, 0) // domain
	b = append(b, flags)
	if x != nil {
		b = binary.LittleEndian.AppendUint32(b, uint32(x.format))
		b = append(b, byte(len(x.gtrid)), byte(len(x.bqual)))
		b = append(b, x.gtrid...)
		b = append(b, x.bqual...)
	} else {
		b = append(b, make([]byte, 6)...) // padding to 19 bytes
	}
	return e.event(replication.MARIADB_GTID_EVENT, b)
}

// xaPrepare is XA_PREPARE_LOG_EVENT's body.
func xaPrepareBody(onePhase bool, x xaID) []byte {
	b := []byte{0}
	if onePhase {
		b[0] = 1
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(x.format))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.gtrid)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.bqual)))
	b = append(b, x.gtrid...)
	return append(b, x.bqual...)
}

// xaID is an XA transaction's xid.
type xaID struct {
	format       int32
	gtrid, bqual string
}

// String is the xid as the server logs it.
func (x xaID) String() string {
	return fmt.Sprintf("X'%s',X'%s',%d", hex.EncodeToString([]byte(x.gtrid)), hex.EncodeToString([]byte(x.bqual)), x.format)
}

// canonical is the xid as Event.XID carries it.
func (x xaID) canonical() string {
	return canonicalXID(int64(x.format), []byte(x.gtrid), []byte(x.bqual))
}

var x1 = xaID{format: 1, gtrid: "x1"}

// script builds an event sequence as a server of the flavor logs it.
type script struct {
	*encoder
	evs []*replication.BinlogEvent
}

func (s *script) mariadb() bool { return s.flavor == mysql.MariaDBFlavor }

func (s *script) add(evs ...*replication.BinlogEvent) *script {
	s.evs = append(s.evs, evs...)
	return s
}

// begin opens transaction n: MySQL's GTID and BEGIN, MariaDB's GTID event
// (which is the BEGIN: MariaDB logs none).
func (s *script) begin(n int) *script {
	if s.mariadb() {
		return s.add(s.mariadbGTID(uint64(n), flTransactional|flAllowParallel, nil))
	}
	return s.add(s.mysqlGTID(testSID, int64(n)), s.event(replication.QUERY_EVENT, s.query("", "BEGIN")))
}

// beginNonTrans opens transaction n that changes a non-transactional table
// (ends with a COMMIT query).
func (s *script) beginNonTrans(n int) *script {
	if s.mariadb() {
		return s.add(s.mariadbGTID(uint64(n), flAllowParallel, nil))
	}
	return s.begin(n)
}

// gtid is the bare GTID event of transaction n (MariaDB: flags).
func (s *script) gtid(n int, flags byte) *script {
	if s.mariadb() {
		return s.add(s.mariadbGTID(uint64(n), flags, nil))
	}
	return s.add(s.mysqlGTID(testSID, int64(n)))
}

// standalone is transaction n of one statement (DDL, or a statement on a
// non-transactional table).
func (s *script) standalone(n int, db, q string) *script {
	s.gtid(n, flStandalone|flAllowParallel|flDDL)
	return s.q(db, q)
}

func (s *script) q(db, q string) *script {
	return s.add(s.event(replication.QUERY_EVENT, s.query(db, q)))
}

func (s *script) rows(op Op, table string, n int) *script {
	return s.add(s.tableMap(table), s.rowsEvent(op, table, n))
}

func (s *script) insert(table string, n int) *script { return s.rows(OpInsert, table, n) }

func (s *script) xid() *script { return s.add(s.xidEvent()) }

// xaStart opens XA transaction n: MySQL's GTID and XA START query,
// MariaDB's GTID event flagged FL_PREPARED_XA with the xid (MariaDB logs
// no XA START).
func (s *script) xaStart(n int, x xaID) *script {
	if s.mariadb() {
		return s.add(s.mariadbGTID(uint64(n), flTransactional|flAllowParallel|flPreparedXA, &x))
	}
	s.add(s.mysqlGTID(testSID, int64(n)))
	return s.q("", "XA START "+x.String())
}

func (s *script) xaEnd(x xaID) *script { return s.q("", "XA END "+x.String()) }

func (s *script) xaPrepare(onePhase bool, x xaID) *script {
	return s.add(s.event(replication.XA_PREPARE_LOG_EVENT, xaPrepareBody(onePhase, x)))
}

// xaFinish is XA COMMIT or XA ROLLBACK (verb) of a prepared XA transaction,
// as transaction n.
func (s *script) xaFinish(n int, verb string, x xaID) *script {
	if s.mariadb() {
		s.add(s.mariadbGTID(uint64(n), flStandalone|flTransactional|flAllowParallel|flCompletedXA, &x))
	} else {
		s.add(s.mysqlGTID(testSID, int64(n)))
	}
	return s.q("", verb+" "+x.String())
}

// syncer stamps GTID sets on events the way go-mysql's BinlogSyncer does
// (handleEventAndACK): the set after each GTID event, cloned onto every
// Query and XID event, those inside a Transaction_payload too.
type syncer struct{ cur mysql.GTIDSet }

func newSyncer(t testing.TB, flavor string) *syncer {
	set, err := ParseSet(flavor, "")
	if err != nil {
		t.Fatal(err)
	}
	return &syncer{cur: set}
}

func (s *syncer) stamp(ev *replication.BinlogEvent) {
	switch e := ev.Event.(type) {
	case *replication.GTIDEvent:
		u, _ := uuid.FromBytes(e.SID)
		s.cur.(*mysql.MysqlGTIDSet).AddGTID(u, e.GNO)
	case *replication.GtidTaggedLogEvent:
		u, _ := uuid.FromBytes(e.SID)
		s.cur.(*mysql.MysqlGTIDSet).AddGTIDWithTag(u, e.Tag, e.GNO)
	case *replication.MariadbGTIDEvent:
		_ = s.cur.(*mysql.MariadbGTIDSet).AddSet(&e.GTID)
	case *replication.XIDEvent:
		e.GSet = s.cur.Clone()
	case *replication.QueryEvent:
		e.GSet = s.cur.Clone()
	case *replication.TransactionPayloadEvent:
		for _, inner := range e.Events {
			switch ie := inner.Event.(type) {
			case *replication.XIDEvent:
				ie.GSet = s.cur.Clone()
			case *replication.QueryEvent:
				ie.GSet = s.cur.Clone()
			}
		}
	}
}

// fixture is a reader of a.outbox, its stream state and its syncer.
type fixture struct {
	t      testing.TB
	flavor string
	r      *Reader
	st     *streamState
	sync   *syncer
}

func newFixture(t testing.TB, flavor string) *fixture {
	r := NewReader(Config{Tables: []string{testTable}}, &Server{Flavor: flavor, ColumnNames: true},
		schema.New([]string{testTable}, nil, nil), nil)
	return &fixture{t: t, flavor: flavor, r: r, sync: newSyncer(t, flavor),
		st: &streamState{tableCache: map[uint64]*cachedTable{}, frame: r.newFramer()}}
}

// run converts the events into one batch, as Run does with a burst, and
// renders it; it stops at the first error.
func (f *fixture) run(evs []*replication.BinlogEvent) ([]string, error) {
	var batch []Event
	var err error
	for _, ev := range evs {
		f.sync.stamp(ev)
		if batch, err = f.r.convert(f.st, ev, batch); err != nil {
			break
		}
	}
	return renderAll(batch), err
}

func renderAll(batch []Event) []string {
	out := make([]string, len(batch))
	for i, ev := range batch {
		out[i] = render(ev)
	}
	return out
}

var kindNames = map[Kind]string{KindRows: "rows", KindCommit: "commit", KindDDL: "ddl", KindPrepare: "prepare",
	KindRollback: "rollback", KindWarning: "warning", KindIgnored: "ignored", KindHeartbeat: "heartbeat"}

func render(ev Event) string {
	s := kindNames[ev.Kind] + " " + ev.GTID
	if ev.Kind == KindRows {
		s += fmt.Sprintf(" %s %s %d", ev.Table, ev.Op, ev.RowCount())
		if len(ev.Absent) > 0 {
			s += " absent=" + strings.Join(ev.Absent, ",")
		}
		if ev.Image != nil {
			s += fmt.Sprintf(" image=%v%v", ev.Image.Columns, ev.Image.Rows)
		}
	}
	if ev.XID != "" {
		s += " xid=" + ev.XID
	}
	if ev.OnePhase {
		s += " one-phase"
	}
	if ev.Set != nil {
		s += " set=" + ev.Set.String()
	}
	return s
}

// gtidOfN is the flavor's n-th test GTID.
func gtidOfN(flavor string, n int) string {
	if flavor == mysql.MariaDBFlavor {
		return "0-1-" + strconv.Itoa(n)
	}
	return testSID + ":" + strconv.Itoa(n)
}

// setThrough is the GTID set of transactions 1..n.
func setThrough(flavor string, n int) string {
	if flavor == mysql.MariaDBFlavor {
		return "0-1-" + strconv.Itoa(n)
	}
	if n == 1 {
		return testSID + ":1"
	}
	return testSID + ":1-" + strconv.Itoa(n)
}

// concrete replaces "set=#n" and "#n" in want by the flavor's values.
func concrete(flavor string, want []string) []string {
	out := make([]string, len(want))
	for i, w := range want {
		w = setRef.ReplaceAllStringFunc(w, func(m string) string {
			n, _ := strconv.Atoi(m[len("set=#"):])
			return "set=" + setThrough(flavor, n)
		})
		out[i] = gtidRef.ReplaceAllStringFunc(w, func(m string) string {
			n, _ := strconv.Atoi(m[1:])
			return gtidOfN(flavor, n)
		})
	}
	return out
}

var flavors = []string{mysql.MySQLFlavor, mysql.MariaDBFlavor}

type frameCase struct {
	name  string
	build func(s *script)
	want  []string
	// err is the sentinel the sequence stops with; errGTID the
	// transaction its message must name (0: none).
	err     error
	errGTID int
	errHas  string
	// open: the sequence ends inside a group.
	open bool
	// only restricts the case to one flavor.
	only string
	// warn: source.statement_dml warn (statement-logged changes of other
	// tables are warnings, not stops).
	warn bool
	// schemaNotes: KindDDL notes of the schema tracker on the statements
	// are not the framer's business (they are left out of the comparison).
	schemaNotes bool
}

func runFrameCases(t *testing.T, cases []frameCase) {
	t.Helper()
	for _, tc := range cases {
		for _, flavor := range flavors {
			if tc.only != "" && tc.only != flavor {
				continue
			}
			t.Run(flavor+"/"+tc.name, func(t *testing.T) {
				s := &script{encoder: newEncoder(t, flavor)}
				tc.build(s)
				f := newFixture(t, flavor)
				f.st.frame.allowStatements = tc.warn
				got, err := f.run(s.evs)
				if tc.schemaNotes {
					got = slices.DeleteFunc(got, func(g string) bool { return strings.HasPrefix(g, "ddl ") })
				}
				want := concrete(flavor, tc.want)
				if !slices.Equal(got, want) {
					t.Errorf("events:\n got  %s\n want %s", strings.Join(got, "\n      "), strings.Join(want, "\n      "))
				}
				switch {
				case tc.err == nil && err != nil:
					t.Fatalf("unexpected error: %v", err)
				case tc.err != nil && !errors.Is(err, tc.err):
					t.Fatalf("error %v, want %v", err, tc.err)
				case tc.err != nil && tc.errGTID != 0 && !strings.Contains(err.Error(), gtidOfN(flavor, tc.errGTID)):
					t.Errorf("error does not name transaction %s: %v", gtidOfN(flavor, tc.errGTID), err)
				case tc.err != nil && tc.errHas != "" && !strings.Contains(err.Error(), tc.errHas):
					t.Errorf("error does not say %q: %v", tc.errHas, err)
				}
				if tc.err == nil && !tc.open && f.st.frame.state != stateIdle {
					t.Errorf("the group of %s is still open", f.st.frame.gtid)
				}
			})
		}
	}
}
