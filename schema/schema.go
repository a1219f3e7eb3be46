// Package schema tracks the column layout of the captured tables as the
// binlog is read, for servers that do not put column names in the binlog
// (binlog_row_metadata MINIMAL or NO_LOG). Statements (QUERY events) are
// applied in binlog order, so each row is decoded with the columns its table
// had when the row was written.
//
// A statement is a table definition change only by its leading keywords
// (after comments): CREATE [OR REPLACE] TABLE, ALTER [ONLINE] [IGNORE] TABLE,
// DROP TABLE, RENAME TABLE(S), DROP DATABASE, with MariaDB's IF [NOT] EXISTS
// and WAIT n / NOWAIT. Everything else (triggers, events, procedures, views,
// grants, indexes, maintenance, TRUNCATE, DML) changes no layout, whatever
// tables its text mentions. Column definitions are read with the TiDB parser,
// and MariaDB syntax it rejects with a reader of the statement's structure
// that needs only column names and positions. A layout is never guessed:
// when a statement leaves a captured table's columns uncertain, its layout is
// forgotten (rows then need column names in the binlog) and Apply says so.
// CREATE TABLE IF NOT EXISTS of a table not seen gives a provisional layout,
// checked against the table's first table map (provisional.go).
//
// Shadow tables. Online schema change tools build the new table beside the
// captured one and swap names: gh-ost (CREATE TABLE _t_gho LIKE t, ALTER
// TABLE _t_gho ..., RENAME TABLE t TO _t_del, _t_gho TO t),
// pt-online-schema-change (_t_new, _t_old), or by hand (CREATE TABLE t_v2,
// RENAME TABLE t TO t_old, t_v2 TO t). So besides the captured tables the
// tracker follows every table created, with a definition it can read, in a
// captured table's database or LIKE a tracked table, and any tracked table
// renamed away, until it is dropped (at most maxShadows of them). A rename
// onto a captured name carries the source's layout over; from a table whose
// layout is not tracked it makes the captured layout unknown. Shadows are in
// Tables, so the checkpoint persists them and a restart in the middle of a
// migration (hours of row copying) still knows the shadow at the cut-over.
//
// Signedness. Without binlog_row_metadata (MariaDB's default NO_LOG) a
// table map does not say which integer columns are UNSIGNED, so their
// values would read as signed: 4000000000 in an INT UNSIGNED as -294967296.
// The tracker also follows which columns are declared UNSIGNED (or
// ZEROFILL), in Signs, so the reader can read them as the server stores
// them; a table in Tables but not in Signs has signedness unknown.
//
// A Tracker is owned by one goroutine. Tables returns an immutable snapshot
// that may be shared: every change builds a new map.
package schema

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	tidbmysql "github.com/pingcap/tidb/pkg/parser/mysql"
	_ "github.com/pingcap/tidb/pkg/parser/test_driver" // value expressions in DDL
)

// ErrUnparsed: a table definition change of a captured table could not be
// followed (the text cannot be read, it adds columns it does not name, it
// contradicts the tracked layout, or it moves a table whose layout is not
// tracked onto the captured name). The table's layout is forgotten: its rows
// need column names in the binlog from here on.
var ErrUnparsed = errors.New("unparsed DDL on a captured table")

// ErrIgnored: the statement changes no captured table's columns though it
// concerns one (a trigger, event, procedure, view, grant, index, TRUNCATE,
// DML, a temporary table, ...), or it changes one whose layout was not
// tracked anyway. Nothing changed; the error says what was seen, for a
// debug log.
var ErrIgnored = errors.New("statement ignored by the schema tracker")

// maxShadows bounds the tables tracked besides the captured ones: beyond it
// a new table is not tracked (its layout is unknown, never guessed).
const maxShadows = 64

// maxAbsent bounds the names remembered as dropped (forgetting one is safe:
// its state becomes unknown) and the reasons kept for messages.
const maxAbsent = 4096

// Tables maps "db.table" to its columns in table order.
type Tables map[string][]string

// Tracker holds the layout of the captured tables (and shadow tables) at
// the current position.
type Tracker struct {
	captured   map[string]bool
	capturedDB map[string]bool
	tables     Tables
	unsigned   Signs
	// absent: tables known not to exist (dropped or renamed away in the
	// binlog read by this tracker). Only in memory: after a restart they
	// are unknown, which is the safe side.
	absent map[string]bool
	// lost says why a captured or formerly tracked table's layout is
	// unknown, for messages.
	lost map[string]string
	// provisional: tables whose layout came from CREATE TABLE IF NOT
	// EXISTS and awaits its first table map (provisional.go).
	provisional Provisional
	// names: how the server compares database and table names (names.go).
	names NameCase
	p     *parser.Parser
}

