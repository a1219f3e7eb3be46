package schema

import (
	"errors"
	"slices"
	"strings"
)

// stmtKind is what a statement does to table definitions, decided by its
// leading keywords alone.
type stmtKind uint8

const (
	kOther        stmtKind = iota // changes no table's columns
	kCreateTable                  // CREATE [OR REPLACE] TABLE
	kAlterTable                   // ALTER [ONLINE] [IGNORE] TABLE
	kDropTable                    // DROP TABLE(S)
	kRenameTable                  // RENAME TABLE(S)
	kDropDatabase                 // DROP DATABASE|SCHEMA
)

// tableRef is a table name as written: db is empty when unqualified.
type tableRef struct{ db, name string }

// statement is a classified statement.
type statement struct {
	kind stmtKind
	verb string // leading keywords, for messages: "CREATE TRIGGER", "ALTER TABLE"
	toks []token
	// temporary: CREATE/DROP TEMPORARY TABLE, which the binlog of a ROW
	// server does not carry and which never changes a base table.
	temporary, orReplace, ifNotExists, ifExists bool
	table                                       tableRef   // CREATE, ALTER
	body                                        []token    // CREATE: after the name; ALTER: the specifications
	tables                                      []tableRef // DROP TABLE
	pairs                                       [][2]tableRef
	db                                          string // DROP DATABASE
	// bad: the leading keywords say table definition change but the names
	// could not be read.
	bad error
}

var errSyntax = errors.New("unexpected syntax")

// objects are the words naming what a CREATE/ALTER/DROP acts on, for verbs.
var objects = map[string]bool{"TABLE": true, "TABLES": true, "TRIGGER": true, "EVENT": true, "PROCEDURE": true,
	"FUNCTION": true, "VIEW": true, "INDEX": true, "DATABASE": true, "SCHEMA": true, "USER": true, "ROLE": true,
	"SEQUENCE": true, "SERVER": true, "PACKAGE": true, "TABLESPACE": true, "LOGFILE": true, "AGGREGATE": true}

// errQuoting: the statement's quotes end in other places by sql_mode,
// and its sql_mode is not known.
var errQuoting = errors.New("a backslash before a quote reads differently by sql_mode (NO_BACKSLASH_ESCAPES, ANSI_QUOTES), which the binlog event does not give")

// parseStatement lexes query as mode says and classifies it by its
// leading keywords (MariaDB's SET STATEMENT ... FOR prefix left out).
func parseStatement(query string, mode SQLMode) *statement {
	sq, dq := mode.escapes()
	// The SET STATEMENT prefix is read in the mode too: read otherwise, its
	// FOR may be inside the server's string.
	whole := lex(query, sq, dq)
	body := statementBody(query, whole)
	toks := lex(body, sq, dq)
	st := classify(toks)
	switch {
	case st.kind == kOther || st.bad != nil:
	case slices.ContainsFunc(whole, func(t token) bool { return t.open }):
		// No statement the server ran ends inside quotes: it read the
		// text in another sql_mode than the event gives (a PREPAREd
		// statement is logged with the mode of its EXECUTE).
		st.bad = errOpenQuote
	case mode.Unknown && strings.IndexByte(query, '\\') >= 0 &&
		(!sameTokens(whole, lex(query, false, false)) || !sameTokens(whole, lex(query, true, false))):
		st.bad = errQuoting
	}
	return st
}

// errOpenQuote: read with the event's sql_mode the statement ends inside
// a quoted string or name.
var errOpenQuote = errors.New("the statement ends inside quotes when read with the sql_mode its binlog event gives " +
	"(the server read it with another: a PREPAREd statement is logged with the sql_mode of its EXECUTE)")

// StatementBody is q without MariaDB's SET STATEMENT var=value[, ...] FOR
// prefix (settings for one statement: `SET STATEMENT lock_wait_timeout=5
// FOR ALTER TABLE ...`), which leaves the statement itself to run. A
// prefix it cannot read is left on (the statement is then read as a SET).
// It reads q with backslash escapes: a statement read in another sql_mode
// gives its tokens to statementBody.
func StatementBody(q string) string { return statementBody(q, lex(q, true, true)) }

// StatementBodyIn is StatementBody of q read in sql_mode mode, as the
// server read it: read otherwise, a prefix's FOR may be inside one of its
// strings. Mode unknown, it is read with escapes.
func StatementBodyIn(q string, mode SQLMode) string {
	sq, dq := mode.escapes()
	return statementBody(q, lex(q, sq, dq))
}

// statementBody is StatementBody of q, read as toks.
func statementBody(q string, toks []token) string {
	if len(toks) < 3 || !toks[0].is("SET") || !toks[1].is("STATEMENT") {
		return q
	}
	depth := 0
	for i := 2; i+1 < len(toks); i++ {
		switch {
		case toks[i].punct('('):
			depth++
		case toks[i].punct(')'):
			depth--
		case depth == 0 && toks[i].is("FOR"):
			return q[toks[i+1].pos:]
		}
	}
	return q
}

