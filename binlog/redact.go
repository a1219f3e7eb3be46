package binlog

import (
	"slices"
	"strings"
)

// Statements from the binlog can hold credentials in plain text: MariaDB
// logs GRANT ... IDENTIFIED BY 'pw', CREATE USER, ALTER USER and SET
// PASSWORD as they were written; CHANGE MASTER, CREATE SERVER, a FEDERATED
// table's CONNECTION, AES_ENCRYPT's key and any other literal may be one.
// The relay shows statement text in logs and errors (a DDL it tracked, one
// it could not read): every such text goes through RedactStatement first,
// and any message built from it or from an error about it through RedactIn.
//
// RedactStatement keeps no list of the places a credential may take (a
// keyword a byte away from the list's is missed): it redacts every string
// literal and every comment's text, and keeps only what it can prove is
// none. Its lexer follows the server's (quotes doubled or escaped, comments
// of the three kinds, executable comments read as code); where the
// server's reading may differ from it, it redacts the rest of the statement.

// redacted replaces a literal.
const redacted = "'<redacted>'"

// redactedText is a statement that a message formats redacted
// (RedactStatement): redacted only when formatted, not for every statement
// that might be (a BEGIN of each transaction on MySQL).
type redactedText string

func (t redactedText) String() string { return RedactStatement(string(t)) }

// RedactStatement returns q with every string literal ('...', "...", with
// any prefix: X'..', N'..', _utf8mb4'..'), hexadecimal or bit literal
// (0x.., 0b..) replaced by '<redacted>', and every comment's text (/* */,
// -- , #) by <redacted>: a literal after COMMENT or DEFAULT too (Spider
// takes its connection's password in a table's or partition's COMMENT, a
// stored routine's DECLARE a key as its DEFAULT). An executable comment
// (/*! */, /*M! */) is read as code, a hexadecimal or bit literal glued to
// its version digits too. Where the server may read q otherwise than the redactor, the rest
// of q from there is redacted whole:
//   - a literal that ends elsewhere when a backslash escapes than when it
//     does not (sql_mode NO_BACKSLASH_ESCAPES, or a double-quoted name
//     under ANSI_QUOTES), or where a backslash or backquote follows a byte
//     of 0x80 or more (in gbk, sjis or big5 it may be a character's
//     second byte, not an escape or a quote);
//   - text that a server reads as a comment and another as code: an
//     executable comment's */ inside a literal, a quoted name or a line
//     comment (a server older than the comment's version, or MySQL reading
//     MariaDB's /*M!, ends the comment there), a line comment holding a
//     NUL (the server's ends there), -- before a byte of 0x80 or more;
//   - a literal, comment or quoted name left open (a statement cut short).
//
// Words and decimal numbers are kept: no clause that takes a credential
// (IDENTIFIED BY, PASSWORD =, MASTER_PASSWORD =, OPTIONS (PASSWORD ...))
// takes either; a number given to a function as its password or key
// (PASSWORD(1234), AES_ENCRYPT(c, 1234)) shows.
func RedactStatement(q string) string {
	spans := redactSpans(q)
	if len(spans) == 0 {
		return q
	}
	var b strings.Builder
	last := 0
	for _, s := range spans {
		b.WriteString(q[last:s.start])
		b.WriteString(s.with)
		last = s.end
	}
	b.WriteString(q[last:])
	return b.String()
}

// RedactIn returns msg, text that may quote statement q or parts of it
// (a parser's error, a truncated copy), with what RedactStatement redacts
// of q replaced wherever msg holds it: each literal as written, between
// its quotes (4 bytes or more) and as its value; each comment's text and
// the rest of a statement redacted to its end (4 bytes or more); and every
// run of 8 or more letters and digits in any of them (a fragment quoted
// another way). The longest go first: a shorter one inside a longer one
// does not break it.
func RedactIn(msg, q string) string {
	var texts []string
	add := func(s string, least int) {
		if len(s) >= least {
			texts = append(texts, s)
		}
	}
	for _, s := range redactSpans(q) {
		text := q[s.start:s.end]
		add(text, 1)
		if s.literal {
			raw, val := literalTexts(text)
			add(raw, 4)
			add(val, 4)
		} else {
			add(strings.TrimSpace(text), 4)
		}
		for _, run := range strings.FieldsFunc(text, func(r rune) bool { return !isAlnum(r) }) {
			add(run, 8)
		}
	}
	slices.SortFunc(texts, func(a, b string) int { return len(b) - len(a) })
	for _, s := range texts {
		msg = strings.ReplaceAll(msg, s, "<redacted>")
	}
	return msg
}

