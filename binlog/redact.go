package binlog

import (
	"strings"
)

// Statements from the binlog can hold credentials in plain text: MariaDB
// logs GRANT ... IDENTIFIED BY 'pw', CREATE USER, ALTER USER and SET
// PASSWORD as they were written, and a statement-logged CHANGE MASTER or
// CREATE SERVER carries a password too. The relay shows statement text in
// logs and errors (a DDL it tracked, one it could not read): every such text
// goes through RedactStatement first, and any message built from it or
// from an error about it through RedactIn.

// redacted replaces a credential literal.
const redacted = "'<redacted>'"

// redactedText is a statement that a message formats redacted
// (RedactStatement): redacted only when formatted, not for every statement
// that might be (a BEGIN of each transaction on MySQL).
type redactedText string

func (t redactedText) String() string { return RedactStatement(string(t)) }

// RedactStatement returns q with every credential literal replaced by
// '<redacted>': the string after IDENTIFIED BY, IDENTIFIED WITH|VIA plugin
// BY|AS|USING, REPLACE (ALTER USER), PASSWORD('x') (and OLD_PASSWORD),
// BY PASSWORD 'hash', SET PASSWORD ... = 'x', and NAME_PASSWORD = 'x' or
// PASSWORD 'x' (CHANGE MASTER ... MASTER_PASSWORD, CREATE SERVER ...
// OPTIONS (PASSWORD 'x')), a FEDERATED or CONNECT table's CONNECTION [=] 'dsn'
// and CONNECT's OPTION_LIST [=] '...' (whole: they hold a user and password
// in a syntax of their own), whether quoted with ' or ", with backslash
// escapes or doubled quotes, with a character set introducer or not. An
// unterminated credential literal (a statement cut short) is redacted to
// the end.
func RedactStatement(q string) string {
	spans := secretSpans(q)
	if len(spans) == 0 {
		return q
	}
	var b strings.Builder
	last := 0
	for _, s := range spans {
		b.WriteString(q[last:s[0]])
		b.WriteString(redacted)
		last = s[1]
	}
	b.WriteString(q[last:])
	return b.String()
}

