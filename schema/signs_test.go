package schema

import (
	"strings"
	"testing"
)

// signs renders a table's tracked unsigned columns, "?" when unknown.
func signs(tr *Tracker, n string) string {
	db, tbl, _ := strings.Cut(n, ".")
	u, ok := tr.UnsignedColumns(db, tbl)
	if !ok {
		return "?"
	}
	return strings.Join(u, ",")
}

// TestSignedness follows UNSIGNED (and ZEROFILL) columns through the DDL
// applications, ORMs and online schema change tools send, with the TiDB
// parser and with MariaDB syntax it rejects (read by the fallback reader).
func TestSignedness(t *testing.T) {
	tr := New([]string{"app.outbox"}, nil, nil)
	steps := []struct{ sql, want string }{
		// Laravel's $table->id() and increments(); ZEROFILL implies UNSIGNED.
		{"CREATE TABLE outbox (id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY, seq INT(10) UNSIGNED ZEROFILL, " +
			"temp TINYINT SIGNED, n SMALLINT ZEROFILL, payload JSON, price DECIMAL(10,2) UNSIGNED)", "id,seq,n,price"},
		// A CAST in a default or generated expression says nothing of the column.
		{"ALTER TABLE outbox ADD COLUMN g BIGINT AS (CAST(seq AS UNSIGNED)) VIRTUAL", "id,seq,n,price"},
		{"ALTER TABLE outbox MODIFY seq INT NOT NULL", "id,n,price"},
		{"ALTER TABLE outbox MODIFY temp TINYINT UNSIGNED AFTER id", "id,temp,n,price"},
		{"ALTER TABLE outbox CHANGE n m MEDIUMINT UNSIGNED", "id,temp,m,price"},
		{"ALTER TABLE outbox RENAME COLUMN m TO k", "id,temp,k,price"},
		// Renames are matched against the columns before: a swap swaps.
		{"ALTER TABLE outbox RENAME COLUMN k TO seq, RENAME COLUMN seq TO k", "id,temp,seq,price"},
		{"ALTER TABLE outbox DROP COLUMN price, ADD COLUMN price DECIMAL(10,2)", "id,temp,seq"},
		{"ALTER TABLE outbox DROP COLUMN seq, ADD COLUMN seq BIGINT UNSIGNED FIRST", "seq,id,temp"},
		// MariaDB syntax the TiDB parser rejects: the fallback reader.
		{"ALTER TABLE outbox ADD COLUMN v INT UNSIGNED INVISIBLE, ADD COLUMN w INT INVISIBLE AFTER seq", "seq,id,temp,v"},
		{"ALTER TABLE outbox MODIFY COLUMN v INT INVISIBLE", "seq,id,temp"},
		// A column named after the keyword is a name, not an attribute.
		{"ALTER TABLE outbox ADD COLUMN `unsigned` INT INVISIBLE, ADD COLUMN x INT INVISIBLE AFTER `unsigned`", "seq,id,temp"},
		// gh-ost: the shadow carries its own signedness over the cut-over.
		{"CREATE TABLE _outbox_gho LIKE outbox", "seq,id,temp"},
		{"ALTER TABLE _outbox_gho MODIFY id BIGINT NOT NULL", "seq,id,temp"},
		{"RENAME TABLE outbox TO _outbox_del, _outbox_gho TO outbox", "seq,temp"},
		{"DROP TABLE outbox", "?"},
		{"CREATE TABLE outbox (id INT(10) UNSIGNED NOT NULL, tenant VARCHAR(10) COMPRESSED)", "id"},
		{"CREATE OR REPLACE TABLE outbox (id INT NOT NULL, tenant VARCHAR(10))", ""},
	}
	for _, s := range steps {
		if _, err := tr.Apply("app", s.sql); err != nil {
			t.Fatalf("%s: %v", s.sql, err)
		}
		if got := signs(tr, "app.outbox"); got != s.want {
			t.Fatalf("%s: unsigned %q, want %q (columns %s)", s.sql, got, s.want, layout(tr, "app.outbox"))
		}
	}
}

