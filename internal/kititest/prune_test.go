//go:build integration

package kititest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
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