// New tracks the captured tables ("db.table"), starting from initial (may
// be nil: nothing known yet) and its signedness signs (may be nil: unknown).
// initial may hold shadow tables (a checkpoint's layout does).
func New(captured []string, initial Tables, signs Signs) *Tracker {
	t := &Tracker{captured: map[string]bool{}, capturedDB: map[string]bool{}, tables: Tables{}, unsigned: Signs{},
		absent: map[string]bool{}, lost: map[string]string{}, provisional: Provisional{}, p: parser.New()}
	for _, c := range captured {
		t.captured[c] = true
		db, _, _ := strings.Cut(c, ".")
		t.capturedDB[db] = true
	}
	names := slices.Sorted(maps.Keys(initial))
	shadows := 0
	for _, k := range names {
		if !t.captured[k] {
			if shadows == maxShadows {
				continue
			}
			shadows++
		}
		t.tables[k] = slices.Clone(initial[k])
		if u, ok := signs[k]; ok {
			t.unsigned[k] = slices.Clone(u)
		}
	}
	return t
}

// Tables is the current layout of the captured tables and of the shadow
// tables followed for online schema changes; do not modify it.
func (t *Tracker) Tables() Tables { return t.tables }

// Seed records cols for a captured table whose layout is not known yet
// (learned from the binlog's own column names); signedness stays unknown.
func (t *Tracker) Seed(db, table string, cols []string) {
	n := db + "." + table
	if !t.captured[n] {
		return
	}
	if _, ok := t.tables[n]; ok {
		return
	}
	next := maps.Clone(t.tables)
	next[n] = slices.Clone(cols)
	t.tables = next
}

// Columns returns table's columns, if known.
func (t *Tracker) Columns(db, table string) ([]string, bool) {
	cols, ok := t.tables[db+"."+table]
	return cols, ok
}

// Apply applies one QUERY event's statement (defaultDB is the event's
// current database). changed reports whether a captured table's layout
// differs afterwards (set, replaced or forgotten), also when err is not
// nil; shadow bookkeeping does not count. err wraps ErrUnparsed when a captured
// table's layout is now unknown because of the statement, ErrIgnored when
// the statement concerns a captured table without changing its columns;
// other statements return nil.
func (t *Tracker) Apply(defaultDB, query string) (changed bool, err error) {
	return t.ApplyMode(defaultDB, query, SQLMode{})
}

// ApplyMode is Apply of a statement that ran with mode.
func (t *Tracker) ApplyMode(defaultDB, query string, mode SQLMode) (changed bool, err error) {
	if m := mode.tidb(); m != tidbmysql.ModeNone {
		t.p.SetSQLMode(m)
		defer t.p.SetSQLMode(tidbmysql.ModeNone)
	}
	st := parseStatement(query, mode)
	e := &edit{t: t, next: t.tables, signs: t.unsigned, prov: t.provisional, db: defaultDB, st: st}
	switch {
	case st.kind == kOther:
		err = e.other()
	case st.bad != nil:
		err = e.unreadable()
	case st.kind == kCreateTable:
		err = e.create()
	case st.kind == kAlterTable:
		err = e.alter()
	case st.kind == kDropTable:
		err = e.drop()
	case st.kind == kRenameTable:
		err = e.rename()
	case st.kind == kDropDatabase:
		e.dropDatabase()
	}
	for c := range t.captured {
		before, had := t.tables[c]
		after, has := e.next[c]
		ub, uhad := t.unsigned[c]
		ua, uhas := e.signs[c]
		if had != has || !slices.Equal(before, after) || uhad != uhas || !slices.Equal(ub, ua) {
			changed = true
		}
	}
	t.tables, t.unsigned, t.provisional = e.next, e.signs, e.prov
	if len(t.absent) > maxAbsent {
		clear(t.absent)
	}
	if len(t.lost) > maxAbsent {
		clear(t.lost)
	}
	return changed, err
}

// edit is one statement's change: the next snapshot, copied on first write.
type edit struct {
	t      *Tracker
	next   Tables
	copied bool
	// signs: the next signedness, copied on first write.
	signs       Signs
	signsCopied bool
	// prov: the next provisional layouts, copied on first write.
	prov       Provisional
	provCopied bool
	db         string // the statement's default database
	st         *statement
}

// key is the tracker's name of the table r names ("db.table"), as the
// server compares names (canon).
func (e *edit) key(r tableRef) string {
	db := r.db
	if db == "" {
		db = e.db
	}
	return e.t.canon(db+"."+r.name, e.next)
}

func (e *edit) write() Tables {
	if !e.copied {
		e.next, e.copied = maps.Clone(e.t.tables), true
	}
	return e.next
}

