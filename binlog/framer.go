package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/schema"
)

// Sentinels of the framer: each stops the relay before the transaction it
// names, whose outbox rows the relay cannot publish exactly as committed.
var (
	// ErrStatementLogged: DML on a captured table (or a LOAD DATA on any
	// table) was logged as a statement, so its rows are not in the binlog.
	ErrStatementLogged = errors.New("outbox change logged as a statement")
	// ErrUnframed: the binlog holds something the relay cannot place in a
	// transaction or cannot open (no GTID, no end marker, an incident, an
	// event it does not know inside a transaction that touches a captured
	// table).
	ErrUnframed = errors.New("binlog transaction the relay cannot frame")
	// ErrRolledBackRows: a transaction's binlog holds outbox rows followed by
	// a ROLLBACK or ROLLBACK TO SAVEPOINT that undoes them (MariaDB and MySQL
	// log this when a non-transactional table was changed too).
	ErrRolledBackRows = errors.New("outbox rows rolled back inside a logged transaction")
)

// groupState tells where the framer is within the binlog's event groups.
type groupState uint8

const (
	// between groups: only a GTID event opens one.
	stateIdle groupState = iota
	// after the GTID event, before the first statement: the first Query
	// event decides the group's shape.
	stateOpened
	// a transaction opened by BEGIN: ends at XID or COMMIT (or ROLLBACK).
	stateTx
	// an XA transaction opened by XA START: ends at XA_PREPARE.
	stateXA
	// a group the relay published (or an operator skipped) before a
	// restart that reads it again: ignored up to the next GTID event.
	stateSkip
)

// xaPrepareLogEvent is XA_PREPARE_LOG_EVENT (MySQL 5.7.7+, MariaDB 10.5+).
const xaPrepareLogEvent = replication.XA_PREPARE_LOG_EVENT

// framer is the transaction framing state machine. Server events go in
// (step); rows of captured tables, commits with their GTID and GTID set, XA
// prepares and rollbacks, or an error that stops the relay come out. A
// group opens only at a GTID event and closes only at the server's own
// markers: XID, COMMIT, XA_PREPARE (or its one-phase commit), XA COMMIT, XA
// ROLLBACK, or the single statement of a standalone group. Any other Query
// inside a transaction (SAVEPOINT, RELEASE, statements) never moves the
// position.
type framer struct {
	// captured reports whether db.table is a captured table.
	captured func(db, table []byte) bool

	state      groupState
	gtid       string
	commitTime time.Time
	standalone bool // MariaDB FL_STANDALONE: one statement, no BEGIN
	set        mysql.GTIDSet
	xid        string // XA START's xid
	touched    bool   // a captured table's table map was seen in the group
	rows       int    // captured rows emitted in the group
	// savepoints: rows emitted when each savepoint was set.
	savepoints map[string]int
	// unknown names an event of the group the framer could not open; fatal
	// once the group touches a captured table.
	unknown string
	// warning is set for the reader to pass on (a statement-logged change
	// of a non-captured table).
	warning string
	// names are the captured tables' names, lower case.
	names []string
	// allowStatements: a statement-logged change of a non-captured table is
	// a warning, not a stop (source.statement_dml: warn).
	allowStatements bool
	// hold: the group's rows are held (held) until it ends, because a
	// ROLLBACK [TO SAVEPOINT] logged in it may undo some (a MariaDB group
	// that is not transactional-only).
	hold bool
	held []Event
}

// out is what one event became.
type frameOut struct {
	kind     Kind
	xid      string
	onePhase bool // an XA transaction committed in one phase
	set      mysql.GTIDSet
	// stmt is a standalone statement (DDL) for the schema tracker.
	stmt     string
	stmtDB   string
	stmtMode schema.SQLMode // the statement's sql_mode, as it changes how its text reads
}

// groupShape is what a GTID event says of its group. MariaDB logs no
// BEGIN and no XA START: its GTID event is the start of the transaction
// (or of the XA transaction), and the group's rows follow it directly.
type groupShape struct {
	standalone bool // MariaDB FL_STANDALONE: one statement, no BEGIN
	begun      bool // MariaDB transaction: the GTID event is its BEGIN
	// transactional: MariaDB FL_TRANSACTIONAL, every change of the group is
	// to a transactional table, so nothing logged in it is undone later.
	transactional bool
	xa            bool   // MariaDB FL_PREPARED_XA: the GTID event is its XA START
	xid           string // the XA transaction's xid (canonical)
}

