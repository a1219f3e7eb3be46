package schema

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pingcap/tidb/pkg/parser"
	"github.com/pingcap/tidb/pkg/parser/ast"
	"github.com/pingcap/tidb/pkg/parser/mysql"
)

// How a CREATE TABLE or ALTER TABLE changes columns is read with the TiDB
// parser first. MariaDB syntax it rejects (INVISIBLE, COMPRESSED, INET6,
// PERSISTENT, ...) is read by a small reader of the statement's structure
// instead, which only needs column names and positions and refuses anything
// it does not recognise. Statements that add columns the text does not name
// (system versioning, a SELECT) have no certain layout and are errors.

// errUnknownCols: the statement's columns cannot be known from its text.
var errUnknownCols = errors.New("columns not known from the statement")

// createColumns returns the columns a CREATE TABLE body (what follows the
// table name, not the LIKE form) defines, and those of them declared
// UNSIGNED (or ZEROFILL, which implies it), and each column's type class
// (typeClass; "" where unknown).
func createColumns(p *parser.Parser, body []token) (cols, unsigned, classes []string, err error) {
	if hasWord(body, "VERSIONING") && !hasSeq(body, "ROW", "START") {
		return nil, nil, nil, fmt.Errorf("%w: a system-versioned table gets columns the statement does not name", errUnknownCols)
	}
	if stmts, _, err := p.Parse("CREATE TABLE `t` "+join(body), "", ""); err == nil && len(stmts) == 1 {
		if s, ok := stmts[0].(*ast.CreateTableStmt); ok {
			switch {
			case s.Select != nil:
				return nil, nil, nil, fmt.Errorf("%w: it takes columns from a SELECT", errUnknownCols)
			case s.ReferTable != nil:
				return nil, nil, nil, errSyntax // LIKE is read before: cannot happen
			case len(s.Cols) == 0:
				return nil, nil, nil, fmt.Errorf("%w: it names no columns", errUnknownCols)
			}
			cols := make([]string, len(s.Cols))
			classes := make([]string, len(s.Cols))
			for i, c := range s.Cols {
				cols[i], classes[i] = c.Name.Name.O, fieldClass(c)
				if defUnsigned(c) {
					unsigned = append(unsigned, cols[i])
				}
			}
			return cols, unsigned, classes, checkUnique(cols)
		}
	}
	return readCreate(body)
}

// defUnsigned reports whether a parsed column definition is UNSIGNED (or
// ZEROFILL, which implies it).
func defUnsigned(c *ast.ColumnDef) bool {
	if c.Tp == nil {
		return false
	}
	f := c.Tp.GetFlag()
	return mysql.HasUnsignedFlag(f) || mysql.HasZerofillFlag(f)
}

// wordUnsigned reports whether a column definition's type and attributes
// (the tokens after its name) say UNSIGNED or ZEROFILL outside parentheses
// (a CAST in a default or generated expression is inside them) and not as
// the column named by AFTER.
func wordUnsigned(def []token) bool {
	depth := 0
	for i, tok := range def {
		switch {
		case tok.punct('('):
			depth++
		case tok.punct(')'):
			depth--
		case depth > 0:
		case i > 0 && def[i-1].is("AFTER"):
		case tok.is("UNSIGNED"), tok.is("ZEROFILL"):
			return true
		}
	}
	return false
}

// nonColumn are the words that open a CREATE TABLE element or an ALTER ADD/DROP
// that is not a column.
var nonColumn = map[string]bool{"PRIMARY": true, "KEY": true, "INDEX": true, "UNIQUE": true, "CONSTRAINT": true,
	"FOREIGN": true, "FULLTEXT": true, "SPATIAL": true, "CHECK": true}