// RedactIn returns msg, text that may quote statement q or parts of it
// (a parser's error, a truncated copy), with each of q's credentials
// replaced: as written between its quotes and as its value.
func RedactIn(msg, q string) string {
	for _, s := range secretSpans(q) {
		lit := q[s[0]:s[1]]
		raw, val := literalTexts(lit)
		for _, secret := range []string{lit, raw, val} {
			if secret != "" {
				msg = strings.ReplaceAll(msg, secret, "<redacted>")
			}
		}
	}
	return msg
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

// sqlToken is one token of a statement: a word (keyword, identifier,
// charset introducer), a string literal, or one punctuation byte.
type sqlToken struct {
	kind       byte // 'w' word, 's' string, 'p' punctuation
	start, end int
	text       string // upper-cased for words
}

// secretSpans lists the byte spans of q's credential literals (a charset
// introducer included), in order.
func secretSpans(q string) [][2]int {
	toks := sqlTokens(q)
	var spans [][2]int
	identified := false // IDENTIFIED seen: BY, AS, USING, REPLACE take a credential
	setPassword := len(toks) >= 2 && toks[0].text == "SET" && toks[1].text == "PASSWORD"
	for i, t := range toks {
		if t.kind == 'w' && t.text == "IDENTIFIED" {
			identified = true
		}
		if t.kind != 's' {
			continue
		}
		start := t.start
		j := i - 1
		if j >= 0 && toks[j].kind == 'w' && strings.HasPrefix(toks[j].text, "_") && toks[j].end == t.start {
			start = toks[j].start // _utf8mb4'pw'
			j--
		}
		if j < 0 {
			continue
		}
		prev := toks[j]
		secret := false
		switch {
		case prev.kind == 'w' && strings.HasSuffix(prev.text, "PASSWORD"):
			secret = true // BY PASSWORD 'hash', OPTIONS (PASSWORD 'x')
		case prev.kind == 'w' && dsnOption(prev.text), prev.kind == 'p' && prev.text == "=" && j > 0 && dsnOption(toks[j-1].text):
			secret = true // CONNECTION [=] 'mysql://u:pw@h/db/t', OPTION_LIST='user=u,password=pw'
		case prev.kind == 'w' && identified && (prev.text == "BY" || prev.text == "AS" || prev.text == "USING" || prev.text == "REPLACE"):
			secret = true
		case prev.kind == 'p' && prev.text == "(" && j > 0 && toks[j-1].kind == 'w' && strings.HasSuffix(toks[j-1].text, "PASSWORD"):
			secret = true // PASSWORD('x'), OLD_PASSWORD('x')
		case prev.kind == 'p' && prev.text == "=" && (setPassword || j > 0 && toks[j-1].kind == 'w' && strings.HasSuffix(toks[j-1].text, "PASSWORD")):
			secret = true // SET PASSWORD FOR u = 'x', MASTER_PASSWORD = 'x'
		}
		if secret {
			spans = append(spans, [2]int{start, t.end})
		}
	}
	return spans
}

// dsnOption reports whether a table option named word holds a connection
// string with its credentials: a FEDERATED or CONNECT table's CONNECTION,
// CONNECT's OPTION_LIST.
func dsnOption(word string) bool { return word == "CONNECTION" || word == "OPTION_LIST" }

// sqlTokens splits q into tokens, skipping white space and comments; a
// backquoted identifier is a word. A literal left open runs to the end.
func sqlTokens(q string) []sqlToken {
	var toks []sqlToken
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '#' || c == '-' && strings.HasPrefix(q[i:], "-- ") || c == '-' && (q[i:] == "--" || strings.HasPrefix(q[i:], "--\n") || strings.HasPrefix(q[i:], "--\t")):
			if n := strings.IndexByte(q[i:], '\n'); n >= 0 {
				i += n + 1
			} else {
				i = len(q)
			}
		case c == '/' && strings.HasPrefix(q[i:], "/*"):
			if strings.HasPrefix(q[i:], "/*!") || strings.HasPrefix(q[i:], "/*M!") {
				// executable comment: its body is part of the statement
				i += 3
				for i < len(q) && q[i] >= '0' && q[i] <= '9' || i < len(q) && q[i] == '!' {
					i++
				}
				continue
			}
			if n := strings.Index(q[i+2:], "*/"); n >= 0 {
				i += n + 4
			} else {
				i = len(q)
			}
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(q) {
				if q[j] == '\\' {
					j += 2
					continue
				}
				if q[j] == c {
					if j+1 < len(q) && q[j+1] == c {
						j += 2
						continue
					}
					j++
					break
				}
				j++
			}
			j = min(j, len(q))
			toks = append(toks, sqlToken{kind: 's', start: i, end: j})
			i = j
		case c == '`':
			j := i + 1
			for j < len(q) {
				if q[j] == '`' {
					if j+1 < len(q) && q[j+1] == '`' {
						j += 2
						continue
					}
					j++
					break
				}
				j++
			}
			j = min(j, len(q))
			toks = append(toks, sqlToken{kind: 'w', start: i, end: j, text: q[i:j]})
			i = j
		case c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80:
			j := i
			for j < len(q) && (q[j] == '_' || q[j] == '$' || q[j] >= '0' && q[j] <= '9' || q[j] >= 'a' && q[j] <= 'z' ||
				q[j] >= 'A' && q[j] <= 'Z' || q[j] >= 0x80) {
				j++
			}
			toks = append(toks, sqlToken{kind: 'w', start: i, end: j, text: strings.ToUpper(q[i:j])})
			i = j
		default:
			toks = append(toks, sqlToken{kind: 'p', start: i, end: i + 1, text: q[i : i+1]})
			i++
		}
	}
	return toks
}

// redactedError is err with statement q's credentials redacted from its
// message; errors.Is and errors.As see err.
type redactedError struct {
	err error
	q   string
}

func (e redactedError) Error() string { return RedactIn(e.err.Error(), e.q) }
func (e redactedError) Unwrap() error { return e.err }
