package schema

// The statement handlers: how each table definition change (CREATE, ALTER,
// DROP, RENAME, DROP DATABASE) edits the layout of the captured and shadow
// tables.

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// likeSource returns the table a CREATE TABLE ... LIKE copies.
func likeSource(body []token) (tableRef, bool) {
	p := &cursor{toks: body}
	paren := p.acceptPunct('(')
	if !p.accept("LIKE") {
		return tableRef{}, false
	}
	r, err := p.name()
	if err != nil || paren && !p.acceptPunct(')') || !p.done() {
		return tableRef{}, false
	}
	return r, true
}

func (e *edit) create() error {
	st := e.st
	n := e.key(st.table)
	if err := e.clashErr(n); err != nil {
		return err
	}
	src, isLike := likeSource(st.body)
	_, srcTracked := e.next[e.key(src)]
	if !e.relevant(n) && !(isLike && srcTracked) {
		return nil
	}
	captured := e.t.captured[n]
	if st.temporary {
		if captured {
			return e.ignored("a temporary table named %s hides the table in its own session only", n)
		}
		return nil
	}
	if _, exists := e.next[n]; exists && st.ifNotExists {
		return nil // the table is there: nothing happens
	}
	// Of a table not seen (it may have existed, and then stays as it was):
	// its layout is provisional until a table map confirms it.
	provisional := st.ifNotExists && !e.t.absent[n]
	if provisional && isLike {
		why := "CREATE TABLE IF NOT EXISTS ... LIKE of a table whose layout was not tracked: it may have existed, and then stays as it was"
		if captured {
			return e.unparsed(n, why)
		}
		e.unknown(n, why)
		return nil
	}
	var cols, unsigned, classes []string
	signs := true
	var err error
	if isLike {
		from := e.key(src)
		var ok bool
		if cols, ok = e.next[from]; !ok {
			err = fmt.Errorf("%w: it is created LIKE %s, whose layout is not tracked%s", errUnknownCols, from, e.why(from))
		}
		unsigned, signs = e.signs[from]
	} else if len(st.body) > 0 && (st.body[0].is("LIKE") || len(st.body) > 1 && st.body[1].is("LIKE")) {
		err = fmt.Errorf("%w: cannot read the LIKE clause", errSyntax)
	} else {
		cols, unsigned, classes, err = createColumns(e.t.p, st.body)
	}
	if err != nil {
		if captured {
			return e.unparsed(n, err)
		}
		e.unknown(n, fmt.Sprintf("%s: %v", st.verb, err))
		return nil
	}
	e.set(n, cols, unsigned, signs)
	if provisional {
		e.setProv(n, classes)
	}
	return nil
}

func (e *edit) alter() error {
	st := e.st
	n := e.key(st.table)
	if err := e.clashErr(n); err != nil {
		return err
	}
	captured := e.t.captured[n]
	cols, known := e.next[n]
	ops, opErr := alterOps(e.t.p, st.body)
	var target *tableRef
	for _, o := range ops {
		if o.kind == opRenameTable {
			t := o.table
			target = &t
		}
	}
	if target != nil {
		if err := e.clashErr(e.key(*target)); err != nil {
			return err
		}
	}
	if st.ifExists && !known && e.t.absent[n] {
		return nil // no such table: nothing happens
	}
	if !known {
		switch {
		case opErr != nil && hasWord(st.body, "RENAME"):
			// It may have moved this table onto a captured name.
			if c, ok := e.mentioned(); ok && c != n {
				return e.unparsed(c, fmt.Errorf("%s %s may rename %s onto it: %w", st.verb, n, n, opErr))
			}
		case target != nil:
			to := e.key(*target)
			if !st.ifExists {
				e.gone(n)
			}
			if e.t.captured[to] {
				return e.unparsed(to, fmt.Errorf("%s renames %s, whose layout is not tracked%s, to it", st.verb, n, e.why(n)))
			}
			e.unknown(to, fmt.Sprintf("renamed from %s, whose layout was not tracked", n))
			return nil
		}
		if captured {
			return e.ignored("the layout of %s is not tracked%s: its rows need column names in the binlog", n, e.why(n))
		}
		return nil
	}
	if opErr != nil {
		if captured {
			return e.unparsed(n, opErr)
		}
		e.unknown(n, fmt.Sprintf("%s: %v", st.verb, opErr))
		return nil
	}
	unsigned, signs := e.signs[n]
	next, nextUnsigned, _, err := applyOps(cols, unsigned, ops)
	if err != nil {
		if _, prov := e.prov[n]; prov {
			err = fmt.Errorf("%w (that layout came from a CREATE TABLE IF NOT EXISTS, not yet checked against rows: the table "+
				"may have existed with another definition)", err)
		}
		err = fmt.Errorf("the tracked layout %v does not allow it: %w", cols, err)
		if captured {
			return e.unparsed(n, err)
		}
		e.unknown(n, fmt.Sprintf("%s: %v", st.verb, err))
		return nil
	}
	to := n
	if target != nil {
		to = e.key(*target)
	}
	classes, prov := e.prov[n]
	if to != n {
		e.gone(n)
	}
	e.set(to, next, nextUnsigned, signs)
	if prov { // an ALTER does not say what the table was: still to be checked
		e.setProv(to, classesAfter(cols, classes, ops, next))
	}
	return nil
}

func (e *edit) drop() error {
	var names []string
	for _, r := range e.st.tables {
		names = append(names, e.key(r))
	}
	if err := e.clashErr(names...); err != nil {
		return err
	}
	for _, n := range names {
		if !e.relevant(n) {
			continue
		}
		if e.st.temporary {
			if e.t.captured[n] {
				return e.ignored("it drops a temporary table named %s, not the table", n)
			}
			continue
		}
		e.gone(n)
	}
	return nil
}

// rename applies RENAME TABLE pairs in order, as the server does.
func (e *edit) rename() error {
	var errs []error
	for _, pair := range e.st.pairs {
		from, to := e.key(pair[0]), e.key(pair[1])
		if err := e.clashErr(from, to); err != nil {
			errs = append(errs, err)
			continue
		}
		if !e.relevant(from) && !e.relevant(to) {
			continue
		}
		cols, known := e.next[from]
		if !known && e.st.ifExists {
			if _, toExists := e.next[to]; toExists || e.t.absent[from] {
				continue // there was nothing to rename (else the rename could not have run)
			}
		}
		if known {
			unsigned, signs := e.signs[from]
			classes, prov := e.prov[from]
			e.gone(from)
			e.set(to, cols, unsigned, signs)
			if prov {
				e.setProv(to, classes)
			}
			continue
		}
		why := fmt.Sprintf("renamed from %s, whose layout was not tracked%s", from, e.why(from))
		if !e.st.ifExists {
			e.gone(from)
		}
		if e.t.captured[to] {
			errs = append(errs, e.unparsed(to, why))
			continue
		}
		e.unknown(to, why)
	}
	return errors.Join(errs...)
}

func (e *edit) dropDatabase() {
	var names []string
	for n := range e.next {
		names = append(names, n)
	}
	for n := range e.t.captured {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if db, _, _ := strings.Cut(n, "."); e.t.dbKey(db) == e.t.dbKey(e.st.db) {
			e.gone(n)
		}
	}
}