// readCreate reads a CREATE TABLE body's column names without the TiDB
// parser: "( element, ... ) options", each element a column unless it opens
// with an index or constraint keyword.
func readCreate(body []token) (cols, unsigned, classes []string, err error) {
	if len(body) == 0 || !body[0].punct('(') {
		return nil, nil, nil, fmt.Errorf("%w: it has no column list", errUnknownCols)
	}
	end := closing(body, 0)
	if end < 0 {
		return nil, nil, nil, errSyntax
	}
	for _, el := range splitTop(body[1:end]) {
		if len(el) == 0 {
			return nil, nil, nil, errSyntax
		}
		if notColumn(el) {
			continue
		}
		name, ok := el[0].ident()
		if !ok || len(el) < 2 {
			return nil, nil, nil, fmt.Errorf("%w: cannot read column definition %q", errSyntax, shown(el))
		}
		cols = append(cols, name)
		classes = append(classes, wordClass(el[1:]))
		if wordUnsigned(el[1:]) {
			unsigned = append(unsigned, name)
		}
	}
	if len(cols) == 0 {
		return nil, nil, nil, fmt.Errorf("%w: it names no columns", errUnknownCols)
	}
	rest := body[end+1:]
	if hasWord(rest, "SELECT") {
		return nil, nil, nil, fmt.Errorf("%w: it takes columns from a SELECT", errUnknownCols)
	}
	depth := 0
	for _, tok := range rest {
		switch {
		case tok.punct('('):
			depth++
		case tok.punct(')'):
			depth--
		case depth == 0 && (tok.is("AS") || tok.is("TABLE") || tok.is("VALUES") || tok.is("IGNORE") || tok.is("REPLACE")):
			return nil, nil, nil, fmt.Errorf("%w: it takes columns from a query", errUnknownCols)
		}
	}
	return cols, unsigned, classes, checkUnique(cols)
}

// notColumn reports whether a table element or ADD/DROP target (from its
// first token) is an index, constraint, period or the like.
func notColumn(el []token) bool {
	if len(el) == 0 || el[0].kind != tWord {
		return false
	}
	w := strings.ToUpper(el[0].text)
	next := func(kws ...string) bool {
		return len(el) > 1 && slices.ContainsFunc(kws, el[1].is)
	}
	return nonColumn[w] || w == "PERIOD" && next("FOR") || w == "VECTOR" && next("INDEX", "KEY") ||
		w == "PARTITION" || w == "SYSTEM" && next("VERSIONING")
}

func checkUnique(cols []string) error {
	for i, c := range cols {
		for _, d := range cols[:i] {
			if strings.EqualFold(c, d) {
				return fmt.Errorf("column %s twice", c)
			}
		}
	}
	return nil
}

// opKind is a column change of an ALTER TABLE.
type opKind uint8

const (
	opAdd         opKind = iota + 1
	opDrop               // old
	opChange             // old -> name (MODIFY: the same), maybe moved
	opRenameTable        // table
)

// colOp is one column-changing ALTER TABLE specification.
type colOp struct {
	kind      opKind
	old, name string
	// def: the operation gives the column's definition (ADD, CHANGE,
	// MODIFY; not RENAME COLUMN), which says whether it is unsigned.
	def, unsigned   bool
	class           string // the type class the definition gives (def), "" if unknown
	ifExists, ifNot bool
	first           bool
	after           string
	table           tableRef
}

func (o colOp) moves() bool { return o.first || o.after != "" }

