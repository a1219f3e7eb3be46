package schema

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// outboxINE is the article's outbox as a migration writes it.
const outboxINE = "CREATE TABLE IF NOT EXISTS outbox (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL, " +
	"aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL, payload JSON NOT NULL, " +
	"created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), UNIQUE KEY uk_event_id (event_id))"

// Table map column types (MySQL's codes) of the outbox: on MariaDB (JSON is
// LONGTEXT) and on MySQL (JSON is its own type).
var (
	outboxMariaDB = []byte{8, 15, 15, 15, 15, 252, 18}
	outboxMySQL   = []byte{8, 15, 15, 15, 15, 245, 18}
)

// A CREATE TABLE IF NOT EXISTS of a table the tracker has not seen gives a
// provisional layout: its first table map confirms it (column count and
// type classes) or disagrees (the table existed with another definition).
// DDL in between keeps it provisional; a plain CREATE, a DROP or the
// binlog's own column names end it.
func TestProvisionalLayout(t *testing.T) {
	base := "id,event_id,aggregate_type,aggregate_id,event_type,payload,created_at"
	cases := map[string]struct {
		known  bool     // app.outbox's layout is known (base) before
		ddl    []string // applied in order, in database app
		learn  []string // then the binlog's column names, if any
		outbox string   // app.outbox's columns after the DDL, "-": unknown
		prov   bool     // app.outbox is provisional after the DDL
		types  []byte   // a table map of app.outbox to verify with
		err    bool     // Verify disagrees
	}{
		"not seen, MariaDB table map":  {ddl: []string{outboxINE}, outbox: base, prov: true, types: outboxMariaDB},
		"not seen, MySQL table map":    {ddl: []string{outboxINE}, outbox: base, prov: true, types: outboxMySQL},
		"old temporal formats":         {ddl: []string{outboxINE}, outbox: base, prov: true, types: []byte{8, 15, 15, 15, 15, 252, 12}},
		"existed with more columns":    {ddl: []string{outboxINE}, outbox: base, prov: true, types: append(slices.Clone(outboxMariaDB), 3), err: true},
		"existed with fewer columns":   {ddl: []string{outboxINE}, outbox: base, prov: true, types: outboxMariaDB[:6], err: true},
		"existed with another order":   {ddl: []string{outboxINE}, outbox: base, prov: true, types: []byte{15, 8, 15, 15, 15, 252, 18}, err: true},
		"existed with a TIMESTAMP":     {ddl: []string{outboxINE}, outbox: base, prov: true, types: []byte{8, 15, 15, 15, 15, 252, 17}, err: true},
		"a VARCHAR that became TEXT":   {ddl: []string{"CREATE TABLE IF NOT EXISTS outbox (id INT, v VARCHAR(70000))"}, outbox: "id,v", prov: true, types: []byte{3, 252}},
		"integers of any width agree":  {ddl: []string{"CREATE TABLE IF NOT EXISTS outbox (a TINYINT, b INT UNSIGNED, c BOOL)"}, outbox: "a,b,c", prov: true, types: []byte{1, 3, 1}},
		"known: nothing happens":       {known: true, ddl: []string{"CREATE TABLE IF NOT EXISTS outbox (a INT)"}, outbox: base, types: []byte{3}},
		"after a drop: a plain create": {known: true, ddl: []string{"DROP TABLE outbox", "CREATE TABLE IF NOT EXISTS outbox (a INT)"}, outbox: "a", types: []byte{3}},
		"twice: the first stays": {ddl: []string{outboxINE, "CREATE TABLE IF NOT EXISTS outbox (a INT)"}, outbox: base, prov: true,
			types: []byte{3}, err: true},
		"then a plain create": {ddl: []string{outboxINE, "CREATE OR REPLACE TABLE outbox (a INT)"}, outbox: "a", types: []byte{3}},
		"then dropped":        {ddl: []string{outboxINE, "DROP TABLE outbox"}, outbox: "-"},
		"then altered": {ddl: []string{outboxINE, "ALTER TABLE outbox ADD COLUMN tenant INT FIRST, DROP COLUMN created_at"},
			outbox: "tenant," + strings.TrimSuffix(base, ",created_at"), prov: true, types: []byte{3, 8, 15, 15, 15, 15, 252}},
		"then altered, another table": {ddl: []string{outboxINE, "ALTER TABLE outbox ADD COLUMN tenant INT FIRST"},
			outbox: "tenant," + base, prov: true, types: []byte{15, 8, 15, 15, 15, 15, 252, 18}, err: true},
		"then a column renamed": {ddl: []string{outboxINE, "ALTER TABLE outbox RENAME COLUMN id TO seq, MODIFY payload DATETIME"},
			outbox: strings.Replace(base, "id,", "seq,", 1), prov: true, types: []byte{8, 15, 15, 15, 15, 18, 18}},
		"renamed onto the captured name": {ddl: []string{"DROP TABLE IF EXISTS outbox", "CREATE TABLE IF NOT EXISTS outbox_v2 (a INT, b DATE)",
			"RENAME TABLE outbox_v2 TO outbox"}, outbox: "a,b", prov: true, types: []byte{3, 15}, err: true},
		"renamed away": {ddl: []string{outboxINE, "RENAME TABLE outbox TO outbox_old"}, outbox: "-"},
		"MariaDB syntax the parser refuses": {ddl: []string{"CREATE TABLE IF NOT EXISTS outbox (id INT, addr INET6, body TEXT COMPRESSED)"},
			outbox: "id,addr,body", prov: true, types: []byte{3, 254, 252}},
		"MariaDB syntax, another table": {ddl: []string{"CREATE TABLE IF NOT EXISTS outbox (id INT, addr INET6, body TEXT COMPRESSED)"},
			outbox: "id,addr,body", prov: true, types: []byte{252, 254, 252}, err: true},
		"column names in the binlog": {ddl: []string{outboxINE}, learn: []string{"x", "y"}, outbox: "x,y", types: []byte{3, 3}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var init Tables
			if c.known {
				init = Tables{"app.outbox": strings.Split(base, ",")}
			}
			tr := New([]string{"app.outbox"}, init, nil)
			for _, s := range c.ddl {
				if _, err := tr.Apply("app", s); err != nil {
					t.Fatalf("%s: %v", s, err)
				}
			}
			if c.learn != nil {
				tr.Learn("app", "outbox", c.learn, nil, false)
			}
			if got := layout(tr, "app.outbox"); got != c.outbox {
				t.Fatalf("app.outbox %s, want %s", got, c.outbox)
			}
			if _, got := tr.Provisional()["app.outbox"]; got != c.prov {
				t.Fatalf("provisional %v, want %v (%v)", got, c.prov, tr.Provisional())
			}
			if c.types == nil {
				return
			}
			// A restart from a checkpoint holding the layout keeps the mark.
			again := New([]string{"app.outbox"}, tr.Tables(), tr.Unsigned())
			again.SetProvisional(tr.Provisional())
			for _, r := range []*Tracker{tr, again} {
				err := r.Verify("app", "outbox", c.types)
				if (err != nil) != c.err || err != nil && !errors.Is(err, ErrProvisional) {
					t.Fatalf("verify: %v, want an error: %v", err, c.err)
				}
				if _, still := r.Provisional()["app.outbox"]; still != (c.prov && c.err) {
					t.Fatalf("provisional after verify: %v", still)
				}
			}
		})
	}
}