// mariadbFlPreparedXA is MariaDB's GTID event flag FL_PREPARED_XA (go-mysql
// has no name for it): the group is an XA transaction up to its XA PREPARE.
// (FL_COMPLETED_XA groups, XA COMMIT and XA ROLLBACK, are standalone.)
const mariadbFlPreparedXA = 64

// mariadbFlTransactional is MariaDB's GTID event flag FL_TRANSACTIONAL.
const mariadbFlTransactional = 4

// open starts the group of a GTID event.
func (f *framer) open(gtid string, at time.Time, shape groupShape) error {
	if f.state != stateIdle && f.state != stateSkip {
		return fmt.Errorf("%w: transaction %s has no end marker before the next GTID %s", ErrUnframed, f.gtid, gtid)
	}
	*f = framer{captured: f.captured, names: f.names, savepoints: f.savepoints, allowStatements: f.allowStatements,
		state: stateOpened, gtid: gtid, commitTime: at, standalone: shape.standalone, held: f.held[:0]}
	// A MariaDB transaction that also changed a non-transactional table may
	// log outbox rows that a later ROLLBACK [TO SAVEPOINT] undoes: its rows
	// are held until its end, when what was kept is known.
	f.hold = shape.begun && !shape.transactional
	switch {
	case shape.xa:
		f.state, f.xid = stateXA, shape.xid
	case shape.begun:
		f.state = stateTx
	}
	clear(f.savepoints)
	return nil
}

// mariadbXID reads the xid a MariaDB GTID event of an XA group carries
// after its fixed fields (go-mysql does not decode it): formatID (4 bytes),
// gtrid and bqual lengths (1 byte each), then gtrid and bqual.
func mariadbXID(raw []byte, flags byte) (string, error) {
	if len(raw) < replication.EventHeaderSize {
		return "", errors.New("no event bytes")
	}
	body, pos := raw[replication.EventHeaderSize:], 13
	if flags&replication.BINLOG_MARIADB_FL_GROUP_COMMIT_ID != 0 {
		pos += 8
	}
	if len(body) < pos+6 {
		return "", fmt.Errorf("%d bytes, no xid", len(body))
	}
	format := int64(int32(binary.LittleEndian.Uint32(body[pos:])))
	gl, bl := int(body[pos+4]), int(body[pos+5])
	pos += 6
	if gl > 64 || bl > 64 || len(body) < pos+gl+bl {
		return "", fmt.Errorf("xid lengths %d and %d do not fit %d bytes", gl, bl, len(body))
	}
	return canonicalXID(format, body[pos:pos+gl], body[pos+gl:pos+gl+bl]), nil
}

// close ends the group.
func (f *framer) close(kind Kind, xid string) (frameOut, error) {
	if f.set == nil {
		return frameOut{}, fmt.Errorf("%w: end of transaction %s without a gtid set", ErrUnframed, f.gtid)
	}
	out := frameOut{kind: kind, xid: xid, set: f.set}
	f.state = stateIdle
	return out, nil
}

