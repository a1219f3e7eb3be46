package binlog

import (
	"fmt"
	"strings"
	"testing"
)

// choices draws a statement's arrangement from the fuzzer's bytes: each
// draw takes one byte (0 once they run out).
type choices struct{ b []byte }

func (c *choices) pick(n int) int {
	if len(c.b) == 0 {
		return 0
	}
	v := int(c.b[0]) % n
	c.b = c.b[1:]
	return v
}

func (c *choices) one(opts ...string) string { return opts[c.pick(len(opts))] }

// lexMode is how the server that ran a statement read its literals:
// backslash escapes (the default), none (sql_mode NO_BACKSLASH_ESCAPES,
// or a double-quoted name under ANSI_QUOTES), or escapes in gbk, where
// 0x81 0x5c is one character and its 0x5c no escape.
type lexMode int

const (
	modeEscapes lexMode = iota
	modeNoEscapes
	modeGBK
)

// secretLiteral is a literal holding secret as the server in mode reads
// it: its quote doubled, escaped, backslashes, comment markers and gbk
// characters around the secret, maybe a character set introducer.
func secretLiteral(c *choices, mode lexMode, secret string) string {
	quote := c.one("'", `"`)
	var b strings.Builder
	b.WriteString(c.one("", "_utf8mb4", "N", "_binary ", "_latin1 "))
	b.WriteString(quote)
	placed := false
	for n := c.pick(6); n >= 0 || !placed; n-- {
		if !placed && (n <= 0 || c.pick(3) == 0) {
			b.WriteString(secret)
			placed = true
			continue
		}
		pieces := []string{"a", " ", "\n", quote + quote, "*/", "/*", "-- ", "#", "`", `'` + `'`, "é"}
		switch mode {
		case modeEscapes:
			pieces = append(pieces, `\`+quote, `\\`, `\n`, `\'`, `\"`)
		case modeNoEscapes:
			pieces = append(pieces, `\`, `\\`)
		case modeGBK:
			pieces = append(pieces, `\`+quote, `\\`, "\x81\\", "\x81\\\x81\\")
		}
		p := pieces[c.pick(len(pieces))]
		if p == `''` && quote == `"` || p == `'`+`'` && quote == `'` {
			p = quote + quote
		}
		b.WriteString(p)
	}
	b.WriteString(quote)
	return b.String()
}

// gap is what may stand between two words: white space of every kind,
// comments of every kind (some holding quotes), a literal the server in
// mode reads whole.
func gap(c *choices, mode lexMode) string {
	opts := []string{" ", "\n", "\t", "\r\n", "\f", "\v", "  ", "/* c */", "/**/", "/* ' */", "/* \" ` */", "-- x\n", "--\t'\n",
		"--\x01 ' \n", "--\r\"\n", "# ' \n", "#\n", "#\x00'' \n", " /*!80000 */ ", " /*M!100000 */ "}
	switch mode {
	case modeNoEscapes:
		opts = append(opts, ` 'a\' `, ` "a\" `, ` 'a\\' `)
	case modeEscapes:
		opts = append(opts, ` 'a\'' `, ` "a\"" `)
	case modeGBK:
		opts = append(opts, " 'a\x81\\' ", " `a\x81` ")
	}
	return c.one(opts...)
}

// secretStatement is a statement holding secret in a literal or a
// comment, as the server in mode reads it: one of the statements that
// take a credential, its words split by gaps, behind statements that hide
// quotes.
func secretStatement(c *choices, mode lexMode, secret string) string {
	// | is a gap, ~ the secret in a literal, ^ the secret in a comment.
	templates := []string{
		"CREATE USER|u|IDENTIFIED|BY|~",
		"ALTER USER 'u'@'%'|IDENTIFIED|BY|~",
		"/*!80000 ALTER USER u IDENTIFIED BY|~ */",
		"/*M!100100 CREATE USER u IDENTIFIED|BY|~ */",
		"CREATE USER 'a'@'%' IDENTIFIED BY 'x',|'b'@'%'|IDENTIFIED|BY|~",
		"SET PASSWORD FOR u|=|PASSWORD(|~|)",
		"SET PASSWORD|=|~",
		"GRANT ALL ON *.* TO u|IDENTIFIED|BY|PASSWORD|~",
		"GRANT SELECT ON app.outbox TO 'u'@'%'|IDENTIFIED|VIA mysql_native_password|USING|PASSWORD(~)",
		"CHANGE MASTER TO MASTER_HOST='h',|MASTER_PASSWORD|=|~, MASTER_USE_GTID=slave_pos",
		"CHANGE REPLICATION SOURCE TO SOURCE_PASSWORD=|~",
		"CREATE SERVER s FOREIGN DATA WRAPPER mysql OPTIONS (USER 'r',|PASSWORD|~)",
		"INSERT INTO app.outbox VALUES (AES_ENCRYPT('x',|~))",
		"SELECT AES_DECRYPT(c,|~)",
		"CREATE TABLE t (a INT) ENGINE=FEDERATED CONNECTION=|~",
		"CREATE USER u IDENTIFIED BY 'x'|^",
		"ALTER USER u|^|IDENTIFIED|BY 'x'",
		"ALTER USER u IDENT|^|IFIED BY|~",
	}
	tpl := templates[c.pick(len(templates))]
	var b strings.Builder
	for n := c.pick(3); n > 0; n-- { // statements before it
		b.WriteString(c.one("SELECT", "DO 1,", "SELECT 'x'", "/*!99999 SELECT"))
		b.WriteString(gap(c, mode))
	}
	for _, r := range tpl {
		switch r {
		case '|':
			b.WriteString(gap(c, mode))
		case '~':
			b.WriteString(secretLiteral(c, mode, secret))
		case '^':
			b.WriteString(c.one("/* "+secret+" */", "/*"+secret+"*/", "-- "+secret+"\n", "#"+secret+"\n", "--\t"+secret+"\r\n"))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(c.one("", ";", " ", "\n", gap(c, mode)))
	return b.String()
}

// FuzzRedactStatementHidesTheSecret: statements that hold a secret where
// the server reads a literal or a comment, arranged by the fuzzer (quotes
// of every kind, escaped and doubled, comments and white space around and
// between the words, statements read without backslash escapes or in gbk);
// the secret, a marker found nowhere else, is in neither RedactStatement's
// text nor RedactIn's of a message quoting the statement.
func FuzzRedactStatementHidesTheSecret(f *testing.F) {
	for i := range 64 {
		f.Add([]byte(fmt.Sprint(i*7919, "seed", i)))
	}
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Fuzz(func(t *testing.T, b []byte) {
		c := &choices{b: b}
		mode := lexMode(c.pick(3))
		secret := "Zq" + fmt.Sprintf("%08x", uint32(c.pick(256))<<24|uint32(c.pick(256))<<16|uint32(len(b)))
		q := secretStatement(c, mode, secret)
		if got := RedactStatement(q); strings.Contains(got, secret) {
			t.Fatalf("mode %d: RedactStatement(%q) = %q: the secret is there", mode, q, got)
		}
		msg := "read " + q + ": near \"" + q + "\""
		if got := RedactIn(msg, q); strings.Contains(got, secret) {
			t.Fatalf("mode %d: RedactIn(%q, %q) = %q: the secret is there", mode, msg, q, got)
		}
	})
}
