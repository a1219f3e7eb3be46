package schema

import (
	"testing"
)

// signsUnder applies stmts to a tracker of app.T and returns T's
// tracked unsigned columns ("?" when unknown).
func signsUnder(t *testing.T, mode SQLMode, stmts ...string) string {
	t.Helper()
	tr := New([]string{"app.T"}, nil, nil)
	for _, q := range stmts {
		if _, err := tr.ApplyMode("app", q, mode); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return signs(tr, "app.T")
}

// Under NO_BACKSLASH_ESCAPES the tracker keeps signedness right. The
// failure guarded against: with sql_mode NO_BACKSLASH_ESCAPES (a session
// setting the binlog's query event carries) a backslash in a string is a
// plain character: COMMENT 'C:\' ends there. The tracker always reads \' as
// an escaped quote, so the string swallows the rest of the statement: the
// MODIFY that makes a column UNSIGNED is not seen (its values past 2^31
// published negative), or an UNSIGNED word inside the next string is read
// as an attribute (a signed column's negative values published as large
// positive ones). No error: the column list is unchanged, only the
// signedness is wrong. Verified against the installed MariaDB
// (information_schema). The reader gives the tracker the event's
// sql_mode.
func TestNoBackslashEscapesCommentKeepsSignedness(t *testing.T) {
	base := "CREATE TABLE T (id INT, v INT)"
	noEsc := SQLMode{NoBackslashEscapes: true}
	// The server: id UNSIGNED. The tracker: nothing unsigned.
	if got := signsUnder(t, noEsc, base, `ALTER TABLE T MODIFY v INT COMMENT 'C:\', MODIFY id INT UNSIGNED`); got != "id" {
		t.Errorf("after MODIFY id INT UNSIGNED behind COMMENT 'C:\\': tracked unsigned %q, want \"id\" (the server's)", got)
	}
	// The server: nothing unsigned. The tracker: v UNSIGNED.
	if got := signsUnder(t, noEsc, base, `ALTER TABLE T MODIFY v INT COMMENT 'x\', MODIFY id INT COMMENT ' UNSIGNED'`); got != "" {
		t.Errorf("COMMENT 'x\\' then COMMENT ' UNSIGNED': tracked unsigned %q, want \"\" (the server's)", got)
	}
}

// Without the event's sql_mode a statement whose strings read differently
// with and without NO_BACKSLASH_ESCAPES is not followed: the layout is
// forgotten with ErrUnparsed, never read one way by a guess. One whose
// strings read the same either way is followed.
func TestSQLModeUnknownBackslash(t *testing.T) {
	tr := New([]string{"app.T"}, nil, nil)
	unknown := SQLMode{Unknown: true}
	if _, err := tr.ApplyMode("app", "CREATE TABLE T (id INT, v INT COMMENT 'a\\b')", unknown); err != nil {
		t.Fatalf("a backslash pair reads the same either way: %v", err)
	}
	if got := signs(tr, "app.T"); got != "" {
		t.Fatalf("unsigned %q, want none", got)
	}
	_, err := tr.ApplyMode("app", `ALTER TABLE T MODIFY v INT COMMENT 'C:\', MODIFY id INT UNSIGNED`, unknown)
	if errName(err) != "ErrUnparsed" || layout(tr, "app.T") != "-" {
		t.Fatalf("error %v, layout %s: want ErrUnparsed and the layout forgotten", err, layout(tr, "app.T"))
	}
}

// applyUnder applies base then q (mode) to a tracker of app.T and
// returns q's error, T's layout and its unsigned columns.
func applyUnder(t *testing.T, mode SQLMode, base, q string) (error, string, string) {
	t.Helper()
	tr := New([]string{"app.T"}, nil, nil)
	if _, err := tr.ApplyMode("app", base, SQLMode{}); err != nil {
		t.Fatalf("%s: %v", base, err)
	}
	_, err := tr.ApplyMode("app", q, mode)
	return err, layout(tr, "app.T"), signs(tr, "app.T")
}

// An ANSI-quoted name ending in a backslash does not hide an UNSIGNED. The
// failure guarded against: a "..." name is an identifier only under
// ANSI_QUOTES (sql_mode ANSI, ORACLE), and a backslash in an identifier is
// a plain character in every sql_mode; the tracker reads "..." as a name
// but with backslash escapes (all that SQLMode can say is
// NO_BACKSLASH_ESCAPES), so "n\" swallows the ALTER up to the quote in the
// later COMMENT '"'. The server (verified on MariaDB 10.11,
// TestDDLUnderSessionSQLModesKeepsSign) adds the column n\ and makes id
// UNSIGNED; the tracker adds one column named `n" INT, MODIFY id INT
// UNSIGNED COMMENT '` and keeps id SIGNED, with no error. Want: id
// UNSIGNED, or the layout given up (ErrUnparsed). The event's
// ANSI_QUOTES is read too; without the mode known the statement reads two
// ways and is ErrUnparsed (below).
func TestAnsiQuotedBackslashNameKeepsUnsigned(t *testing.T) {
	err, cols, u := applyUnder(t, SQLMode{ANSIQuotes: true}, "CREATE TABLE T (id INT, v INT)",
		`ALTER TABLE T ADD COLUMN "n\" INT, MODIFY id INT UNSIGNED COMMENT '"'`)
	if errName(err) != "ErrUnparsed" && u != "id" {
		t.Fatalf("error %v, layout %s, unsigned %q: want id UNSIGNED (columns id,v,n\\) or ErrUnparsed", err, cols, u)
	}
}

// SET STATEMENT ... FOR ALTER TABLE is tracked as the ALTER. The failure
// guarded against: MariaDB's SET STATEMENT var=value FOR ALTER TABLE ... is
// an ALTER TABLE (the binlog logs the whole text). The tracker classifies
// it by its first word, SET: "changes no table's columns" (ErrIgnored), and
// the UNSIGNED is lost. Want: v UNSIGNED, or ErrUnparsed.
func TestSetStatementForAlterTracked(t *testing.T) {
	err, cols, u := applyUnder(t, SQLMode{}, "CREATE TABLE T (id INT, v INT)",
		"SET STATEMENT lock_wait_timeout=5 FOR ALTER TABLE T MODIFY v INT UNSIGNED")
	if errName(err) != "ErrUnparsed" && u != "v" {
		t.Fatalf("error %v (%s), layout %s, unsigned %q: want v UNSIGNED or ErrUnparsed", err, errName(err), cols, u)
	}
}

// A SET STATEMENT ... FOR prefix is read in the event's sql_mode, like the
// statement it runs: under NO_BACKSLASH_ESCAPES (or ANSI_QUOTES) 'x\' ends
// where a reader with escapes goes on, and the FOR that reader finds is in
// the server's second string; the statement read from there made v
// UNSIGNED, the server's changed a comment. Without the event's sql_mode,
// a prefix that reads differently by it is not followed.
func TestSetStatementPrefixReadInTheEventsSQLMode(t *testing.T) {
	for _, c := range []struct {
		mode SQLMode
		q    string
	}{
		{SQLMode{NoBackslashEscapes: true}, `SET STATEMENT a='x\', b=' FOR ALTER TABLE T MODIFY v INT UNSIGNED -- ' FOR ALTER TABLE T COMMENT 'c'`},
		{SQLMode{ANSIQuotes: true}, `SET STATEMENT a="x\", b=" FOR ALTER TABLE T MODIFY v INT UNSIGNED -- " FOR ALTER TABLE T COMMENT 'c'`},
		{SQLMode{Unknown: true}, `SET STATEMENT a='x\', b=' FOR ALTER TABLE T MODIFY v INT UNSIGNED -- ' FOR ALTER TABLE T COMMENT 'c'`},
	} {
		err, cols, u := applyUnder(t, c.mode, "CREATE TABLE T (id INT, v INT)", c.q)
		if u != "" && errName(err) != "ErrUnparsed" {
			t.Errorf("%+v %s: error %v, layout %s, unsigned %q: want none unsigned (the server's) or ErrUnparsed", c.mode, c.q, err, cols, u)
		}
	}
}

// The parser's NO_BACKSLASH_ESCAPES mode does not outlive its
// statement: a default-mode statement after one with the mode reads \'
// as an escaped quote again (TiDB path and fallback path alike).
func TestParserModeRestoredAfterStatement(t *testing.T) {
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
func TestAnsiQuotedBackslashNameUnknownModeUnparsed(t *testing.T) {
	err, _, _ := applyUnder(t, SQLMode{Unknown: true}, "CREATE TABLE T (id INT, v INT)",
		`ALTER TABLE T ADD COLUMN "n\" INT, MODIFY id INT UNSIGNED COMMENT '"'`)
	if errName(err) != "ErrUnparsed" {
		t.Fatalf("error %v, want ErrUnparsed", err)
	}
}
