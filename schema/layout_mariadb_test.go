//go:build integration

package schema_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/schema"
)

// multiClauseAlters are ALTER TABLE statements of several column clauses
// each, against app.m (a, b, c, d, recreated before each): positions that
// name columns moved, added, renamed or dropped by other clauses of the
// same statement, in both orders.
var multiClauseAlters = []string{
	"MODIFY a INT AFTER b, MODIFY b INT FIRST",
	"MODIFY a INT AFTER c, MODIFY c INT FIRST",
	"MODIFY b INT AFTER d, MODIFY d INT AFTER a",
	"MODIFY a INT AFTER b, MODIFY b INT AFTER a",
	"MODIFY c INT FIRST, MODIFY d INT FIRST",
	"ADD x INT AFTER a, MODIFY a INT AFTER d",
	"MODIFY a INT AFTER d, ADD x INT AFTER a",
	"ADD y INT FIRST, ADD x INT AFTER y",
	"ADD x INT AFTER c, ADD y INT AFTER c, ADD z INT FIRST",
	"DROP a, ADD a INT FIRST",
	"DROP b, ADD e INT AFTER a, MODIFY a INT AFTER e",
	"CHANGE a x INT, MODIFY b INT AFTER x",
	"MODIFY b INT AFTER x, CHANGE a x INT",
	"CHANGE a b2 INT AFTER d, CHANGE b a INT",
	"CHANGE a b INT, CHANGE b a INT",
	"CHANGE a b INT AFTER c, CHANGE b a INT FIRST",
	"RENAME COLUMN a TO z, MODIFY b INT AFTER z",
	"RENAME COLUMN a TO b, RENAME COLUMN b TO a, MODIFY c INT FIRST",
	"MODIFY COLUMN A INT AFTER D, MODIFY COLUMN d INT FIRST",
	"CHANGE COLUMN a A INT AFTER b",
	"ADD COLUMN IF NOT EXISTS a INT FIRST, ADD COLUMN IF NOT EXISTS x INT AFTER b",
	"DROP COLUMN IF EXISTS nope, MODIFY COLUMN IF EXISTS nope2 INT FIRST, MODIFY d INT FIRST",
	"ADD x INT UNSIGNED AFTER b, MODIFY c INT UNSIGNED FIRST, CHANGE d e BIGINT UNSIGNED AFTER x",
	"ADD x INT INVISIBLE AFTER b, MODIFY a INT INVISIBLE AFTER x",
}

// TestTrackerLayoutMatchesMariaDB runs ALTER TABLE statements of several
// column clauses on MariaDB and on the tracker and compares, after each,
// the tracker's columns (and their signedness) with information_schema:
// first the shapes above, each on a fresh table, then random statements on
// one table, each built from the columns it has (the server's refusals
// are skipped: they never reach a binlog).
func TestTrackerLayoutMatchesMariaDB(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: t.TempDir()})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	conn, err := binlog.Connect(ctx, binlog.Config{User: "root", Password: devdb.RootPassword, ConnectTimeout: 5 * time.Second}, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string) error { _, err := conn.Execute(q); return err }
	if err := exec("CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	if err := exec("USE app"); err != nil {
		t.Fatal(err)
	}
	// fresh creates app.m (a, b, c, d) anew on the server and in a new tracker.
	fresh := func() *schema.Tracker {
		tr := schema.New([]string{"app.m"}, nil, nil)
		for _, q := range []string{"DROP TABLE IF EXISTS m", "CREATE TABLE m (a INT, b INT, c INT, d INT)"} {
			if err := exec(q); err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Apply("app", q); err != nil {
				t.Fatal(err)
			}
		}
		return tr
	}
	for _, spec := range multiClauseAlters {
		tr := fresh()
		q := "ALTER TABLE m " + spec
		if err := exec(q); err != nil {
			t.Fatalf("%s: MariaDB refused it: %v", q, err)
		}
		if _, err := tr.Apply("app", q); err != nil {
			t.Fatalf("%s: MariaDB ran it, the tracker: %v", q, err)
		}
		compareLayout(t, conn, tr, q)
	}

	// Random statements on one table.
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(43, seed))
	tr := fresh()
	applied := 0
	for i := 0; i < 400; i++ {
		cols, _ := tr.Columns("app", "m")
		q := "ALTER TABLE m " + randomClauses(rng, cols)
		if err := exec(q); err != nil {
			continue // refused by the server: never in a binlog
		}
		applied++
		if _, err := tr.Apply("app", q); err != nil {
			t.Fatalf("seed %d: %s: MariaDB ran it, the tracker: %v", seed, q, err)
		}
		compareLayout(t, conn, tr, fmt.Sprintf("seed %d: %s", seed, q))
	}
	if applied < 50 {
		t.Fatalf("seed %d: only %d of 400 random statements ran: the generator builds too few valid ones", seed, applied)
	}
}