// sameTokens reports whether a and b are the same tokens.
func sameTokens(a, b []token) bool {
	return slices.EqualFunc(a, b, func(x, y token) bool { return x.kind == y.kind && x.text == y.text })
}

// classify classifies a statement's tokens by its leading keywords.
func classify(toks []token) *statement {
	for len(toks) > 0 && toks[len(toks)-1].punct(';') {
		toks = toks[:len(toks)-1]
	}
	st := &statement{toks: toks}
	if len(toks) == 0 {
		return st
	}
	st.verb = verb(toks)
	p := &cursor{toks: toks, i: 1}
	switch {
	case toks[0].is("CREATE"):
		st.orReplace = p.accept("OR", "REPLACE")
		st.temporary = p.accept("TEMPORARY")
		if !p.accept("TABLE") {
			return st
		}
		st.kind = kCreateTable
		st.ifNotExists = p.accept("IF", "NOT", "EXISTS")
		st.table, st.bad = p.name()
		st.body = p.rest()
	case toks[0].is("ALTER"):
		p.accept("ONLINE")
		p.accept("IGNORE")
		if !p.accept("TABLE") {
			return st
		}
		st.kind = kAlterTable
		st.ifExists = p.accept("IF", "EXISTS")
		st.table, st.bad = p.name()
		p.wait()
		st.body = p.rest()
	case toks[0].is("DROP"):
		if p.accept("DATABASE") || p.accept("SCHEMA") {
			st.kind = kDropDatabase
			st.ifExists = p.accept("IF", "EXISTS")
			if db, ok := p.ident(); ok {
				st.db = db
			} else {
				st.bad = errSyntax
			}
			return st
		}
		st.temporary = p.accept("TEMPORARY")
		if !p.accept("TABLE") && !p.accept("TABLES") {
			return st
		}
		st.kind = kDropTable
		st.ifExists = p.accept("IF", "EXISTS")
		for {
			t, err := p.name()
			if err != nil {
				st.bad = err
				return st
			}
			st.tables = append(st.tables, t)
			if !p.acceptPunct(',') {
				break
			}
		}
		p.wait()
		p.accept("RESTRICT")
		p.accept("CASCADE")
		if !p.done() {
			st.bad = errSyntax
		}
	case toks[0].is("RENAME"):
		if !p.accept("TABLE") && !p.accept("TABLES") {
			return st
		}
		st.kind = kRenameTable
		st.ifExists = p.accept("IF", "EXISTS")
		for {
			from, err := p.name()
			if err == nil {
				p.wait()
				if !p.accept("TO") {
					err = errSyntax
				}
			}
			var to tableRef
			if err == nil {
				to, err = p.name()
			}
			if err != nil {
				st.bad = err
				return st
			}
			st.pairs = append(st.pairs, [2]tableRef{from, to})
			if !p.acceptPunct(',') {
				break
			}
		}
		if !p.done() {
			st.bad = errSyntax
		}
	}
	return st
}

// verb is a statement's leading keyword and, for CREATE/ALTER/DROP, the
// kind of object it acts on ("CREATE TRIGGER" past a DEFINER clause).
func verb(toks []token) string {
	first := strings.ToUpper(toks[0].text)
	if first != "CREATE" && first != "ALTER" && first != "DROP" && first != "RENAME" {
		return first
	}
	for _, tok := range toks[1:min(len(toks), 16)] {
		if w := strings.ToUpper(tok.text); tok.kind == tWord && objects[w] {
			return first + " " + w
		}
	}
	return first
}

// cursor reads a statement's tokens from the front.
type cursor struct {
	toks []token
	i    int
}

// accept consumes the bare words kws if they come next.
func (p *cursor) accept(kws ...string) bool {
	if p.i+len(kws) > len(p.toks) {
		return false
	}
	for j, kw := range kws {
		if !p.toks[p.i+j].is(kw) {
			return false
		}
	}
	p.i += len(kws)
	return true
}

func (p *cursor) acceptPunct(c byte) bool {
	if p.i < len(p.toks) && p.toks[p.i].punct(c) {
		p.i++
		return true
	}
	return false
}

func (p *cursor) ident() (string, bool) {
	if p.i >= len(p.toks) {
		return "", false
	}
	s, ok := p.toks[p.i].ident()
	if ok {
		p.i++
	}
	return s, ok
}

// name reads a table name: name or db.name.
func (p *cursor) name() (tableRef, error) {
	first, ok := p.ident()
	if !ok {
		return tableRef{}, errSyntax
	}
	if !p.acceptPunct('.') {
		return tableRef{name: first}, nil
	}
	second, ok := p.ident()
	if !ok {
		return tableRef{}, errSyntax
	}
	return tableRef{db: first, name: second}, nil
}

// wait skips MariaDB's WAIT n / NOWAIT lock-wait clause.
func (p *cursor) wait() {
	if p.accept("NOWAIT") {
		return
	}
	if p.i+1 < len(p.toks) && p.toks[p.i].is("WAIT") && p.toks[p.i+1].kind == tWord {
		p.i += 2
	}
}

func (p *cursor) rest() []token { return p.toks[p.i:] }

func (p *cursor) done() bool { return p.i == len(p.toks) }