// relevant reports whether the tracker follows table n: captured, tracked,
// or in a captured table's database.
func (e *edit) relevant(n string) bool {
	_, tracked := e.next[n]
	db, _, _ := strings.Cut(n, ".")
	return e.t.captured[n] || tracked || e.t.capturedDB[e.t.dbKey(db)]
}

func (e *edit) shadows() int {
	n := 0
	for k := range e.next {
		if !e.t.captured[k] {
			n++
		}
	}
	return n
}

// set records that table n exists with cols, unsigned among them when
// signs says their signedness is known.
func (e *edit) set(n string, cols, unsigned []string, signs bool) {
	delete(e.t.absent, n)
	e.setProv(n, nil)
	old, had := e.next[n]
	if had && slices.Equal(old, cols) {
		e.setSigns(n, unsigned, signs)
		return
	}
	if !had && !e.t.captured[n] && e.shadows() >= maxShadows {
		e.t.lost[n] = fmt.Sprintf("%d other tables were tracked already", maxShadows)
		return
	}
	delete(e.t.lost, n)
	e.write()[n] = slices.Clone(cols)
	e.setSigns(n, unsigned, signs)
}

// unknown records that table n may exist with a layout not known.
func (e *edit) unknown(n, why string) {
	delete(e.t.absent, n)
	e.setProv(n, nil)
	if _, had := e.next[n]; had {
		delete(e.write(), n)
	}
	e.setSigns(n, nil, false)
	if _, had := e.t.tables[n]; had || e.t.captured[n] {
		e.t.lost[n] = why
	}
}

// gone records that table n does not exist.
func (e *edit) gone(n string) {
	if e.relevant(n) {
		e.t.absent[n] = true
	}
	e.setProv(n, nil)
	if _, had := e.next[n]; had {
		delete(e.write(), n)
	}
	e.setSigns(n, nil, false)
	delete(e.t.lost, n)
}

// why explains an unknown layout of n for messages.
func (e *edit) why(n string) string {
	if w := e.t.lost[n]; w != "" {
		return " (" + w + ")"
	}
	return " (not created in the binlog read so far, or created before the relay's position)"
}

// unparsed forgets captured table n's layout and returns the error saying so.
func (e *edit) unparsed(n string, reason any) error {
	e.unknown(n, fmt.Sprintf("an earlier %s could not be followed: %v", e.st.verb, reason))
	return fmt.Errorf("track %s of %s: %w: %v; its columns are unknown from here: its rows need column names in the binlog "+
		"(binlog_row_metadata=FULL), or, if its definition has not changed since, move the checkpoint past this statement "+
		"with `outbox-relay checkpoint set --gtid SET --schema server`", e.st.verb, n, ErrUnparsed, reason)
}

func (e *edit) ignored(format string, args ...any) error {
	return fmt.Errorf("track %s: %w: %s", e.st.verb, ErrIgnored, fmt.Sprintf(format, args...))
}

// clash returns the captured table whose name differs from n only in
// letter case, when the server's lower_case_table_names is not known:
// whether the statement means it depends on the setting, so the tracker
// cannot tell. Known, the name is the captured table (canon) or another.
func (e *edit) clash(n string) (string, bool) {
	if e.t.captured[n] || e.t.names != NamesUnknown {
		return "", false
	}
	for c := range e.t.captured {
		if strings.EqualFold(c, n) {
			return c, true
		}
	}
	return "", false
}

func (e *edit) clashErr(names ...string) error {
	var errs []error
	for _, n := range names {
		if c, ok := e.clash(n); ok {
			errs = append(errs, e.unparsed(c, fmt.Errorf("it names %s, which is %s only if the server has lower_case_table_names set", n, c)))
		}
	}
	return errors.Join(errs...)
}

// mentioned returns a captured table the statement's text names, if any.
func (e *edit) mentioned() (string, bool) {
	toks := e.st.toks
	for i, tok := range toks {
		name, ok := tok.ident()
		if !ok {
			continue
		}
		db := e.db
		if i >= 2 && toks[i-1].punct('.') {
			if d, ok := toks[i-2].ident(); ok {
				db = d
			}
		}
		if n := e.t.canon(db+"."+name, e.next); e.t.captured[n] {
			return n, true
		}
	}
	return "", false
}

// other: not a table definition change.
func (e *edit) other() error {
	if n, ok := e.mentioned(); ok {
		return e.ignored("it mentions %s but changes no table's columns", n)
	}
	return nil
}

// unreadable: a table definition change whose table names cannot be read.
// The server ran it, so the captured tables it mentions may have changed.
func (e *edit) unreadable() error {
	n, ok := e.mentioned()
	if !ok {
		return nil
	}
	return e.unparsed(n, fmt.Errorf("cannot read the table names: %w", e.st.bad))
}
