package schema

import (
	"errors"
	"testing"
)

// Table names in statements compare as the server's lower_case_table_names
// says: folded (1, 2), a name in another letter case is the captured
// table, whatever case the configuration, the statement and the event's
// default database use (lower_case_table_names=1 logs `use app` for `USE
// App`); exact (0), it is another table; unknown, the captured layout
// becomes unknown (the statement may or may not mean it).
func TestTableNamesCompareAsTheServerDoes(t *testing.T) {
	const base = "id,event_id,payload"
	type step struct{ db, sql, want string }
	cases := map[string]struct {
		names    NameCase
		captured string
		steps    []step
		err      string // of the last step
	}{
		"folded": {names: NamesFolded, captured: "app.outbox", steps: []step{
			{"app", "ALTER TABLE APP.OUTBOX ADD COLUMN x INT FIRST", "x," + base},
			{"APP", "ALTER TABLE Outbox DROP COLUMN x", base},
			{"app", "CREATE TABLE App.Outbox_V2 (a INT, b INT)", base},
			{"app", "RENAME TABLE app.OUTBOX TO App.Outbox_Old, APP.OUTBOX_v2 TO app.Outbox", "a,b"},
			{"app", "ALTER TABLE OUTBOX_OLD ADD COLUMN z INT", "a,b"},
			{"App", "RENAME TABLE Outbox TO o3, outbox_OLD TO OUTBOX", base + ",z"},
			{"other", "DROP DATABASE APP", "-"},
		}},
		"folded, configured in mixed case": {names: NamesFolded, captured: "App.Outbox", steps: []step{
			{"app", "ALTER TABLE outbox ADD COLUMN x INT FIRST", "x," + base},
			{"", "CREATE OR REPLACE TABLE app.OUTBOX (a INT)", "a"},
		}},
		"exact": {names: NamesExact, captured: "app.outbox", steps: []step{
			{"app", "ALTER TABLE APP.OUTBOX ADD COLUMN x INT FIRST", base},
			{"app", "CREATE TABLE App.outbox (a INT)", base},
			{"APP", "DROP TABLE outbox", base},
			{"app", "RENAME TABLE Outbox TO outbox_old", base},
			{"app", "ALTER TABLE outbox ADD COLUMN y INT", base + ",y"},
		}},
		"unknown": {captured: "app.outbox", steps: []step{
			{"app", "ALTER TABLE APP.OUTBOX ADD COLUMN x INT FIRST", "-"},
		}, err: "ErrUnparsed"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			tr := New([]string{c.captured}, Tables{c.captured: []string{"id", "event_id", "payload"}}, nil)
			tr.SetNameCase(c.names)
			for i, s := range c.steps {
				_, err := tr.Apply(s.db, s.sql)
				if i == len(c.steps)-1 && c.err != "" {
					if !errors.Is(err, ErrUnparsed) {
						t.Fatalf("%s: error %v, want %s", s.sql, err, c.err)
					}
				} else if err != nil {
					t.Fatalf("%s: %v", s.sql, err)
				}
				if got := layout(tr, c.captured); got != s.want {
					t.Fatalf("after %s (default database %q): %s is %s, want %s", s.sql, s.db, c.captured, got, s.want)
				}
			}
		})
	}
}

func TestParseNameCase(t *testing.T) {
	for v, want := range map[string]NameCase{"0": NamesExact, "1": NamesFolded, "2": NamesFolded, "": NamesUnknown, "ON": NamesUnknown} {
		if got := ParseNameCase(v); got != want {
			t.Errorf("lower_case_table_names %q: %v, want %v", v, got, want)
		}
	}
	if !NamesFolded.Same("App.Outbox", "app.outbox") || NamesExact.Same("App.Outbox", "app.outbox") || NamesUnknown.Same("a.B", "a.b") {
		t.Error("Same compares as the setting says")
	}
}
