//go:build integration

package kititest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestReplayTimestampColumnOnNonUTCServer: the relay renders a TIMESTAMP
// column from the binlog in UTC; replay reads the row with SQL, where a
// TIMESTAMP is shown in the session's zone. On a server in +05:00 with
// router.timestamp_column a TIMESTAMP, the replayed record must carry the
// original's timestamp (not one five hours off), and --since/--until select
// the row both as RFC 3339 and in the server's local terms.
func TestReplayTimestampColumnOnNonUTCServer(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN ts TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)"); err != nil {
		t.Fatal(err)
	}
	if err := env.DB.Exec("SET GLOBAL time_zone = '+05:00'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DB.Exec("SET GLOBAL time_zone = 'SYSTEM'") })
	cfg.Router.TimestampColumn = "ts"
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)

	ctx := context.Background()
	w, err := outbox.New(s.Table())
	if err != nil {
		t.Fatal(err)
	}
	db = openDB(t, s.Name) // a session opened after SET GLOBAL: +05:00
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ctx, tx, outbox.Event{ID: "tz-1", AggregateType: "alarm", AggregateID: "d", Type: "X", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var ms int64
	var local string
	if err := db.QueryRow("SELECT CAST(ROUND(UNIX_TIMESTAMP(ts) * 1000) AS SIGNED), CAST(ts AS CHAR) FROM outbox WHERE event_id = 'tz-1'").Scan(&ms, &local); err != nil {
		t.Fatal(err)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}

	now := time.Now().UTC()
	localAt, err := time.Parse("2006-01-02 15:04:05.000", local)
	if err != nil {
		t.Fatalf("server's local ts %q: %v", local, err)
	}
	for _, r := range []struct{ what, since, until string }{
		{"RFC 3339", now.Add(-10 * time.Minute).Format(time.RFC3339), now.Add(10 * time.Minute).Format(time.RFC3339)},
		{"server local time", localAt.Add(-time.Minute).Format(time.DateTime), localAt.Add(time.Minute).Format(time.DateTime)},
	} {
		code, out := runCLI(t, nil, "replay", "--config", path, "--since", r.since, "--until", r.until, "--dry-run")
		if code != 0 || !strings.Contains(out, "would publish 1 records") {
			t.Errorf("replay --since %s --until %s (%s): the row with ts %s (+05:00) not selected: exit %d: %s", r.since, r.until, r.what, local, code, out)
		}
	}
	if code, out := runCLI(t, nil, "replay", "--config", path, "--event-id", "tz-1", "--yes"); code != 0 || !strings.Contains(out, "published 1 records") {
		t.Fatalf("replay: exit %d: %s", code, out)
	}
	var got []itest.Record
	for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm") {
		if r.ID == "tz-1" {
			got = append(got, r)
		}
	}
	if len(got) != 2 {
		t.Fatalf("tz-1 published %d times, want 2 (the relay's and the replay's)", len(got))
	}
	want := time.UnixMilli(ms).UTC()
	for i, r := range got {
		if !r.Timestamp.Equal(want) {
			t.Errorf("record %d (replayed %q): timestamp %s, want the row's ts %s (%s in +05:00)", i, r.Headers["replayed"], r.Timestamp.UTC(), want, local)
		}
	}
}
