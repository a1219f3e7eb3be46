package schema

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser/ast"
)

// Provisional layouts. CREATE TABLE IF NOT EXISTS of a table the tracker has
// not seen (created before the relay's start position, or never) creates it
// with the statement's columns, or does nothing if it existed. Migration
// tools write this form all the time, so the tracker takes the statement's
// columns provisionally, with each column's type class, and the reader checks
// them against the first table map of the table: its column count and
// column types (present whatever binlog_row_metadata says). A match makes
// the layout verified; a disagreement (the table existed with another
// definition) stops the relay. Later DDL applies to a provisional layout as
// to any other and keeps it provisional (a rename carries the mark); a plain
// CREATE TABLE, a DROP or the binlog's own column names end it.

// ErrProvisional: a layout taken from CREATE TABLE IF NOT EXISTS disagrees
// with the table's table map: the table existed before the statement with
// another definition.
var ErrProvisional = errors.New("its rows disagree with the layout its CREATE TABLE IF NOT EXISTS gave (the table existed " +
	"with another definition, which the statement left as it was)")

// Provisional maps "db.table" to the type classes of its columns (see
// typeClass; "" where unknown) for the tables whose layout was taken from a
// CREATE TABLE IF NOT EXISTS and not yet checked against a table map. A
// checkpoint stores it with the layout, so a restart still checks them.
type Provisional map[string][]string

// Provisional is the tables whose layout is not verified yet; do not modify it.
func (t *Tracker) Provisional() Provisional { return t.provisional }

// SetProvisional marks the tables of p (a checkpoint's) that have a layout as
// not verified yet.
func (t *Tracker) SetProvisional(p Provisional) {
	next := Provisional{}
	for n, classes := range p {
		if cols, ok := t.tables[n]; ok && len(cols) == len(classes) {
			next[n] = slices.Clone(classes)
		}
	}
	t.provisional = next
}

// Verify checks a provisional layout of table against its table map's column
// types (one byte each, MySQL's type codes): a match makes it verified, a
// disagreement returns an error wrapping ErrProvisional that says where the
// two differ. A table whose layout is not provisional passes.
func (t *Tracker) Verify(db, table string, types []byte) error {
	n := db + "." + table
	classes, ok := t.provisional[n]
	if !ok {
		return nil
	}
	cols := t.tables[n]
	if len(types) != len(classes) {
		return fmt.Errorf("%w: its rows have %d columns, the CREATE TABLE IF NOT EXISTS read defines %d (%s)", ErrProvisional,
			len(types), len(classes), strings.Join(cols, ", "))
	}
	for i, want := range classes {
		if got := typeClass(types[i]); want != "" && got != "" && got != want {
			return fmt.Errorf("%w: column %d (%s) is %s in its rows, %s in the CREATE TABLE IF NOT EXISTS read", ErrProvisional,
				i+1, cols[i], got, want)
		}
	}
	next := maps.Clone(t.provisional)
	delete(next, n)
	t.provisional = next
	return nil
}

// typeClass is the class of a column type code (MySQL's, as in a table map
// or the TiDB parser's field types), coarse enough that a column's definition
// and its table map always agree: "" when not known. Strings, binary strings,
// ENUM, SET, TEXT, BLOB and JSON are one class (VARCHAR over its limit
// becomes TEXT, JSON is LONGTEXT on MariaDB); FLOAT and DOUBLE are one.
func typeClass(code byte) string {
	switch code {
	case 1, 2, 3, 8, 9: // TINY, SHORT, LONG, LONGLONG, INT24
		return "integer"
	case 4, 5:
		return "float"
	case 0, 246: // DECIMAL, NEWDECIMAL
		return "decimal"
	case 10, 14: // DATE, NEWDATE
		return "date"
	case 12, 18: // DATETIME, DATETIME2
		return "datetime"
	case 7, 17: // TIMESTAMP, TIMESTAMP2
		return "timestamp"
	case 11, 19: // TIME, TIME2
		return "time"
	case 13:
		return "year"
	case 16:
		return "bit"
	case 15, 245, 247, 248, 249, 250, 251, 252, 253, 254: // VARCHAR, JSON, ENUM, SET, BLOBs, VAR_STRING, STRING
		return "text"
	case 255:
		return "geometry"
	}
	return ""
}