// gtidOf renders a GTID event's GTID and commit time; ok false for an
// event that opens no group.
func gtidOf(ev *replication.BinlogEvent) (gtid string, at time.Time, shape groupShape, ok bool, err error) {
	switch e := ev.Event.(type) {
	case *replication.GTIDEvent:
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return "", at, shape, true, fmt.Errorf("read binlog: gtid event: %w", err)
		}
		if u == uuid.Nil || e.GNO == 0 {
			return "", at, shape, true, fmt.Errorf("%w: anonymous transaction (gtid_mode is not ON on the source): "+
				"set gtid_mode=ON and enforce_gtid_consistency=ON", ErrUnframed)
		}
		at = time.Unix(int64(ev.Header.Timestamp), 0)
		if e.ImmediateCommitTimestamp > 0 {
			at = time.UnixMicro(int64(e.ImmediateCommitTimestamp))
		}
		var b [36 + 1 + 20]byte
		return string(strconv.AppendInt(append(appendUUID(b[:0], u), ':'), e.GNO, 10)), at, shape, true, nil
	case *replication.GtidTaggedLogEvent:
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return "", at, shape, true, fmt.Errorf("read binlog: gtid event: %w", err)
		}
		at = time.UnixMicro(int64(e.ImmediateCommitTimestamp))
		return u.String() + ":" + e.Tag.String() + ":" + strconv.FormatInt(e.GNO, 10), at, shape, true, nil
	case *replication.MariadbGTIDEvent:
		g := e.GTID
		var b [10 + 1 + 10 + 1 + 20]byte
		gtid = string(strconv.AppendUint(append(strconv.AppendUint(append(strconv.AppendUint(b[:0], uint64(g.DomainID), 10), '-'),
			uint64(g.ServerID), 10), '-'), g.SequenceNumber, 10))
		at = time.Unix(int64(ev.Header.Timestamp), 0)
		shape.standalone = e.IsStandalone()
		shape.transactional = e.Flags&mariadbFlTransactional != 0
		switch {
		case e.Flags&mariadbFlPreparedXA != 0:
			if shape.xid, err = mariadbXID(ev.RawData, e.Flags); err != nil {
				return gtid, at, shape, true, fmt.Errorf("%w: XA transaction %s: gtid event: %v", ErrUnframed, gtid, err)
			}
			shape.xa = true
		case !shape.standalone: // XA COMMIT and XA ROLLBACK (FL_COMPLETED_XA) are standalone
			shape.begun = true
		}
		return gtid, at, shape, true, nil
	}
	return "", at, shape, false, nil
}

// appendUUID appends u as uuid.UUID.String renders it.
func appendUUID(b []byte, u uuid.UUID) []byte {
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b
}

const hexDigits = "0123456789abcdef"

// query handles a Query event: it returns a group end, or nothing.
func (f *framer) query(e *replication.QueryEvent) (frameOut, bool, error) {
	if e.GSet != nil {
		f.set = e.GSet
	}
	q := strings.TrimSpace(stripComments(string(e.Query)))
	shown := redactedText(q) // a statement's text in a message: never a password
	switch f.state {
	case stateIdle:
		return frameOut{}, false, fmt.Errorf("%w: statement outside a GTID transaction: %.200s", ErrUnframed, shown)
	case stateOpened:
		switch {
		case !f.standalone && (isWord(q, "BEGIN") || hasPrefixFold(q, "START TRANSACTION")):
			f.state = stateTx
			return frameOut{}, false, nil
		case !f.standalone && isCreateSelect(q):
			// MySQL 8.0.21+ logs CREATE TABLE ... SELECT as one transaction:
			// this statement, the rows, then an XID.
			f.state = stateTx
			return frameOut{}, false, nil
		case !f.standalone && hasPrefixFold(q, "XA START"):
			xid, err := parseXID(q[len("XA START"):])
			if err != nil {
				return frameOut{}, false, redactedError{fmt.Errorf("%w: transaction %s: %v: %.200s", ErrUnframed, f.gtid, err, shown), q}
			}
			f.state, f.xid = stateXA, xid
			return frameOut{}, false, nil
		case hasPrefixFold(q, "XA COMMIT"):
			xid, onePhase, err := xaEnd(q[len("XA COMMIT"):])
			if err != nil || onePhase {
				return frameOut{}, false, fmt.Errorf("%w: transaction %s: cannot read %.200s", ErrUnframed, f.gtid, shown)
			}
			out, err := f.close(KindCommit, xid)
			return out, true, err
		case hasPrefixFold(q, "XA ROLLBACK"):
			xid, _, err := xaEnd(q[len("XA ROLLBACK"):])
			if err != nil {
				return frameOut{}, false, fmt.Errorf("%w: transaction %s: cannot read %.200s", ErrUnframed, f.gtid, shown)
			}
			out, err := f.close(KindRollback, xid)
			return out, true, err
		}
		// A standalone statement: DDL, or a non-transactional change. It is
		// its own group.
		if err := f.statement(e, q); err != nil {
			return frameOut{}, false, err
		}
		out, err := f.close(KindCommit, "")
		out.stmt, out.stmtDB, out.stmtMode = q, string(e.Schema), statusSQLMode(e.StatusVars)
		return out, true, err
	}
	// Inside a transaction.
	switch {
	case f.state == stateTx && isWord(q, "COMMIT"):
		out, err := f.close(KindCommit, "")
		return out, true, err
	case f.state == stateTx && isWord(q, "ROLLBACK"):
		if f.hold {
			f.held, f.rows = f.held[:0], 0 // undone: none of its rows is published
		}
		if f.rows > 0 {
			return frameOut{}, false, fmt.Errorf("%w: transaction %s logged %d outbox rows and then ROLLBACK; its rows were "+
				"never committed, and the relay cannot take back what it has read: check the application (a transaction that "+
				"also changes a non-transactional table)", ErrRolledBackRows, f.gtid, f.rows)
		}
		out, err := f.close(KindCommit, "")
		return out, true, err
	case hasPrefixFold(q, "SAVEPOINT"):
		f.savepoints[savepointName(q[len("SAVEPOINT"):])] = f.rows
		return frameOut{}, false, nil
	case hasPrefixFold(q, "ROLLBACK TO"):
		name := strings.TrimSpace(q[len("ROLLBACK TO"):])
		if hasPrefixFold(name, "SAVEPOINT") {
			name = name[len("SAVEPOINT"):]
		}
		at, known := f.savepoints[savepointName(name)]
		if known && f.hold {
			f.undoTo(at)
			return frameOut{}, false, nil
		}
		if !known || f.rows > at {
			return frameOut{}, false, fmt.Errorf("%w: transaction %s: %.100s undoes outbox rows already in the binlog "+
				"(a savepoint after which a non-transactional table was also changed); publish them by hand if they are "+
				"wanted, keep non-transactional tables out of outbox transactions, then skip the transaction with "+
				"`outbox-relay checkpoint skip --gtid %s`", ErrRolledBackRows, f.gtid, shown, f.gtid)
		}
		return frameOut{}, false, nil
	case hasPrefixFold(q, "RELEASE SAVEPOINT"):
		return frameOut{}, false, nil
	case f.state == stateXA && hasPrefixFold(q, "XA END"):
		return frameOut{}, false, nil
	}
	return frameOut{}, false, f.statement(e, q)
}

