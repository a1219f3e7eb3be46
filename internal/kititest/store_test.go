//go:build integration

package kititest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/inbox"
)

// TestStoreHandle against MariaDB: a duplicate is skipped without running
// the handler; a handler error rolls back effect and marker (the event is
// handled again later); the handler's own duplicate key is an error, not
// "already done"; the same event handled concurrently is applied once.
func TestStoreHandle(t *testing.T) {
	ctx := context.Background()
	name := env.Unique("store")
	if err := env.DB.Exec("CREATE DATABASE "+name, inbox.DDL(name+".consumed_event"),
		"CREATE TABLE "+name+".effect (event_id VARCHAR(64) NOT NULL, k VARCHAR(64) NOT NULL, UNIQUE KEY uk_k (k))"); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, name)
	store := &inbox.Store{DB: db, Name: "c1"}
	rec := func(id string) *kgo.Record {
		return &kgo.Record{Topic: "t", Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(id)}}}
	}
	calls := 0
	effect := func(key string) inbox.Handler {
		return func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
			calls++
			id, _ := inbox.EventID(r)
			_, err := tx.ExecContext(ctx, "INSERT INTO effect (event_id, k) VALUES (?, ?)", id, key)
			return err
		}
	}
	if o, err := store.Handle(ctx, rec("e1"), effect("k1")); err != nil || o != inbox.Applied {
		t.Fatalf("first: %v, %v", o, err)
	}
	if o, err := store.Handle(ctx, rec("e1"), effect("k1-again")); err != nil || o != inbox.Duplicate || calls != 1 {
		t.Fatalf("second: %v, %v, handler called %d times", o, err, calls)
	}
	// Handler error: nothing stays, so the event can be handled again.
	boom := errors.New("sms gateway down")
	if _, err := store.Handle(ctx, rec("e2"), func(context.Context, *sql.Tx, *kgo.Record) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("handler error: %v", err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM consumed_event WHERE event_id = 'e2'"); n != 0 {
		t.Fatalf("marker of a failed event kept: %d", n)
	}
	if o, err := store.Handle(ctx, rec("e2"), effect("k2")); err != nil || o != inbox.Applied {
		t.Fatalf("retry after handler error: %v, %v", o, err)
	}
	// The handler's own 1062 (key uk_k) is an error, never "already done".
	_, err := store.Handle(ctx, rec("e3"), effect("k1"))
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1062 {
		t.Fatalf("handler's duplicate key: %v, want the 1062 error", err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM consumed_event WHERE event_id = 'e3'"); n != 0 {
		t.Fatalf("e3 marked consumed although its effect failed")
	}
	// No marker table: an error, not a skip.
	bad := &inbox.Store{DB: db, Name: "c1", Table: "missing_table"}
	if _, err := bad.Handle(ctx, rec("e4"), effect("k4")); err == nil {
		t.Fatal("a missing consumed-event table was not an error")
	}
	// A record without an id header is refused.
	if _, err := store.Handle(ctx, &kgo.Record{}, effect("k5")); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("no id header: %v", err)
	}
	// Concurrent handling of one event (a rebalance): applied once.
	var wg sync.WaitGroup
	outcomes := make(chan inbox.Outcome, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := store.Handle(ctx, rec("e6"), func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO effect (event_id, k) VALUES ('e6', ?)", fmt.Sprint("k6-", i))
				return err
			})
			if err != nil {
				t.Error(err)
			}
			outcomes <- o
		}()
	}
	wg.Wait()
	close(outcomes)
	applied := 0
	for o := range outcomes {
		if o == inbox.Applied {
			applied++
		}
	}
	if n := count(t, db, "SELECT COUNT(*) FROM effect WHERE event_id = 'e6'"); applied != 1 || n != 1 {
		t.Fatalf("concurrent handling: %d applied, %d effects; want 1 and 1", applied, n)
	}
}