// fieldClass is the type class of a parsed column definition.
func fieldClass(c *ast.ColumnDef) string {
	if c.Tp == nil {
		return ""
	}
	return typeClass(c.Tp.GetType())
}

// wordClasses are the type classes of the words that open a column type, for
// definitions read without the TiDB parser.
var wordClasses = map[string]string{}

func init() {
	for class, words := range map[string]string{
		"integer": "TINYINT SMALLINT MEDIUMINT MIDDLEINT INT INTEGER BIGINT INT1 INT2 INT3 INT4 INT8 BOOL BOOLEAN SERIAL",
		"float":   "FLOAT DOUBLE REAL FLOAT4 FLOAT8",
		"decimal": "DECIMAL DEC NUMERIC FIXED",
		"date":    "DATE", "datetime": "DATETIME", "timestamp": "TIMESTAMP", "time": "TIME", "year": "YEAR", "bit": "BIT",
		"text": "CHAR VARCHAR NCHAR NVARCHAR NATIONAL CHARACTER BINARY VARBINARY TINYTEXT TEXT MEDIUMTEXT LONGTEXT " +
			"TINYBLOB BLOB MEDIUMBLOB LONGBLOB ENUM SET JSON",
	} {
		for _, w := range strings.Fields(words) {
			wordClasses[w] = class
		}
	}
}

// wordClass is the type class of a column definition read without the TiDB
// parser (the tokens after its name).
func wordClass(def []token) string {
	if len(def) == 0 || def[0].kind != tWord {
		return ""
	}
	return wordClasses[strings.ToUpper(def[0].text)]
}

func (e *edit) writeProv() Provisional {
	if !e.provCopied {
		e.prov, e.provCopied = maps.Clone(e.t.provisional), true
	}
	return e.prov
}

// setProv marks n's layout provisional with classes (nil: verified).
func (e *edit) setProv(n string, classes []string) {
	_, had := e.prov[n]
	_, tracked := e.next[n]
	switch {
	case classes != nil && tracked:
		e.writeProv()[n] = slices.Clone(classes)
	case had:
		delete(e.writeProv(), n)
	}
}

// classesAfter is the type classes of out, the columns an ALTER TABLE's ops
// leave of cols (whose classes are classes), as applyOps computes them: a
// column keeps its class unless an operation defines it anew.
func classesAfter(cols, classes []string, ops []colOp, out []string) []string {
	was := map[string]string{}
	for i, c := range cols {
		was[strings.ToLower(c)] = classes[i]
	}
	now := maps.Clone(was)
	has := func(list []string, c string) bool {
		return slices.ContainsFunc(list, func(x string) bool { return strings.EqualFold(x, c) })
	}
	added := slices.Clone(cols) // what exists for IF NOT EXISTS, as applyOps reads it
	for _, o := range ops {
		switch {
		case o.kind == opChange && o.ifExists && !has(cols, o.old):
		case o.kind == opChange && !o.def:
			now[strings.ToLower(o.name)] = was[strings.ToLower(o.old)]
		case o.kind == opChange:
			added = append(added, o.name)
			now[strings.ToLower(o.name)] = o.class
		case o.kind == opAdd && o.ifNot && has(added, o.name):
		case o.kind == opAdd:
			added = append(added, o.name)
			now[strings.ToLower(o.name)] = o.class
		}
	}
	res := make([]string, len(out))
	for i, c := range out {
		res[i] = now[strings.ToLower(c)]
	}
	return res
}
