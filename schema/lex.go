package schema

import "strings"

// tokKind classifies a token of a statement.
type tokKind uint8

const (
	tWord   tokKind = iota + 1 // bare word: keyword, identifier or number
	tQuoted                    // `identifier`
	tString                    // '...' or "..." (an identifier under ANSI_QUOTES)
	tPunct                     // one character of anything else
)

// token is one lexical unit; text is its source text, val the identifier
// or string it stands for (backquotes and quotes removed, escapes undone).
type token struct {
	kind     tokKind
	text     string
	val      string
	pos, end int // byte offsets in the statement
	// open: a quoted token the input ended in (no statement the server
	// ran has one: read so, the text was read in another sql_mode).
	open bool
}

// is reports whether tok is the bare keyword kw (kw in upper case).
func (tok token) is(kw string) bool {
	return tok.kind == tWord && len(tok.text) == len(kw) && strings.EqualFold(tok.text, kw)
}

// punct reports whether tok is the punctuation c.
func (tok token) punct(c byte) bool {
	return tok.kind == tPunct && tok.text[0] == c
}

// ident returns the identifier tok names: a bare word, a backquoted name,
// or a double-quoted one (a statement the server ran has a name there, so
// the server was in ANSI_QUOTES mode).
func (tok token) ident() (string, bool) {
	switch tok.kind {
	case tWord, tQuoted:
		return tok.val, true
	case tString:
		if tok.text[0] == '"' {
			return tok.val, true
		}
	}
	return "", false
}

func wordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80
}

// lex splits a statement into tokens. Comments are dropped; executable
// comments (/*! ... */, /*!50100 ... */, MariaDB's /*M! ... */) are read as
// the code they hold, since the server that logged the statement ran it.
// An unterminated quote or comment ends the input. sq, dq: a backslash
// escapes the next character in '...' and in "..." (as without sql_mode
// NO_BACKSLASH_ESCAPES; under ANSI_QUOTES "..." is a name, without escapes).
func lex(s string, sq, dq bool) []token {
	var out []token
	inExec := false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' || c == 0:
			i++
		case inExec && c == '*' && i+1 < len(s) && s[i+1] == '/':
			inExec = false
			i += 2
		case c == '#' || c == '-' && strings.HasPrefix(s[i:], "--") && (i+2 == len(s) || s[i+2] <= ' '):
			if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(s)
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			j := i + 2
			if strings.HasPrefix(s[j:], "!") || strings.HasPrefix(s[j:], "M!") {
				j += strings.IndexByte(s[j:], '!') + 1
				j += versionDigits(s[j:])
				inExec = true
				i = j
				continue
			}
			if k := strings.Index(s[j:], "*/"); k >= 0 {
				i = j + k + 2
			} else {
				i = len(s)
			}
		case c == '`':
			val, n, closed := quoted(s[i:], '`', false)
			out = append(out, token{kind: tQuoted, text: s[i : i+n], val: val, pos: i, end: i + n, open: !closed})
			i += n
		case c == '\'' || c == '"':
			val, n, closed := quoted(s[i:], c, c == '\'' && sq || c == '"' && dq)
			out = append(out, token{kind: tString, text: s[i : i+n], val: val, pos: i, end: i + n, open: !closed})
			i += n
		case wordByte(c):
			j := i
			for j < len(s) && wordByte(s[j]) {
				j++
			}
			out = append(out, token{kind: tWord, text: s[i:j], val: s[i:j], pos: i, end: j})
			i = j
		default:
			out = append(out, token{kind: tPunct, text: s[i : i+1], val: s[i : i+1], pos: i, end: i + 1})
			i++
		}
	}
	return out
}

// versionDigits returns how many digits at the start of s, after an
// executable comment's /*! or /*M!, the server reads as its version: five,
// or six when a sixth follows, and none when there are fewer than five (the
// digits are then code: /*!0x41*/ holds 0x41).
func versionDigits(s string) int {
	n := 0
	for n < len(s) && n < 6 && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	if n < 5 {
		return 0
	}
	return n
}

// quoted reads a quoted token at the start of s: its value, its length,
// and whether its closing quote came before the end of s. The quote
// doubled stands for itself; with escapes, so does a backslash pair.
func quoted(s string, q byte, escapes bool) (string, int, bool) {
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == q && i+1 < len(s) && s[i+1] == q:
			b.WriteByte(q)
			i++
		case c == q:
			return b.String(), i + 1, true
		case escapes && c == '\\' && i+1 < len(s):
			b.WriteByte(s[i+1])
			i++
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), len(s), false
}

// join renders tokens back into statement text: adjacent tokens stay
// adjacent, others are separated by one space.
func join(toks []token) string { return render(toks, false) }

// shown renders tokens as join does, each string literal (and hexadecimal
// or bit one, 0x.., 0b..) as '<redacted>': what an error quotes of a
// statement, which may hold a password.
func shown(toks []token) string { return render(toks, true) }

func render(toks []token, redact bool) string {
	var b strings.Builder
	for i, tok := range toks {
		if i > 0 && toks[i-1].end != tok.pos {
			b.WriteByte(' ')
		}
		if redact && (tok.kind == tString || tok.kind == tWord && len(tok.text) > 2 && tok.text[0] == '0' && (tok.text[1] == 'x' || tok.text[1] == 'b')) {
			b.WriteString("'<redacted>'")
			continue
		}
		b.WriteString(tok.text)
	}
	return b.String()
}

// splitTop splits toks at commas outside parentheses.
func splitTop(toks []token) [][]token {
	var out [][]token
	depth, start := 0, 0
	for i, tok := range toks {
		switch {
		case tok.punct('('):
			depth++
		case tok.punct(')'):
			depth--
		case tok.punct(',') && depth == 0:
			out = append(out, toks[start:i])
			start = i + 1
		}
	}
	return append(out, toks[start:])
}

// closing returns the index of the parenthesis closing the one at toks[open],
// or -1.
func closing(toks []token, open int) int {
	depth := 0
	for i := open; i < len(toks); i++ {
		switch {
		case toks[i].punct('('):
			depth++
		case toks[i].punct(')'):
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// hasWord reports whether a bare word kw occurs in toks at any depth.
func hasWord(toks []token, kw string) bool {
	for _, tok := range toks {
		if tok.is(kw) {
			return true
		}
	}
	return false
}

// hasSeq reports whether the bare words kws occur in toks in a row.
func hasSeq(toks []token, kws ...string) bool {
	for i := 0; i+len(kws) <= len(toks); i++ {
		match := true
		for j, kw := range kws {
			if !toks[i+j].is(kw) {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}
