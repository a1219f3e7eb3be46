//go:build integration

package kititest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestInboxRefusesInexactMarkerTable: a consumed-event table created by
// an earlier version (VARCHAR(64), the database's _ci PAD SPACE collation)
// is refused with ErrMarkerColumn before anything is inserted, and after
// the documented migration to VARBINARY(255) an id longer than the column
// is refused with ErrEventIDTooLong, never cut.
func TestInboxRefusesInexactMarkerTable(t *testing.T) {
	name := env.Unique("markerin")
	old := "CREATE TABLE " + name + ".consumed_event (consumer_name VARCHAR(64) NOT NULL, event_id VARCHAR(64) NOT NULL, " +
		"consumed_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), PRIMARY KEY (consumer_name, event_id)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
	if err := env.DB.Exec("CREATE DATABASE "+name, old); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, name)
	ctx := context.Background()
	rec := func(id string) *kgo.Record {
		return &kgo.Record{Topic: "t", Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
	}
	ran := 0
	h := func(context.Context, *sql.Tx, *kgo.Record) error { ran++; return nil }
	st := &inbox.Store{DB: db, Name: "c"}
	if _, err := st.Handle(ctx, rec("e-1"), h); !errors.Is(err, inbox.ErrMarkerColumn) {
		t.Fatalf("VARCHAR utf8mb4_general_ci marker table: err %v, want ErrMarkerColumn", err)
	}
	if ran != 0 || count(t, db, "SELECT COUNT(*) FROM consumed_event") != 0 {
		t.Fatalf("the handler ran (%d) or a marker was inserted on a refused table", ran)
	}
	// The migration docs/application-kit.md gives.
	if _, err := db.Exec("ALTER TABLE consumed_event MODIFY consumer_name VARBINARY(255) NOT NULL, MODIFY event_id VARBINARY(255) NOT NULL"); err != nil {
		t.Fatal(err)
	}
	st = &inbox.Store{DB: db, Name: "c"}
	if o, err := st.Handle(ctx, rec("e-1"), h); err != nil || o != inbox.Applied {
		t.Fatalf("after migration: %v %v", o, err)
	}
	if _, err := st.Handle(ctx, rec(strings.Repeat("y", 256)), h); !errors.Is(err, inbox.ErrEventIDTooLong) {
		t.Fatalf("256-byte id: err %v, want ErrEventIDTooLong", err)
	}
	if ran != 1 {
		t.Errorf("handler ran %d times, want 1", ran)
	}
}

// Distinct event ids are never taken for duplicates by the inbox marker.
// The failure guarded against: the consumed_event table of inbox.DDL has no
// collation of its own, so it takes the database's (utf8mb4_general_ci /
// latin1_swedish_ci: case-insensitive, PAD SPACE), and event_id is
// VARCHAR(64). Distinct event ids that the relay publishes distinctly then
// collide on the marker's PRIMARY KEY and the second event is skipped as
// "already done": it is never applied.
func TestInboxDistinctEventIDsAreNotDuplicates(t *testing.T) {
	name := env.Unique("atk16in")
	if err := env.DB.Exec("CREATE DATABASE "+name, inbox.DDL(name+".consumed_event")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := func(id string) *kgo.Record {
		return &kgo.Record{Topic: "t", Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
	}
	long := strings.Repeat("x", 64)
	cases := []struct {
		what    string
		sqlMode string // "" keeps the server default (strict)
		a, b    string
	}{
		{"ids differing in case (KSUID, nanoid, business keys)", "", "Ord-7a", "ord-7A"},
		{"ids differing by a trailing space", "", "evt-1", "evt-1 "},
		{"ids longer than 64 characters, non-strict sql_mode", "sql_mode=%27%27", long + "-1", long + "-2"},
	}
	for i, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			d := dsn(env.DB.Addr, name)
			if c.sqlMode != "" {
				d += "&" + c.sqlMode
			}
			db, err := sql.Open("mysql", d)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			st := &inbox.Store{DB: db, Name: fmt.Sprintf("c%d", i)}
			applied := map[string]int{}
			h := func(_ context.Context, _ *sql.Tx, r *kgo.Record) error {
				id, _ := inbox.EventID(r)
				applied[id]++
				return nil
			}
			for _, id := range []string{c.a, c.b} {
				o, err := st.Handle(ctx, rec(id), h)
				if err != nil {
					t.Fatalf("handle %q: %v", id, err)
				}
				t.Logf("event %q: %s", id, o)
			}
			if applied[c.b] != 1 {
				t.Errorf("event %q was never applied: inbox took it for a duplicate of %q (data loss)", c.b, c.a)
			}
		})
	}
	// Strict mode (the default): an event id of 65+ characters, which the
	// relay publishes as it is, fails every time: the consumer stops at it
	// for good (a poison record).
	t.Run("id longer than 64 characters, strict sql_mode", func(t *testing.T) {
		db := openDB(t, name)
		st := &inbox.Store{DB: db, Name: "strict"}
		id := "com.example.billing.InvoiceIssued:550e8400-e29b-41d4-a716-446655440000:17"
		_, err := st.Handle(ctx, rec(id), func(context.Context, *sql.Tx, *kgo.Record) error { return nil })
		if err != nil {
			t.Errorf("a %d-character event id cannot be consumed, ever: %v", len(id), err)
		}
	})
}