// TestSignednessChange: a statement that changes only a column's
// signedness changes the layout (the reader must drop its cached tables).
func TestSignednessChange(t *testing.T) {
	tr := New([]string{"app.outbox"}, Tables{"app.outbox": {"id", "payload"}}, Signs{"app.outbox": nil})
	changed, err := tr.Apply("app", "ALTER TABLE outbox MODIFY id INT UNSIGNED")
	if err != nil || !changed || signs(tr, "app.outbox") != "id" {
		t.Fatalf("changed %v, err %v, unsigned %q: want changed, id", changed, err, signs(tr, "app.outbox"))
	}
	if changed, _ := tr.Apply("app", "ALTER TABLE outbox MODIFY id INT UNSIGNED NOT NULL"); changed {
		t.Fatal("a statement leaving the layout and signedness as they were reported a change")
	}
}

// TestSignednessUnknown: a layout without signedness (an old checkpoint,
// or column names alone) stays without it through DDL that does not give
// every column's definition, and never becomes known by a guess.
func TestSignednessUnknown(t *testing.T) {
	tr := New([]string{"app.outbox"}, Tables{"app.outbox": {"id", "payload"}}, nil)
	for _, q := range []string{"ALTER TABLE outbox ADD COLUMN n INT UNSIGNED", "ALTER TABLE outbox RENAME COLUMN n TO m",
		"CREATE TABLE outbox2 LIKE outbox", "RENAME TABLE outbox TO o1, outbox2 TO outbox"} {
		if _, err := tr.Apply("app", q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if got := signs(tr, "app.outbox"); got != "?" {
			t.Fatalf("%s: unsigned %q, want unknown", q, got)
		}
	}
	if _, err := tr.Apply("app", "CREATE OR REPLACE TABLE outbox (id BIGINT UNSIGNED, payload TEXT)"); err != nil {
		t.Fatal(err)
	}
	if got := signs(tr, "app.outbox"); got != "id" {
		t.Fatalf("after CREATE TABLE: unsigned %q, want id", got)
	}
	// The binlog's own names, with and without its signedness.
	tr.Learn("app", "outbox", []string{"id", "payload"}, []string{"payload"}, true)
	if got := signs(tr, "app.outbox"); got != "payload" {
		t.Fatalf("learned: unsigned %q, want payload", got)
	}
	tr.Learn("app", "outbox", []string{"id", "payload"}, nil, false)
	if got := signs(tr, "app.outbox"); got != "?" {
		t.Fatalf("learned without signedness: unsigned %q, want unknown", got)
	}
	// Restart from a snapshot keeps what is known.
	tr.Learn("app", "outbox", []string{"id", "payload"}, []string{"id"}, true)
	if got := signs(New([]string{"app.outbox"}, tr.Tables(), tr.Unsigned()), "app.outbox"); got != "id" {
		t.Fatalf("after restart: unsigned %q, want id", got)
	}
}

// MariaDB's SET STATEMENT prefix is left out; what cannot be read as one
// is left as it is.
func TestStatementBody(t *testing.T) {
	for in, want := range map[string]string{
		"SET STATEMENT lock_wait_timeout=5 FOR ALTER TABLE t ADD c INT":                   "ALTER TABLE t ADD c INT",
		"set statement max_statement_time=(60), sql_mode='' for\nALTER TABLE t ADD c INT": "ALTER TABLE t ADD c INT",
		"SET STATEMENT x=IF(a, 'FOR', 2) FOR INSERT INTO outbox VALUES (1)":               "INSERT INTO outbox VALUES (1)",
		"SET STATEMENT lock_wait_timeout=5":                                               "SET STATEMENT lock_wait_timeout=5",
		"SET sql_mode='' FOR":                                                             "SET sql_mode='' FOR",
		"ALTER TABLE t ADD c INT":                                                         "ALTER TABLE t ADD c INT",
	} {
		if got := StatementBody(in); got != want {
			t.Errorf("StatementBody(%q) = %q, want %q", in, got, want)
		}
	}
}