// compareLayout fails the test when the tracker's app.m differs from what
// information_schema says.
func compareLayout(t *testing.T, conn *binlog.Conn, tr *schema.Tracker, what string) {
	t.Helper()
	rows, err := binlog.Query(conn, "SELECT column_name, column_type LIKE '%unsigned%' FROM information_schema.columns "+
		"WHERE table_schema = 'app' AND table_name = 'm' ORDER BY ordinal_position")
	if err != nil {
		t.Fatal(err)
	}
	var want, wantUnsigned []string
	for _, r := range rows {
		want = append(want, r[0])
		if r[1] == "1" {
			wantUnsigned = append(wantUnsigned, r[0])
		}
	}
	got, ok := tr.Columns("app", "m")
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("%s: tracker has %v (known %v), the server %v", what, got, ok, want)
	}
	unsigned, known := tr.UnsignedColumns("app", "m")
	if !known || !slices.Equal(unsigned, wantUnsigned) {
		t.Fatalf("%s: tracker's unsigned columns %v (known %v), the server's %v", what, unsigned, known, wantUnsigned)
	}
}

// randomClauses builds two to four column clauses for a table with cols:
// ADD, DROP, MODIFY, CHANGE, RENAME COLUMN, with and without FIRST or
// AFTER, IF [NOT] EXISTS, names in another letter case, now and then a name
// no column has.
func randomClauses(rng *rand.Rand, cols []string) string {
	pool := []string{"a", "b", "c", "d", "e", "f", "g", "x", "y", "z"}
	pick := func() string {
		if len(cols) == 0 || rng.IntN(6) == 0 {
			return pool[rng.IntN(len(pool))]
		}
		return cols[rng.IntN(len(cols))]
	}
	cased := func(s string) string {
		if rng.IntN(4) == 0 {
			return strings.ToUpper(s)
		}
		return s
	}
	typ := func() string {
		return []string{"INT", "INT UNSIGNED", "BIGINT", "VARCHAR(10)", "SMALLINT UNSIGNED", "INT INVISIBLE"}[rng.IntN(6)]
	}
	pos := func() string {
		switch rng.IntN(3) {
		case 0:
			return ""
		case 1:
			return " FIRST"
		}
		return " AFTER " + cased(pick())
	}
	n := 2 + rng.IntN(3)
	var clauses []string
	for range n {
		var c string
		switch rng.IntN(6) {
		case 0:
			ifNot := []string{"", "IF NOT EXISTS "}[rng.IntN(2)]
			c = "ADD COLUMN " + ifNot + pool[rng.IntN(len(pool))] + " " + typ() + pos()
		case 1:
			ifEx := []string{"", "IF EXISTS "}[rng.IntN(2)]
			c = "DROP COLUMN " + ifEx + cased(pick())
		case 2, 3:
			c = "MODIFY COLUMN " + cased(pick()) + " " + typ() + pos()
		case 4:
			c = "CHANGE COLUMN " + cased(pick()) + " " + cased(pool[rng.IntN(len(pool))]) + " " + typ() + pos()
		case 5:
			c = "RENAME COLUMN " + cased(pick()) + " TO " + pool[rng.IntN(len(pool))]
		}
		clauses = append(clauses, c)
	}
	return strings.Join(clauses, ", ")
}
