//go:build integration

package kititest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestPruneNeverDeletesUnpublishedRows: a long-running transaction inserts
// an old outbox row first (lowest id), later transactions commit and are
// published, the relay stops, then the long one commits. prune (and its dry
// run) must leave every row in place, although the unpublished row's id is
// below published ones; once the relay has published it, prune deletes all.
func TestPruneNeverDeletesUnpublishedRows(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	path := itest.WriteConfig(t, cfg)
	rootEnv := []string{"KITITEST_ROOT_PW=" + devdb.RootPassword}
	prune := func(extra ...string) (int, string) {
		return runCLI(t, rootEnv, append([]string{"prune", "--config", path, "--older-than", "1h", "--batch", "2",
			"--wait", "2s", "--user", "root", "--password-env", "KITITEST_ROOT_PW", "--yes"}, extra...)...)
	}
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	w, err := outbox.New(s.Table(), outbox.WithColumns(outbox.Columns{EventID: "event_id", AggregateType: "aggregate_type",
		AggregateID: "aggregate_id", EventType: "event_type", Payload: "payload", Timestamp: "created_at"}))
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	ev := func(id string) outbox.Event {
		return outbox.Event{ID: id, AggregateType: "alarm", AggregateID: "device-1", Type: "AlarmCreated", Payload: []byte(`{}`), Timestamp: old}
	}
	long, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback() //nolint:errcheck
	if _, err := w.Write(ctx, long, ev("long-running")); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p1", "p2", "p3"} {
		tx, _ := db.BeginTx(ctx, nil)
		if _, err := w.Write(ctx, tx, ev(id)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := long.Commit(); err != nil {
		t.Fatal(err)
	}
	var longID, maxID int
	if err := db.QueryRow("SELECT (SELECT id FROM outbox WHERE event_id = 'long-running'), (SELECT MAX(id) FROM outbox)").Scan(&longID, &maxID); err != nil {
		t.Fatal(err)
	}
	if longID >= maxID {
		t.Fatalf("the long-running row has id %d, not below the published ones (max %d): the test proves nothing", longID, maxID)
	}

	for _, args := range [][]string{{"--dry-run"}, nil} {
		code, out := prune(args...)
		if code != 1 || !strings.Contains(out, "does not cover") {
			t.Fatalf("prune %v with the relay stopped behind a committed row: exit %d, want 1 naming the uncovered rows", args, code)
		}
		if n := count(t, db, "SELECT COUNT(*) FROM outbox"); n != 4 {
			t.Fatalf("prune %v deleted rows the relay has not published: %d of 4 left", args, n)
		}
	}

	relay = itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	code, out := prune("--dry-run")
	if code != 0 || !strings.Contains(out, "would delete 4 rows") {
		t.Fatalf("dry run after publication: exit %d", code)
	}
	code, out = prune()
	if code != 0 || !strings.Contains(out, "deleted 4 rows") {
		t.Fatalf("prune after publication: exit %d", code)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM outbox"); n != 0 {
		t.Fatalf("%d rows left after prune", n)
	}
	published := map[string]bool{}
	for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		published[r.ID] = true
	}
	for _, id := range []string{"long-running", "p1", "p2", "p3"} {
		if !published[id] {
			t.Errorf("%s was deleted but never published", id)
		}
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

// prune keeps a row whose dead-letter record was truncated. The failure
// guarded against: a row too large for its topic is dead-lettered; its
// dead-letter record is too large as well, so the relay sends it without
// the columns ("truncated": "the row stays in the outbox table; the headers
// say where"). The checkpoint is past it, so prune deletes it: after the
// fix (a larger max.message.bytes) dead-letter replay can no longer rebuild
// the event. It is lost, and the pending record blocks every later
// dead-letter replay.
func TestPruneKeepsTruncatedDeadLetterRow(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
	adm := kadm.NewClient(kgoClient(t, k.Brokers))
	small := map[string]*string{"max.message.bytes": kadm.StringPtr("2000")}
	for _, tp := range []string{cfg.Router.TopicPrefix + "big", cfg.Router.DeadLetterTopic} {
		if _, err := adm.CreateTopic(ctx, 1, -1, small, tp); err != nil {
			t.Fatal(err)
		}
	}
	path := itest.WriteConfig(t, cfg)
	db := openDB(t, s.Name)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	w, err := outbox.New(s.Table(), outbox.WithColumns(outbox.Columns{EventID: "event_id", AggregateType: "aggregate_type",
		AggregateID: "aggregate_id", EventType: "event_type", Payload: "payload", Timestamp: "created_at"}))
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := db.BeginTx(ctx, nil)
	if _, err := w.Write(ctx, tx, outbox.Event{ID: "big-1", AggregateType: "big", AggregateID: "d", Type: "X",
		Payload: []byte(`{"x":"` + strings.Repeat("x", 5000) + `"}`), Timestamp: time.Now().Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	code, out := runCLI(t, nil, "dead-letter", "list", "--config", path)
	if code != 0 || !strings.Contains(out, "event_id=big-1") {
		t.Fatalf("big-1 not dead-lettered: exit %d", code)
	}
	code, _ = runCLI(t, []string{"KITITEST_ROOT_PW=" + devdb.RootPassword}, "prune", "--config", path, "--older-than", "1h", "--wait", "20s",
		"--user", "root", "--password-env", "KITITEST_ROOT_PW", "--yes")
	t.Logf("prune exit %d", code)
	if n := count(t, db, "SELECT COUNT(*) FROM outbox WHERE event_id = 'big-1'"); n != 1 {
		t.Errorf("prune deleted big-1, a row that was never published to its topic and whose dead-letter record does not carry it")
	}
	// The fix: the topic takes large records now.
	if _, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kadm.StringPtr("1000000")}}, cfg.Router.TopicPrefix+"big"); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes"); code != 0 {
		t.Errorf("dead-letter replay after the fix: exit %d: %s", code, out)
	}
}