// undoTo drops the held rows after the first n of the group (ROLLBACK TO a
// savepoint set when n rows had been read). Savepoints sit between rows
// events, so n falls on an event boundary.
func (f *framer) undoTo(n int) {
	kept := 0
	for i := range f.held {
		if kept >= n {
			clear(f.held[i:])
			f.held = f.held[:i]
			break
		}
		kept += f.held[i].RowCount()
	}
	f.rows = n
}

// statement checks a statement logged as such inside (or as) a group: a
// change to a captured table stops the relay; one to another table is
// logged, since a trigger or stored function it fires could write the
// outbox without the relay seeing it.
func (f *framer) statement(e *replication.QueryEvent, q string) error {
	// SET STATEMENT ... FOR: the statement it runs, after the FOR the
	// server found reading the prefix in its sql_mode (read otherwise, the
	// FOR may be inside one of its strings); without the event's mode,
	// each reading's statement is checked.
	mode := statusSQLMode(e.StatusVars)
	if !mode.Unknown {
		return f.statementBody(e, q, schema.StatementBodyIn(q, mode))
	}
	var checked []string
	for _, m := range []schema.SQLMode{{}, {NoBackslashEscapes: true}, {ANSIQuotes: true}} {
		body := schema.StatementBodyIn(q, m)
		if slices.Contains(checked, body) {
			continue
		}
		checked = append(checked, body)
		if err := f.statementBody(e, q, body); err != nil {
			return err
		}
	}
	return nil
}

