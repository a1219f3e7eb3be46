package schema

import "testing"

// attack25Apply applies base then q (mode) to a tracker of app.T and
// returns q's error, T's layout and its unsigned columns.
func attack25Apply(t *testing.T, mode SQLMode, base, q string) (error, string, string) {
	t.Helper()
	tr := New([]string{"app.T"}, nil, nil)
	if _, err := tr.ApplyMode("app", base, SQLMode{}); err != nil {
		t.Fatalf("%s: %v", base, err)
	}
	_, err := tr.ApplyMode("app", q, mode)
	return err, layout(tr, "app.T"), signs(tr, "app.T")
}

// A "..." name is an identifier only under ANSI_QUOTES (sql_mode ANSI,
// ORACLE), and a backslash in an identifier is a plain character in every
// sql_mode; the tracker reads "..." as a name but with backslash escapes
// (all that SQLMode can say is NO_BACKSLASH_ESCAPES), so "n\" swallows
// the ALTER up to the quote in the later COMMENT '"'. The server (verified
// on MariaDB 10.11, TestAttack25AnsiQuotesBackslashIdentifier) adds the
// column n\ and makes id UNSIGNED; the tracker adds one column named
// `n" INT, MODIFY id INT UNSIGNED COMMENT '` and keeps id SIGNED, with no
// error. Want: id UNSIGNED, or the layout given up (ErrUnparsed). Fixed:
// the event's ANSI_QUOTES is read too; without the mode known the
// statement reads two ways and is ErrUnparsed (below).
func TestAttack25AnsiQuotedBackslashNameHidesUnsigned(t *testing.T) {
	err, cols, u := attack25Apply(t, SQLMode{ANSIQuotes: true}, "CREATE TABLE T (id INT, v INT)",
		`ALTER TABLE T ADD COLUMN "n\" INT, MODIFY id INT UNSIGNED COMMENT '"'`)
	if errName(err) != "ErrUnparsed" && u != "id" {
		t.Fatalf("error %v, layout %s, unsigned %q: want id UNSIGNED (columns id,v,n\\) or ErrUnparsed", err, cols, u)
	}
}

// MariaDB's SET STATEMENT var=value FOR ALTER TABLE ... is an ALTER TABLE
// (the binlog logs the whole text). The tracker classifies it by its first
// word, SET: "changes no table's columns" (ErrIgnored), and the UNSIGNED is
// lost. Want: v UNSIGNED, or ErrUnparsed.
func TestAttack25SetStatementForAlterIgnored(t *testing.T) {
	err, cols, u := attack25Apply(t, SQLMode{}, "CREATE TABLE T (id INT, v INT)",
		"SET STATEMENT lock_wait_timeout=5 FOR ALTER TABLE T MODIFY v INT UNSIGNED")
	if errName(err) != "ErrUnparsed" && u != "v" {
		t.Fatalf("error %v (%s), layout %s, unsigned %q: want v UNSIGNED or ErrUnparsed", err, errName(err), cols, u)
	}
}

// Held: the parser's NO_BACKSLASH_ESCAPES mode does not outlive its
// statement: a default-mode statement after one with the mode reads \'
// as an escaped quote again (TiDB path and fallback path alike).
func TestAttack25HeldParserModeRestored(t *testing.T) {
	tr := New([]string{"app.T"}, nil, nil)
	for _, c := range []struct {
		q    string
		mode SQLMode
	}{
		{"CREATE TABLE T (id INT, v INT)", SQLMode{}},
		{`ALTER TABLE T MODIFY v INT COMMENT 'C:\'`, SQLMode{NoBackslashEscapes: true}},
		{`ALTER TABLE T MODIFY v INT COMMENT 'it\'s, MODIFY id INT UNSIGNED'`, SQLMode{}},
		{`ALTER TABLE T MODIFY v INT INVISIBLE COMMENT 'it\'s, MODIFY id INT UNSIGNED'`, SQLMode{}},
	} {
		if _, err := tr.ApplyMode("app", c.q, c.mode); err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
	}
	if got := signs(tr, "app.T"); got != "" {
		t.Fatalf("unsigned %q, want none (the UNSIGNED is inside a string)", got)
	}
}

// Without the event's sql_mode, "n\" reads one way under ANSI_QUOTES and
// another without: not followed.
func TestAttack25AnsiQuotedBackslashNameUnknownMode(t *testing.T) {
	err, _, _ := attack25Apply(t, SQLMode{Unknown: true}, "CREATE TABLE T (id INT, v INT)",
		`ALTER TABLE T ADD COLUMN "n\" INT, MODIFY id INT UNSIGNED COMMENT '"'`)
	if errName(err) != "ErrUnparsed" {
		t.Fatalf("error %v, want ErrUnparsed", err)
	}
}
