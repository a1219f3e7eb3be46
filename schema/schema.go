// Package schema tracks the column layout of the captured tables as the
// binlog is read, for servers that do not put column names in the binlog
// (binlog_row_metadata MINIMAL or NO_LOG). DDL statements (QUERY events) are
// parsed with the TiDB parser and applied in binlog order, so each row is
// decoded with the columns its table had when the row was written.
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
	"github.com/pingcap/tidb/pkg/parser/ast"
	_ "github.com/pingcap/tidb/pkg/parser/test_driver" // value expressions in DDL
)

// ErrUnparsed: a statement that names a captured table could not be parsed,
// so the tracked layout may be wrong from here on.
var ErrUnparsed = errors.New("unparsed DDL on a captured table")

// Tables maps "db.table" to its columns in table order.
type Tables map[string][]string

// Tracker holds the layout of the captured tables at the current position.
type Tracker struct {
	captured map[string]bool
	tables   Tables
	p        *parser.Parser
}

// New tracks the captured tables ("db.table"), starting from initial
// (may be nil: nothing known yet).
func New(captured []string, initial Tables) *Tracker {
	t := &Tracker{captured: map[string]bool{}, tables: Tables{}, p: parser.New()}
	for _, c := range captured {
		t.captured[c] = true
	}
	for k, v := range initial {
		if t.captured[k] {
			t.tables[k] = slices.Clone(v)
		}
	}
	return t
}

// Tables is the current layout; do not modify it.
func (t *Tracker) Tables() Tables { return t.tables }

// Seed records cols for a captured table whose layout is not known yet
// (learned from the binlog's own column names).
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

// Apply parses one QUERY event's statement (defaultDB is the event's
// current database) and applies what it does to captured tables. It returns
// whether the layout changed. A statement the parser cannot read is an error
// wrapping ErrUnparsed only if its text names a captured table; otherwise it
// is ignored and the error is returned with changed false for logging.
func (t *Tracker) Apply(defaultDB, query string) (bool, error) {
	stmts, _, err := t.p.Parse(query, "", "")
	if err != nil {
		for name := range t.captured {
			_, tbl, _ := strings.Cut(name, ".")
			if strings.Contains(strings.ToLower(query), strings.ToLower(tbl)) {
				return false, fmt.Errorf("%w: %s: %v", ErrUnparsed, name, err)
			}
		}
		return false, fmt.Errorf("parse statement (ignored, names no captured table): %w", err)
	}
	next := t.tables
	copied := false
	edit := func() Tables { // copy on the first write: snapshots handed out stay as they were
		if !copied {
			next, copied = maps.Clone(t.tables), true
		}
		return next
	}
	name := func(tn *ast.TableName) string {
		db := tn.Schema.O
		if db == "" {
			db = defaultDB
		}
		return db + "." + tn.Name.O
	}
	for _, st := range stmts {
		switch s := st.(type) {
		case *ast.CreateTableStmt:
			n := name(s.Table)
			if !t.captured[n] {
				continue
			}
			var cols []string
			if s.ReferTable != nil { // CREATE TABLE ... LIKE
				src, ok := next[name(s.ReferTable)]
				if !ok {
					return false, fmt.Errorf("%w: %s is created LIKE %s, whose columns are unknown", ErrUnparsed, n, name(s.ReferTable))
				}
				cols = slices.Clone(src)
			} else {
				for _, c := range s.Cols {
					cols = append(cols, c.Name.Name.O)
				}
			}
			if s.IfNotExists {
				if _, exists := next[n]; exists {
					continue
				}
			}
			edit()[n] = cols
		case *ast.DropTableStmt:
			for _, tn := range s.Tables {
				if n := name(tn); t.captured[n] {
					delete(edit(), n)
				}
			}
		case *ast.RenameTableStmt:
			for _, tt := range s.TableToTables {
				from, to := name(tt.OldTable), name(tt.NewTable)
				cols, known := next[from]
				if t.captured[from] {
					delete(edit(), from)
				}
				if t.captured[to] && known {
					edit()[to] = cols
				}
			}
		case *ast.AlterTableStmt:
			n := name(s.Table)
			cols, known := next[n]
			if !t.captured[n] || !known {
				if t.captured[n] {
					return false, fmt.Errorf("%w: ALTER of %s, whose columns are unknown", ErrUnparsed, n)
				}
				continue
			}
			cols, target, err := alter(slices.Clone(cols), s.Specs, func(tn *ast.TableName) string { return name(tn) })
			if err != nil {
				return false, fmt.Errorf("%w: %s: %v", ErrUnparsed, n, err)
			}
			delete(edit(), n)
			if target == "" {
				target = n
			}
			if t.captured[target] {
				edit()[target] = cols
			}
		}
	}
	t.tables = next
	return copied, nil
}

// alter applies ALTER TABLE specs to cols; target is the new name when the
// statement renames the table.
func alter(cols []string, specs []*ast.AlterTableSpec, name func(*ast.TableName) string) ([]string, string, error) {
	target := ""
	find := func(c string) int {
		return slices.IndexFunc(cols, func(x string) bool { return strings.EqualFold(x, c) })
	}
	place := func(col string, pos *ast.ColumnPosition) error {
		if pos == nil || pos.Tp == ast.ColumnPositionNone {
			cols = append(cols, col)
			return nil
		}
		if pos.Tp == ast.ColumnPositionFirst {
			cols = slices.Insert(cols, 0, col)
			return nil
		}
		i := find(pos.RelativeColumn.Name.O)
		if i < 0 {
			return fmt.Errorf("AFTER %s: no such column", pos.RelativeColumn.Name.O)
		}
		cols = slices.Insert(cols, i+1, col)
		return nil
	}
	for _, sp := range specs {
		switch sp.Tp {
		case ast.AlterTableAddColumns:
			for i, c := range sp.NewColumns {
				pos := sp.Position
				if i > 0 { // ADD COLUMN (a, b): in order, after the first
					pos = nil
				}
				if err := place(c.Name.Name.O, pos); err != nil {
					return nil, "", err
				}
			}
		case ast.AlterTableDropColumn:
			i := find(sp.OldColumnName.Name.O)
			if i < 0 {
				return nil, "", fmt.Errorf("DROP %s: no such column", sp.OldColumnName.Name.O)
			}
			cols = slices.Delete(cols, i, i+1)
		case ast.AlterTableModifyColumn, ast.AlterTableChangeColumn:
			old := sp.NewColumns[0].Name.Name.O
			if sp.OldColumnName != nil {
				old = sp.OldColumnName.Name.O
			}
			i := find(old)
			if i < 0 {
				return nil, "", fmt.Errorf("MODIFY/CHANGE %s: no such column", old)
			}
			newName := sp.NewColumns[0].Name.Name.O
			if sp.Position == nil || sp.Position.Tp == ast.ColumnPositionNone {
				cols[i] = newName
				continue
			}
			cols = slices.Delete(cols, i, i+1)
			if err := place(newName, sp.Position); err != nil {
				return nil, "", err
			}
		case ast.AlterTableRenameColumn:
			i := find(sp.OldColumnName.Name.O)
			if i < 0 {
				return nil, "", fmt.Errorf("RENAME COLUMN %s: no such column", sp.OldColumnName.Name.O)
			}
			cols[i] = sp.NewColumnName.Name.O
		case ast.AlterTableRenameTable:
			target = name(sp.NewTable)
		}
	}
	return cols, target, nil
}