// statementBody checks body, the statement whole runs (whole itself, or
// what follows its SET STATEMENT prefix).
func (f *framer) statementBody(e *replication.QueryEvent, whole, q string) error {
	// The whole statement is shown redacted, its prefix included: the
	// redactor redacts the rest where a server may read it otherwise.
	shown := RedactStatement(whole)
	tables, dml, err := dmlTargets(string(e.Schema), q)
	if err != nil {
		// Only a statement that starts as a row change can be one: table
		// maintenance (ANALYZE ... PERSISTENT, REPAIR) and definitions the
		// parser cannot read change no rows.
		if !changesRows(q) {
			return nil
		}
		if f.mentionsCaptured(q) || !f.allowStatements {
			return redactedError{fmt.Errorf("%w: transaction %s has a statement-logged change the relay cannot read (%s): %.200s; "+
				"make the server log rows (binlog_format=ROW), then `outbox-relay checkpoint skip --gtid %s` once its "+
				"outbox rows, if any, are published", ErrStatementLogged, f.gtid, parseProblem(err), shown, f.gtid), whole}
		}
		f.warning = RedactIn(fmt.Sprintf("statement-logged change the relay cannot read (%s): %.200s", parseProblem(err), shown), whole)
		return nil
	}
	if !dml {
		return nil
	}
	for _, t := range tables {
		db, tbl, _ := strings.Cut(t, ".")
		if f.captured([]byte(db), []byte(tbl)) {
			return fmt.Errorf("%w: transaction %s changed %s with a statement logged as such, not as rows, so the relay "+
				"cannot see its outbox rows: %.200s; make the server log rows (binlog_format=ROW globally, and no session "+
				"that sets binlog_format=STATEMENT or MIXED), publish that transaction's outbox rows yourself (or insert them "+
				"again), then skip it with `outbox-relay checkpoint skip --gtid %s`", ErrStatementLogged, f.gtid, t, shown, f.gtid)
		}
	}
	if !f.allowStatements {
		return fmt.Errorf("%w: transaction %s changed %v with a statement logged as such: outbox rows written by its "+
			"triggers or stored functions would not be in the binlog: %.200s; make the server log rows "+
			"(binlog_format=ROW), publish such rows yourself if there are any, then `outbox-relay checkpoint skip --gtid %s` "+
			"(source.statement_dml: warn only logs these, for servers where nothing but the application writes the outbox)",
			ErrStatementLogged, f.gtid, tablesShown(tables, string(e.Schema), whole), shown, f.gtid)
	}
	f.warning = fmt.Sprintf("statement-logged change of %v: outbox rows written by its triggers or stored functions "+
		"would not be in the binlog; log rows (binlog_format=ROW): %.200s", tablesShown(tables, string(e.Schema), whole), shown)
	return nil
}

// parseProblem is what a message tells of the SQL parser's error about a
// statement: its text up to its first quote, where the parser starts to
// quote the statement (line 1 column 30 near "..."), which may hold a
// password in a way RedactIn cannot find (cut anywhere, its escapes its own).
func parseProblem(err error) string {
	msg := err.Error()
	if i := strings.IndexAny(msg, "\"'`"); i >= 0 {
		msg = strings.TrimSpace(msg[:i]) + " (the statement's text it quotes left out)"
	}
	return msg
}

// changesRows reports whether a statement the parser could not read starts
// like one that changes rows: INSERT, REPLACE, UPDATE, DELETE, LOAD, a CTE,
// MariaDB's SET STATEMENT ... FOR, or a stored function call (SELECT, DO)
// whose side effects a statement log replays.
func changesRows(q string) bool {
	for _, w := range []string{"INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD", "WITH", "SET STATEMENT", "SELECT", "DO", "CALL", "("} {
		if hasPrefixFold(q, w) || w == "(" && strings.HasPrefix(q, w) {
			return true
		}
	}
	return false
}

func (f *framer) mentionsCaptured(q string) bool {
	lq := strings.ToLower(q)
	for _, n := range f.names {
		if strings.Contains(lq, n) {
			return true
		}
	}
	return false
}

// prepare handles XA_PREPARE_LOG_EVENT: the end of an XA transaction's
// group, either a one-phase commit or a prepare.
func (f *framer) prepare(e *replication.GenericEvent) (frameOut, error) {
	if f.state != stateXA {
		return frameOut{}, fmt.Errorf("%w: XA prepare outside XA START ... XA END in transaction %s", ErrUnframed, f.gtid)
	}
	onePhase, xid, err := decodeXAPrepare(e.Data)
	if err != nil {
		return frameOut{}, fmt.Errorf("%w: transaction %s: xa prepare event: %v", ErrUnframed, f.gtid, err)
	}
	if xid != f.xid {
		return frameOut{}, fmt.Errorf("%w: transaction %s: XA START %s but XA PREPARE %s", ErrUnframed, f.gtid, f.xid, xid)
	}
	if onePhase {
		out, err := f.close(KindCommit, xid)
		out.onePhase = true
		return out, err
	}
	return f.close(KindPrepare, xid)
}