// prune with a batch above the placeholder limit deletes. The failure
// guarded against: --batch is accepted up to 100000, but the DELETE binds
// one placeholder per row and MySQL/MariaDB take at most 65,535 in one
// prepared statement: a large batch fails after the wait, deleting nothing.
func TestPruneBatchAbovePlaceholderLimitDeletes(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	if err := env.DB.Exec("INSERT INTO " + s.Table() + " (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) " +
		"SELECT CONCAT('e', seq), 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 2 HOUR FROM " + s.Name + ".seq_1_to_70000"); err != nil {
		t.Fatal(err)
	}
	path := itest.WriteConfig(t, cfg)
	// The relay has run (its checkpoint topic exists) and is stopped; the
	// position is moved to now, as if it had published the rows.
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, nil, "checkpoint", "set", "--config", path, "--to", "now", "--yes", "--force"); code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s", code, out)
	}
	code, out := runCLI(t, []string{"KITITEST_ROOT_PW=" + devdb.RootPassword}, "prune", "--config", path, "--older-than", "1h",
		"--batch", "70000", "--wait", "5s", "--user", "root", "--password-env", "KITITEST_ROOT_PW", "--yes")
	if code != 0 || !strings.Contains(out, "deleted 70000 rows") {
		t.Errorf("prune --batch 70000 (accepted: 1 to 100000): exit %d: %s", code, out)
	}
}

// prune spares a newer row with the same event id. The failure guarded
// against: prune selects candidates, waits for the checkpoint to cover
// them, then DELETEs "WHERE event_id IN (...)". On an outbox table whose
// event id is not unique (the outbox package tells applications to re-send
// an event with its original id; the article's and many existing tables
// have no unique key on it) the DELETE also removes a newer row with that
// id that committed while prune waited and that the relay has not
// published.
func TestPruneSparesNewerRowWithSameEventID(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox DROP INDEX uk_event_id"); err != nil {
		t.Fatal(err)
	}
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	w, err := outbox.New(s.Table(), outbox.WithColumns(outbox.Columns{EventID: "event_id", AggregateType: "aggregate_type",
		AggregateID: "aggregate_id", EventType: "event_type", Payload: "payload", Timestamp: "created_at"}))
	if err != nil {
		t.Fatal(err)
	}
	write := func(id string, at time.Time, payload string) {
		tx, _ := db.BeginTx(ctx, nil)
		if _, err := w.Write(ctx, tx, outbox.Event{ID: id, AggregateType: "alarm", AggregateID: "d", Type: "X", Payload: []byte(payload), Timestamp: at}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	write("x-1", time.Now().Add(-2*time.Hour), `{"v":1}`)
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	write("other", time.Now(), `{}`) // the relay is behind now
	covered := itest.Head(t, env.DB)
	done := make(chan string, 1)
	go func() {
		code, out := runCLI(t, []string{"KITITEST_ROOT_PW=" + devdb.RootPassword}, "prune", "--config", path, "--older-than", "1h",
			"--wait", "60s", "--user", "root", "--password-env", "KITITEST_ROOT_PW", "--yes")
		done <- fmt.Sprintf("exit %d: %s", code, out)
	}()
	time.Sleep(3 * time.Second)         // prune has selected x-1 and waits for the checkpoint
	write("x-1", time.Now(), `{"v":2}`) // the application re-sends x-1 (new row, not published yet)
	// The relay catches up to the head prune read, not yet past the re-send.
	if code, out := runCLI(t, nil, "checkpoint", "set", "--config", path, "--gtid", covered, "--yes", "--force"); code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s", code, out)
	}
	t.Logf("prune: %s", <-done)
	if n := count(t, db, "SELECT COUNT(*) FROM outbox WHERE event_id = 'x-1' AND payload = '{\"v\":2}'"); n != 1 {
		relay = itest.RunRelay(t, cfg)
		relay.WaitReady(t)
		itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
		n := 0
		for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
			if string(r.Value) == `{"v":2}` {
				n++
			}
		}
		t.Errorf("prune deleted the re-sent x-1 row, committed after its select and not published when deleted "+
			"(the relay published it later from the binlog, %d times; the table copy that replay and dead-letter replay read is gone)", n)
	}
}

// prune does not spin on rows whose event id is NULL. The failure guarded
// against: a candidate whose event id is NULL is read as "" and "DELETE ...
// IN (”)" deletes nothing; when a whole batch is such rows the same batch
// is selected again, forever.
func TestPruneNullEventIDDoesNotSpin(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ALTER TABLE outbox MODIFY event_id VARCHAR(64) NULL",
		"INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES " +
			"(NULL, 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 3 HOUR), ('ok-1', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 2 HOUR)"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if code, out := runCLI(t, nil, "checkpoint", "set", "--config", path, "--to", "now", "--yes", "--force"); code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.Binary, "prune", "--config", path, "--older-than", "1h", "--batch", "1", "--wait", "5s",
		"--user", "root", "--password-env", "KITITEST_ROOT_PW", "--yes")
	cmd.Env = append(os.Environ(), "KITITEST_ROOT_PW="+devdb.RootPassword)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Errorf("prune --batch 1 was still running after 20s (killed), ok-1 left: %d; output tail: %s", count(t, db, "SELECT COUNT(*) FROM outbox WHERE event_id = 'ok-1'"), tail(string(out), 300))
	} else {
		t.Logf("prune: %v: %s", err, out)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