// A provisional layout is reported in each column's own words: what the
// table map says and what the statement defined.
func TestProvisionalDisagreementNamesTheColumn(t *testing.T) {
	tr := New([]string{"app.outbox"}, nil, nil)
	if _, err := tr.Apply("app", outboxINE); err != nil {
		t.Fatal(err)
	}
	err := tr.Verify("app", "outbox", []byte{8, 3, 15, 15, 15, 252, 18})
	if err == nil || !strings.Contains(err.Error(), "column 2 (event_id) is integer in its rows, text in the CREATE TABLE IF NOT EXISTS") {
		t.Fatalf("error %v", err)
	}
}

// An ALTER TABLE the provisional layout does not allow (the table existed
// with other columns) stops as any contradiction does, and says where the
// layout came from.
func TestProvisionalLayoutContradictedByAlter(t *testing.T) {
	tr := New([]string{"app.outbox"}, nil, nil)
	if _, err := tr.Apply("app", outboxINE); err != nil {
		t.Fatal(err)
	}
	_, err := tr.Apply("app", "ALTER TABLE outbox DROP COLUMN legacy")
	if !errors.Is(err, ErrUnparsed) || !strings.Contains(err.Error(), "CREATE TABLE IF NOT EXISTS, not yet checked") {
		t.Fatalf("error %v", err)
	}
	if got := layout(tr, "app.outbox"); got != "-" || len(tr.Provisional()) != 0 {
		t.Fatalf("app.outbox %s, provisional %v after the contradiction", got, tr.Provisional())
	}
}