// other handles an event the framer does not open: fatal inside a group
// that touches (or will touch) a captured table.
func (f *framer) other(ev *replication.BinlogEvent) error {
	t := ev.Header.EventType
	switch t {
	case replication.INCIDENT_EVENT:
		return fmt.Errorf("%w: incident event after %s: the source lost changes it could not log; "+
			"compare the outbox table with what was published, then `outbox-relay checkpoint set` past it", ErrUnframed, f.gtid)
	case replication.EXECUTE_LOAD_QUERY_EVENT, replication.LOAD_EVENT, replication.NEW_LOAD_EVENT,
		replication.CREATE_FILE_EVENT, replication.EXEC_LOAD_EVENT:
		return fmt.Errorf("%w: transaction %s holds a LOAD DATA logged as a statement; the relay cannot tell which "+
			"table it wrote: log rows (binlog_format=ROW), then skip it with `outbox-relay checkpoint skip --gtid %s` "+
			"once its outbox rows, if any, are published", ErrStatementLogged, f.gtid, f.gtid)
	}
	if f.state == stateIdle {
		return nil
	}
	if f.unknown == "" {
		f.unknown = fmt.Sprintf("%s (type %d)", t, byte(t))
	}
	return f.checkUnknown()
}

func (f *framer) checkUnknown() error {
	if f.unknown != "" && f.touched {
		return fmt.Errorf("%w: transaction %s touches a captured table and holds a %s event the relay cannot read",
			ErrUnframed, f.gtid, f.unknown)
	}
	return nil
}

// isDefinition reports whether q defines a database object (a table,
// trigger, procedure, event, view, grant) rather than changing rows: the
// statements of a trigger or procedure body are logged when they run.
func isDefinition(q string) bool {
	for _, w := range []string{"CREATE", "ALTER", "DROP", "RENAME", "GRANT", "REVOKE"} {
		if hasPrefixFold(q, w) {
			return true
		}
	}
	return false
}

// isCreateSelect reports whether q is the first statement of MySQL's
// atomic CREATE TABLE ... SELECT, "CREATE TABLE ... START TRANSACTION".
func isCreateSelect(q string) bool {
	const w = "START TRANSACTION"
	q = strings.TrimRight(q, " \t\r\n;")
	n := len(q) - len(w)
	return hasPrefixFold(q, "CREATE") && n > 0 && strings.EqualFold(q[n:], w) && !isIdentByte(q[n-1])
}

func stripComments(q string) string {
	for {
		q = strings.TrimLeft(q, " \t\r\n")
		if strings.HasPrefix(q, "/*") && !strings.HasPrefix(q, "/*!") && !strings.HasPrefix(q, "/*M!") {
			end := strings.Index(q, "*/")
			if end < 0 {
				return q
			}
			q = q[end+2:]
			continue
		}
		if strings.HasPrefix(q, "#") || strings.HasPrefix(q, "-- ") {
			end := strings.IndexByte(q, '\n')
			if end < 0 {
				return ""
			}
			q = q[end+1:]
			continue
		}
		return q
	}
}

// hasPrefixFold reports whether q starts with the words of p (case
// insensitive, single spaces in p match runs of white space).
func hasPrefixFold(q, p string) bool {
	for _, w := range strings.Fields(p) {
		q = strings.TrimLeft(q, " \t\r\n")
		if len(q) < len(w) || !strings.EqualFold(q[:len(w)], w) {
			return false
		}
		q = q[len(w):]
		if q != "" && isIdentByte(q[0]) {
			return false
		}
	}
	return true
}

// isWord reports whether q is exactly the word w, maybe followed by a
// semicolon or a comment (the server writes "COMMIT" and "BEGIN").
func isWord(q, w string) bool {
	if !hasPrefixFold(q, w) {
		return false
	}
	rest := strings.TrimSpace(stripComments(strings.TrimLeft(q[len(w):], " \t\r\n")))
	return rest == "" || rest == ";" || hasPrefixFold(rest, "WORK")
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func savepointName(s string) string {
	s = strings.TrimSpace(s)
	s = strings.TrimSuffix(s, ";")
	s = strings.TrimSpace(s)
	if len(s) >= 2 && s[0] == '`' && s[len(s)-1] == '`' {
		s = strings.ReplaceAll(s[1:len(s)-1], "``", "`")
	}
	return strings.ToLower(s) // savepoint names are not case sensitive
}