// alterOps reads an ALTER TABLE's specifications into column changes
// (specifications that change no column are left out).
func alterOps(p *parser.Parser, specs []token) ([]colOp, error) {
	if hasWord(specs, "VERSIONING") {
		return nil, fmt.Errorf("%w: system versioning adds or drops columns the statement does not name", errUnknownCols)
	}
	if len(specs) == 0 {
		return nil, nil
	}
	if stmts, _, err := p.Parse("ALTER TABLE `t` "+join(specs), "", ""); err == nil && len(stmts) == 1 {
		if s, ok := stmts[0].(*ast.AlterTableStmt); ok {
			return astOps(s.Specs), nil
		}
	}
	var ops []colOp
	for _, spec := range splitTop(specs) {
		o, err := readSpec(spec)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

func astOps(specs []*ast.AlterTableSpec) []colOp {
	var ops []colOp
	pos := func(o *colOp, cp *ast.ColumnPosition) {
		if cp == nil {
			return
		}
		switch cp.Tp {
		case ast.ColumnPositionFirst:
			o.first = true
		case ast.ColumnPositionAfter:
			o.after = cp.RelativeColumn.Name.O
		}
	}
	for _, sp := range specs {
		switch sp.Tp {
		case ast.AlterTableAddColumns:
			for i, c := range sp.NewColumns {
				o := colOp{kind: opAdd, name: c.Name.Name.O, ifNot: sp.IfNotExists, def: true, unsigned: defUnsigned(c), class: fieldClass(c)}
				if i == 0 {
					pos(&o, sp.Position)
				} else if ops[len(ops)-1].moves() { // ADD (a, b) placed: b follows a
					o.after = sp.NewColumns[i-1].Name.Name.O
				}
				ops = append(ops, o)
			}
		case ast.AlterTableDropColumn:
			ops = append(ops, colOp{kind: opDrop, old: sp.OldColumnName.Name.O, ifExists: sp.IfExists})
		case ast.AlterTableModifyColumn, ast.AlterTableChangeColumn:
			o := colOp{kind: opChange, old: sp.NewColumns[0].Name.Name.O, name: sp.NewColumns[0].Name.Name.O, ifExists: sp.IfExists,
				def: true, unsigned: defUnsigned(sp.NewColumns[0]), class: fieldClass(sp.NewColumns[0])}
			if sp.OldColumnName != nil {
				o.old = sp.OldColumnName.Name.O
			}
			pos(&o, sp.Position)
			ops = append(ops, o)
		case ast.AlterTableRenameColumn:
			ops = append(ops, colOp{kind: opChange, old: sp.OldColumnName.Name.O, name: sp.NewColumnName.Name.O, ifExists: sp.IfExists})
		case ast.AlterTableRenameTable:
			ops = append(ops, colOp{kind: opRenameTable, table: tableRef{db: sp.NewTable.Schema.O, name: sp.NewTable.Name.O}})
		}
	}
	return ops
}

// neutralSpec are the words opening an ALTER TABLE specification that
// changes no column: table options, locking, algorithm, keys, partitions.
var neutralSpec = map[string]bool{"ALGORITHM": true, "LOCK": true, "FORCE": true, "ENGINE": true, "AUTO_INCREMENT": true,
	"AVG_ROW_LENGTH": true, "CHARACTER": true, "CHARSET": true, "DEFAULT": true, "COLLATE": true, "CONVERT": true,
	"COMMENT": true, "CONNECTION": true, "CHECKSUM": true, "PAGE_CHECKSUM": true, "PAGE_COMPRESSED": true,
	"PAGE_COMPRESSION_LEVEL": true, "COMPRESSION": true, "DATA": true, "INDEX": true, "DELAY_KEY_WRITE": true,
	"ENCRYPTED": true, "ENCRYPTION": true, "ENCRYPTION_KEY_ID": true, "IETF_QUOTES": true, "INSERT_METHOD": true,
	"KEY_BLOCK_SIZE": true, "MAX_ROWS": true, "MIN_ROWS": true, "PACK_KEYS": true, "PASSWORD": true,
	"ROW_FORMAT": true, "SEQUENCE": true, "STATS_AUTO_RECALC": true, "STATS_PERSISTENT": true,
	"STATS_SAMPLE_PAGES": true, "TABLESPACE": true, "TRANSACTIONAL": true, "UNION": true, "ENABLE": true,
	"DISABLE": true, "DISCARD": true, "IMPORT": true, "ORDER": true, "PARTITION": true, "REMOVE": true,
	"COALESCE": true, "REORGANIZE": true, "EXCHANGE": true, "TRUNCATE": true, "ANALYZE": true, "CHECK": true,
	"OPTIMIZE": true, "REBUILD": true, "REPAIR": true, "UPGRADE": true, "WITH": true, "WITHOUT": true,
	"AUTOEXTEND_SIZE": true, "ENGINE_ATTRIBUTE": true, "SECONDARY_ENGINE": true, "SECONDARY_ENGINE_ATTRIBUTE": true,
	"SECONDARY_LOAD": true, "SECONDARY_UNLOAD": true, "STORAGE": true, "ALTER": true}

// readSpec reads one ALTER TABLE specification without the TiDB parser.
func readSpec(spec []token) ([]colOp, error) {
	bad := func() ([]colOp, error) {
		return nil, fmt.Errorf("%w: cannot read %q", errSyntax, shown(spec))
	}
	if len(spec) == 0 || spec[0].kind != tWord {
		return bad()
	}
	p := &cursor{toks: spec, i: 1}
	switch w := strings.ToUpper(spec[0].text); w {
	case "ADD":
		col := p.accept("COLUMN")
		if !col && notColumn(p.rest()) {
			return nil, nil
		}
		ifNot := p.accept("IF", "NOT", "EXISTS")
		if p.i < len(spec) && spec[p.i].punct('(') { // ADD [COLUMN] (a INT, b INT)
			end := closing(spec, p.i)
			if end != len(spec)-1 {
				return bad()
			}
			var ops []colOp
			for _, el := range splitTop(spec[p.i+1 : end]) {
				if len(el) == 0 {
					return bad()
				}
				if notColumn(el) {
					continue
				}
				name, ok := el[0].ident()
				if !ok || len(el) < 2 {
					return bad()
				}
				ops = append(ops, colOp{kind: opAdd, name: name, ifNot: ifNot, def: true, unsigned: wordUnsigned(el[1:]), class: wordClass(el[1:])})
			}
			return ops, nil
		}
		name, ok := p.ident()
		if !ok || p.done() {
			return bad()
		}
		o := colOp{kind: opAdd, name: name, ifNot: ifNot, def: true, unsigned: wordUnsigned(p.rest()), class: wordClass(p.rest())}
		if err := position(&o, p.rest()); err != nil {
			return nil, err
		}
		return []colOp{o}, nil
	case "DROP":
		col := p.accept("COLUMN")
		if !col && notColumn(p.rest()) {
			return nil, nil
		}
		ifEx := p.accept("IF", "EXISTS")
		name, ok := p.ident()
		if !ok {
			return bad()
		}
		p.accept("RESTRICT")
		p.accept("CASCADE")
		if !p.done() {
			return bad()
		}
		return []colOp{{kind: opDrop, old: name, ifExists: ifEx}}, nil
	case "CHANGE", "MODIFY":
		p.accept("COLUMN")
		ifEx := p.accept("IF", "EXISTS")
		old, ok := p.ident()
		if !ok {
			return bad()
		}
		name := old
		if w == "CHANGE" {
			if name, ok = p.ident(); !ok {
				return bad()
			}
		}
		if p.done() {
			return bad()
		}
		o := colOp{kind: opChange, old: old, name: name, ifExists: ifEx, def: true, unsigned: wordUnsigned(p.rest()), class: wordClass(p.rest())}
		if err := position(&o, p.rest()); err != nil {
			return nil, err
		}
		return []colOp{o}, nil
	case "RENAME":
		switch {
		case p.accept("COLUMN"):
			ifEx := p.accept("IF", "EXISTS")
			old, ok := p.ident()
			if !ok || !p.accept("TO") {
				return bad()
			}
			name, ok := p.ident()
			if !ok || !p.done() {
				return bad()
			}
			return []colOp{{kind: opChange, old: old, name: name, ifExists: ifEx}}, nil
		case p.accept("INDEX"), p.accept("KEY"):
			return nil, nil
		}
		if !p.accept("TO") {
			p.accept("AS")
		}
		t, err := p.name()
		if err != nil || !p.done() {
			return bad()
		}
		return []colOp{{kind: opRenameTable, table: t}}, nil
	}
	if neutralSpec[strings.ToUpper(spec[0].text)] {
		return nil, nil
	}
	return bad()
}

// position reads FIRST or AFTER col from the rest of a column definition
// (outside parentheses: the type and attributes never hold those words).
func position(o *colOp, def []token) error {
	depth := 0
	for i, tok := range def {
		switch {
		case tok.punct('('):
			depth++
		case tok.punct(')'):
			depth--
		case depth > 0 || o.moves():
		case tok.is("FIRST"):
			o.first = true
		case tok.is("AFTER"):
			if i+1 >= len(def) {
				return fmt.Errorf("%w: AFTER without a column", errSyntax)
			}
			col, ok := def[i+1].ident()
			if !ok {
				return fmt.Errorf("%w: AFTER without a column", errSyntax)
			}
			o.after = col
		}
	}
	return nil
}

// applyOps computes the columns after ops, the way the server does
// (MySQL's and MariaDB's mysql_prepare_alter_table; see placeColumns). IF
// [NOT] EXISTS specifications that do not apply are skipped. An error means
// cols cannot be the table's layout (the server would have refused the
// statement). target is the table's new name when renamed.
//
// unsigned are the table's unsigned columns before; unsignedOut those after
// (a changed column takes its new definition's, a renamed one keeps its own).
func applyOps(cols, unsigned []string, ops []colOp) (out, unsignedOut []string, target *tableRef, err error) {
	find := func(list []string, c string) int {
		return slices.IndexFunc(list, func(x string) bool { return strings.EqualFold(x, c) })
	}
	var kept []colOp
	added := slices.Clone(cols) // what exists for IF NOT EXISTS: the table's columns, earlier ADDs and CHANGEs
	var dropped []string
	for _, o := range ops {
		switch o.kind {
		case opAdd:
			if o.ifNot && find(added, o.name) >= 0 {
				continue
			}
			added = append(added, o.name)
		case opDrop:
			// DROP IF EXISTS of a column the table lacks, or that an
			// earlier DROP drops, does nothing (MariaDB).
			if o.ifExists && (find(cols, o.old) < 0 || find(dropped, o.old) >= 0) {
				continue
			}
			if find(cols, o.old) < 0 {
				return nil, nil, nil, fmt.Errorf("no column %s", o.old)
			}
			dropped = append(dropped, o.old)
		case opChange: // of the table's column, or of one an earlier clause added (placeColumns)
			if o.ifExists && find(cols, o.old) < 0 {
				continue
			}
			if o.def { // a CHANGE or MODIFY names a column for a later ADD IF NOT EXISTS (MariaDB), a RENAME COLUMN does not
				added = append(added, o.name)
			}
		case opRenameTable:
			t := o.table
			target = &t
			continue
		}
		kept = append(kept, o)
	}
	if out, err = placeColumns(cols, kept); err != nil {
		return nil, nil, nil, err
	}
	if err := checkUnique(out); err != nil {
		return nil, nil, nil, err
	}
	// Signedness: what each kept column had, what each change and addition
	// defines (every change is matched against the columns before, as the
	// server does, so RENAME COLUMN a TO b, b TO a swaps them).
	was := map[string]bool{}
	for _, c := range unsigned {
		was[strings.ToLower(c)] = true
	}
	now := map[string]bool{}
	for _, c := range cols {
		if !slices.ContainsFunc(kept, func(o colOp) bool {
			return (o.kind == opDrop || o.kind == opChange) && strings.EqualFold(o.old, c)
		}) {
			now[strings.ToLower(c)] = was[strings.ToLower(c)]
		}
	}
	for _, o := range kept {
		switch {
		case o.kind == opChange && !o.def:
			now[strings.ToLower(o.name)] = was[strings.ToLower(o.old)]
		case o.kind == opChange, o.kind == opAdd:
			now[strings.ToLower(o.name)] = o.unsigned
		}
	}
	for _, c := range out {
		if now[strings.ToLower(c)] {
			unsignedOut = append(unsignedOut, c)
		}
	}
	return out, unsignedOut, target, nil
}

// placeColumns lays out the columns an ALTER TABLE's column changes leave
// of cols, as the server builds the new table (MySQL's and MariaDB's
// mysql_prepare_alter_table): first the table's columns in their order,
// less the dropped ones, each changed one under its new name in its own
// place; then, in statement order, each added column and each changed one
// with a position (FIRST, AFTER) leaves its place, if it has one, and goes
// where its position says in the list as built so far. So AFTER names a
// column by its new name and sees the places the clauses before it gave,
// never those of the clauses after it: MODIFY a ... AFTER b, MODIFY b ...
// FIRST puts a after b's old place, then b first. A change of a column the
// table does not have (or that an earlier clause drops or changes) takes
// the column an earlier clause added by the change's new name, and places
// it anew (ADD x ... FIRST, MODIFY x ... puts x last). Names compare
// without regard to case, as the server's column names do.
func placeColumns(cols []string, ops []colOp) ([]string, error) {
	type slot struct {
		name string
		op   int // the index in ops of the change or addition that placed it; -1: unchanged
		// added: a column the table did not have (an ADD, or a change
		// that replaced one).
		added bool
	}
	matched := make([]bool, len(ops))
	var list []slot
	first := func(kind opKind, c string) int { // the first clause of kind on column c
		return slices.IndexFunc(ops, func(o colOp) bool { return o.kind == kind && strings.EqualFold(o.old, c) })
	}
	for _, c := range cols {
		if i := first(opDrop, c); i >= 0 {
			matched[i] = true
			continue
		}
		if i := first(opChange, c); i >= 0 {
			matched[i] = true
			list = append(list, slot{name: ops[i].name, op: i})
			continue
		}
		list = append(list, slot{name: c, op: -1})
	}
	for i, o := range ops {
		if o.kind == opDrop && !matched[i] {
			return nil, fmt.Errorf("no column %s to drop: an earlier clause drops it", o.old)
		}
	}
	for i, o := range ops {
		switch {
		case o.kind == opAdd:
		case o.kind == opChange && !matched[i]:
			// Not a column of the table (or one an earlier clause drops or
			// changes): the server takes the column an earlier clause
			// added by the change's new name, which the change replaces.
			j := slices.IndexFunc(list, func(s slot) bool { return s.added && strings.EqualFold(s.name, o.name) })
			if j < 0 {
				return nil, fmt.Errorf("no column %s", o.old)
			}
			list = slices.Delete(list, j, j+1)
		case o.kind == opChange && o.moves():
			list = slices.DeleteFunc(list, func(s slot) bool { return s.op == i })
		default:
			continue
		}
		s := slot{name: o.name, op: i, added: !matched[i]}
		switch {
		case o.first:
			list = slices.Insert(list, 0, s)
		case o.after != "":
			j := slices.IndexFunc(list, func(s slot) bool { return strings.EqualFold(s.name, o.after) })
			if j < 0 {
				return nil, fmt.Errorf("AFTER %s: no such column", o.after)
			}
			list = slices.Insert(list, j+1, s)
		default:
			list = append(list, s)
		}
	}
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.name
	}
	return out, nil
}
