//go:build integration

package kititest

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// TestInboxRefusesInexactMarkerTable: a consumed-event table created by
// an earlier version (VARCHAR(64), the database's _ci PAD SPACE collation)
// is refused with ErrMarkerColumn before anything is inserted, and after
// the documented migration to VARBINARY(255) an id longer than the column
// is refused with ErrEventIDTooLong, never cut.
func TestInboxRefusesInexactMarkerTable(t *testing.T) {
	name := env.Unique("fix16in")
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

// TestDeadLetterReplaySkip: a pending dead-letter record that cannot be
// rebuilt (truncated, its row gone) stops dead-letter replay with an error
// naming --skip; --skip EVENT_ID marks it replayed without publishing and
// the records after it are replayed; a --skip naming no pending record is
// a usage error.
func TestDeadLetterReplaySkip(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	path := itest.WriteConfig(t, cfg)
	dlq := "outbox-relay.dead-letter." + cfg.Name
	cl := kgoClient(t, k.Brokers)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, dlq); err != nil {
		t.Fatal(err)
	}
	hdr := func(id string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: "error", Value: []byte("x")}, {Key: "source.table", Value: []byte(s.Table())},
			{Key: "source.gtid", Value: []byte("0-1-1")}, {Key: "id", Value: []byte(id)}}
	}
	gone := &kgo.Record{Topic: dlq, Headers: append(hdr("gone-1"), kgo.RecordHeader{Key: "truncated", Value: []byte("true")})}
	ok := &kgo.Record{Topic: dlq, Headers: hdr("ok-1"),
		Value: []byte(`{"event_id":"ok-1","aggregate_type":"alarm","aggregate_id":"d","event_type":"X","payload":"{}"}`)}
	if err := cl.ProduceSync(ctx, gone, ok).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes"); code != 1 || !strings.Contains(out, "--skip gone-1") {
		t.Fatalf("replay of an unrebuildable record: exit %d, want 1 and a hint naming --skip gone-1: %s", code, out)
	}
	if code, _ := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes", "--skip", "nope"); code != 2 {
		t.Errorf("--skip of an id nothing pending has: exit %d, want 2", code)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes", "--skip", "gone-1"); code != 0 || !strings.Contains(out, "replayed 1 records (1 skipped") {
		t.Fatalf("replay --skip gone-1: exit %d: %s", code, out)
	}
	var ids []string
	for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm") {
		ids = append(ids, r.ID)
	}
	if len(ids) != 1 || ids[0] != "ok-1" {
		t.Errorf("published %v, want [ok-1]", ids)
	}
	if code, out := runCLI(t, nil, "dead-letter", "list", "--config", path); code != 0 || !strings.Contains(out, "dead-letter: 0 records listed") {
		t.Errorf("records still pending after the replay: exit %d: %s", code, out)
	}
}

// TestPruneCompositePrimaryKey: prune pages (dry run) and deletes by a
// primary key of two columns, in batches smaller than the rows, and
// refuses a table without a primary key, deleting nothing.
func TestPruneCompositePrimaryKey(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ALTER TABLE outbox DROP PRIMARY KEY, ADD PRIMARY KEY (id, event_id)",
		"INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES " +
			"('c-1', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 3 HOUR), ('c-2', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 3 HOUR), " +
			"('c-3', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 2 HOUR), ('c-4', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 2 HOUR), " +
			"('c-5', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 2 HOUR), ('new', 'alarm', 'd', 'X', '{}', NOW(3))"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := runCLI(t, nil, "checkpoint", "set", "--config", path, "--to", "now", "--yes", "--force"); code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s", code, out)
	}
	pw := []string{"KITITEST_ROOT_PW=" + devdb.RootPassword}
	args := []string{"prune", "--config", path, "--older-than", "1h", "--batch", "2", "--wait", "5s", "--user", "root", "--password-env", "KITITEST_ROOT_PW", "--yes"}
	if code, out := runCLI(t, pw, append(args, "--dry-run")...); code != 0 || !strings.Contains(out, "would delete 5 rows") {
		t.Errorf("dry run: exit %d, want 5 rows: %s", code, out)
	}
	if code, out := runCLI(t, pw, args...); code != 0 || !strings.Contains(out, "deleted 5 rows") {
		t.Errorf("prune: exit %d, want 5 rows: %s", code, out)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM outbox"); n != 1 {
		t.Errorf("%d rows left, want 1 (the new one)", n)
	}
	if _, err := db.Exec("INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES ('c-6', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 2 HOUR)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("ALTER TABLE outbox MODIFY id BIGINT NOT NULL, DROP PRIMARY KEY"); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, pw, args...); code == 0 || !strings.Contains(out, "no primary key") {
		t.Errorf("table without a primary key: exit %d, want a refusal naming the primary key: %s", code, out)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM outbox"); n != 2 {
		t.Errorf("%d rows left after the refusal, want 2", n)
	}
}