func isAlnum(r rune) bool {
	return r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= 0x80
}

// literalTexts returns a string literal's text between its quotes (raw) and
// its value with escapes and doubled quotes undone.
func literalTexts(lit string) (raw, val string) {
	i := strings.IndexAny(lit, `'"`)
	if i < 0 {
		return "", ""
	}
	quote := lit[i]
	raw = lit[i+1:]
	if strings.HasSuffix(raw, string(quote)) {
		raw = raw[:len(raw)-1]
	}
	var b strings.Builder
	for j := 0; j < len(raw); j++ {
		c := raw[j]
		if c == '\\' && j+1 < len(raw) {
			j++
			c = raw[j]
		} else if c == quote && j+1 < len(raw) && raw[j+1] == quote {
			j++
		}
		b.WriteByte(c)
	}
	return raw, b.String()
}

// span is a part of a statement to redact: q[start:end] becomes with.
type span struct {
	start, end int
	with       string
	literal    bool // a literal ('...' or "..."), not a comment's text or the rest
	rest       bool // the rest of the statement, which the server may read otherwise
}

// redactSpans lists, in order, the parts of q that RedactStatement
// replaces.
func redactSpans(q string) []span {
	var spans []span
	rest := func(i int) []span { return append(spans, span{start: i, end: len(q), with: "<redacted>", rest: true}) }
	inExec := false // inside an executable comment
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case inExec && c == '*' && i+1 < len(q) && q[i+1] == '/':
			inExec = false
			i += 2
		case c == '#' || c == '-' && i+1 < len(q) && q[i+1] == '-' && (i+2 == len(q) || q[i+2] <= ' ' || q[i+2] == 0x7f):
			// A line comment (-- needs white space or a control character
			// after it, as the server's lexer reads it).
			body := i + 1
			if c == '-' {
				body = i + 2 // after the white space that makes it a comment
				if body < len(q) && q[body] != '\n' {
					body++
				}
			}
			end := strings.IndexByte(q[body:], '\n')
			if end < 0 {
				end = len(q)
			} else {
				end += body
			}
			if inExec && strings.Contains(q[body:end], "*/") || strings.IndexByte(q[body:end], 0) >= 0 {
				return rest(i) // the server's line comment also ends at a NUL
			}
			if end > body {
				spans = append(spans, span{start: body, end: end, with: "<redacted>"})
			}
			i = end
		case c == '-' && i+2 < len(q) && q[i+1] == '-' && q[i+2] >= 0x80:
			return rest(i) // white space in the connection's character set?
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			if strings.HasPrefix(q[i+2:], "!") || strings.HasPrefix(q[i+2:], "M!") {
				if inExec {
					return rest(i)
				}
				i += 2 + strings.IndexByte(q[i+2:], '!') + 1
				inExec = true
				if end, glued := versionGlued(q, i); glued {
					spans = append(spans, span{start: i, end: end, with: redacted, literal: true})
					i = end
					continue
				}
				for i < len(q) && q[i] >= '0' && q[i] <= '9' {
					i++
				}
				continue
			}
			end := strings.Index(q[i+2:], "*/")
			if end < 0 {
				return rest(i)
			}
			if end > 0 {
				spans = append(spans, span{start: i + 2, end: i + 2 + end, with: "<redacted>"})
			}
			i += 2 + end + 2
		case c == '\'' || c == '"':
			end, ok := literalEnd(q, i)
			if !ok || inExec && strings.Contains(q[i:end], "*/") {
				return rest(i)
			}
			spans = append(spans, span{start: i, end: end, with: redacted, literal: true})
			i = end
		case c == '`':
			if i > 0 && q[i-1] >= 0x80 {
				return rest(i) // a character's second byte in gbk, sjis or big5?
			}
			end, ok := nameEnd(q, i)
			if !ok || inExec && strings.Contains(q[i:end], "*/") {
				return rest(i)
			}
			i = end
		case isWordByte(c):
			j := i
			for j < len(q) && isWordByte(q[j]) {
				j++
			}
			if hexOrBits(q[i:j]) {
				spans = append(spans, span{start: i, end: j, with: redacted, literal: true})
			}
			i = j
		default:
			i++
		}
	}
	return spans
}

func isWordByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// hexOrBits reports whether word w is a hexadecimal (0x..) or bit (0b..)
// literal: a string in the server's eyes.
func hexOrBits(w string) bool {
	if len(w) < 3 || w[0] != '0' {
		return false
	}
	digits := "0123456789abcdefABCDEF"
	switch w[1] {
	case 'x':
	case 'b':
		digits = "01"
	default:
		return false
	}
	for i := 2; i < len(w); i++ {
		if !strings.ContainsRune(digits, rune(w[i])) {
			return false
		}
	}
	return true
}

// versionGlued reports whether the word at q[i], an executable comment's
// version, holds a hexadecimal or bit literal after the digits a server
// reads as the version (five, or six when a sixth follows, MySQL before
// 8.0.34 five only; none when there are fewer than five: /*!0x41*/ is
// 0x41) and returns the word's end.
func versionGlued(q string, i int) (int, bool) {
	end, digits := i, 0
	for end < len(q) && isWordByte(q[end]) {
		if end-i == digits && q[end] >= '0' && q[end] <= '9' {
			digits++
		}
		end++
	}
	for _, n := range []int{0, 5, 6} {
		if n <= digits && hexOrBits(q[i+n:end]) {
			return end, true
		}
	}
	return end, false
}

// literalEnd returns the end of the literal whose quote is at q[i], ok
// false when the server may read its end elsewhere: its end with a
// backslash escaping the next byte differs from its end without, or a
// backslash follows a byte of 0x80 or more. A quote doubled stands for
// itself either way. ok is false too when it is left open.
func literalEnd(q string, i int) (int, bool) {
	quote := q[i]
	scan := func(escapes bool) int {
		for j := i + 1; j < len(q); j++ {
			switch {
			case escapes && q[j] == '\\':
				if q[j-1] >= 0x80 {
					return -1
				}
				j++
			case q[j] == quote && j+1 < len(q) && q[j+1] == quote:
				j++
			case q[j] == quote:
				return j + 1
			}
		}
		return -1
	}
	end := scan(true)
	return end, end > 0 && end == scan(false)
}

// nameEnd returns the end of the backquoted name at q[i] (a backquote
// doubled stands for itself), ok false when it is left open or holds a
// backquote after a byte of 0x80 or more.
func nameEnd(q string, i int) (int, bool) {
	for j := i + 1; j < len(q); j++ {
		if q[j] != '`' {
			continue
		}
		if q[j-1] >= 0x80 {
			return 0, false
		}
		if j+1 < len(q) && q[j+1] == '`' {
			j++
			continue
		}
		return j + 1, true
	}
	return 0, false
}

// tablesShown returns tables, the tables (db.table) the SQL parser read in
// q with backslash escapes, for a message: each as it is, but where the
// server may have read q otherwise (RedactStatement redacts the rest of it
// from there), a table whose name is not in the code before that part is
// <redacted>: the parser may have read it from the server's literal.
func tablesShown(tables []string, defaultDB, q string) []string {
	spans := redactSpans(q)
	if len(spans) == 0 || !spans[len(spans)-1].rest {
		return tables
	}
	code := RedactStatement(q[:spans[len(spans)-1].start])
	shown := make([]string, len(tables))
	for i, t := range tables {
		db, tbl, _ := strings.Cut(t, ".")
		if strings.Contains(code, tbl) && (db == defaultDB || strings.Contains(code, db)) {
			shown[i] = t
		} else {
			shown[i] = "<redacted>"
		}
	}
	return shown
}

// redactedError is err with statement q's credentials redacted from its
// message; errors.Is and errors.As see err.
type redactedError struct {
	err error
	q   string
}

func (e redactedError) Error() string { return RedactIn(e.err.Error(), e.q) }
func (e redactedError) Unwrap() error { return e.err }
