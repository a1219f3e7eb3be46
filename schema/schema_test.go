package schema

import (
	"errors"
	"strings"
	"testing"
)

func TestApply(t *testing.T) {
	tr := New([]string{"app.outbox", "app.renamed"}, nil)
	steps := []struct {
		db, sql string
		want    string // app.outbox columns after, "-" for unknown
		changed bool
	}{
		{"app", "CREATE TABLE outbox (id BIGINT PRIMARY KEY, event_id VARCHAR(64), payload JSON DEFAULT NULL)", "id,event_id,payload", true},
		{"app", "CREATE TABLE other (a INT)", "id,event_id,payload", false},
		{"", "ALTER TABLE app.outbox ADD COLUMN tenant VARCHAR(10) FIRST", "tenant,id,event_id,payload", true},
		{"app", "ALTER TABLE outbox MODIFY COLUMN tenant VARCHAR(20) AFTER event_id", "id,event_id,tenant,payload", true},
		{"app", "ALTER TABLE outbox CHANGE tenant org VARCHAR(20), ADD COLUMN (x INT, y INT)", "id,event_id,org,payload,x,y", true},
		{"app", "ALTER TABLE outbox DROP COLUMN x, RENAME COLUMN y TO z", "id,event_id,org,payload,z", true},
		{"app", "ALTER TABLE outbox ADD COLUMN w INT AFTER id", "id,w,event_id,org,payload,z", true},
		{"app", "TRUNCATE TABLE outbox", "id,w,event_id,org,payload,z", false},
		{"app", "INSERT INTO outbox (id) VALUES (1)", "id,w,event_id,org,payload,z", false},
		{"app", "RENAME TABLE outbox TO renamed", "-", true},
	}
	for _, s := range steps {
		changed, err := tr.Apply(s.db, s.sql)
		if err != nil {
			t.Fatalf("%s: %v", s.sql, err)
		}
		cols, ok := tr.Columns("app", "outbox")
		got := strings.Join(cols, ",")
		if !ok {
			got = "-"
		}
		if got != s.want || changed != s.changed {
			t.Fatalf("%s: columns %s (changed %v), want %s (changed %v)", s.sql, got, changed, s.want, s.changed)
		}
	}
	if cols, _ := tr.Columns("app", "renamed"); strings.Join(cols, ",") != "id,w,event_id,org,payload,z" {
		t.Fatalf("renamed table columns %v", cols)
	}
	if _, err := tr.Apply("app", "DROP TABLE renamed"); err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.Columns("app", "renamed"); ok {
		t.Fatal("dropped table still tracked")
	}
}

func TestSnapshotsAreImmutable(t *testing.T) {
	tr := New([]string{"app.outbox"}, Tables{"app.outbox": {"a", "b"}, "app.other": {"x"}})
	if _, ok := tr.Columns("app", "other"); ok {
		t.Fatal("an uncaptured table was taken from the initial layout")
	}
	before := tr.Tables()
	if _, err := tr.Apply("app", "ALTER TABLE outbox ADD COLUMN c INT"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(before["app.outbox"], ",") != "a,b" || strings.Join(tr.Tables()["app.outbox"], ",") != "a,b,c" {
		t.Fatalf("snapshot changed: before %v, now %v", before, tr.Tables())
	}
}

func TestUnparsed(t *testing.T) {
	tr := New([]string{"app.outbox"}, Tables{"app.outbox": {"a"}})
	if _, err := tr.Apply("app", "ALTER TABLE outbox FROBNICATE"); !errors.Is(err, ErrUnparsed) {
		t.Fatalf("unparsable DDL on a captured table: %v, want ErrUnparsed", err)
	}
	if _, err := tr.Apply("app", "ALTER TABLE elsewhere FROBNICATE"); err == nil || errors.Is(err, ErrUnparsed) {
		t.Fatalf("unparsable DDL elsewhere: %v, want a plain error", err)
	}
	if _, err := tr.Apply("app", "ALTER TABLE outbox DROP COLUMN nope"); !errors.Is(err, ErrUnparsed) {
		t.Fatalf("dropping an unknown column: %v, want ErrUnparsed", err)
	}
	tr2 := New([]string{"app.outbox"}, nil)
	if _, err := tr2.Apply("app", "ALTER TABLE outbox ADD COLUMN b INT"); !errors.Is(err, ErrUnparsed) {
		t.Fatalf("ALTER of an unknown table: %v, want ErrUnparsed", err)
	}
}
