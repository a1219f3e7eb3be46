//go:build integration

package kititest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// Replay and time: replay reads TIMESTAMP columns in UTC "as the relay
// renders them", and compares time ranges per column type.

// insertTimeRows inserts outbox rows with explicit time columns (id, ts,
// created_at; "" leaves ts NULL).
func insertTimeRows(t *testing.T, db string, rows [][3]string) {
	t.Helper()
	d := openDB(t, db)
	for _, r := range rows {
		ts := any(nil)
		if r[1] != "" {
			ts = r[1]
		}
		if _, err := d.Exec("INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, ts, created_at) VALUES (?, 'alarm', 'd', 'X', '{}', ?, ?)",
			r[0], ts, r[2]); err != nil {
			t.Fatal(err)
		}
	}
}

// A replayed record's time-column header is the relay's. The failure
// guarded against: a row read again must route to the record the relay made
// of it (the commit's own words: "a row read again must route to the same
// record"). With a time column copied into a header
// (router.additional_fields), the relay renders TIMESTAMP(3)/DATETIME(3)
// from the binlog with the column's 3 digits ("10:00:00.000",
// "10:00:00.120"); replay reads the row through a prepared statement, whose
// binary result go-mysql renders with no fraction when it is zero and with
// 6 digits otherwise ("10:00:00", "10:00:00.120000"). The replayed record's
// headers differ from the original's, although the session is now in UTC.
func TestReplayTimeColumnHeaderMatchesRelay(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN ts TIMESTAMP(3) NULL"); err != nil {
		t.Fatal(err)
	}
	cfg.Router.AdditionalFields = []config.AdditionalField{{Column: "ts", Placement: "header"}, {Column: "created_at", Placement: "header"}}
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	insertTimeRows(t, s.Name, [][3]string{
		{"a24-zero", "2026-11-30 10:00:00.000", "2026-11-30 10:00:00.000"},
		{"a24-frac", "2026-11-30 10:00:00.120", "2026-11-30 10:00:00.120"},
	})
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, nil, "replay", "--config", path, "--event-id", "a24-zero,a24-frac", "--yes"); code != 0 || !strings.Contains(out, "published 2 records") {
		t.Fatalf("replay: exit %d: %s", code, out)
	}
	byID := map[string][]itest.Record{}
	for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm") {
		byID[r.ID] = append(byID[r.ID], r)
	}
	for _, id := range []string{"a24-zero", "a24-frac"} {
		recs := byID[id]
		if len(recs) != 2 {
			t.Fatalf("%s published %d times, want 2 (the relay's and the replay's)", id, len(recs))
		}
		orig, again := recs[0], recs[1]
		if _, ok := orig.Headers["replayed"]; ok {
			orig, again = again, orig
		}
		for _, h := range []string{"ts", "created_at"} {
			if orig.Headers[h] != again.Headers[h] {
				t.Errorf("%s: header %s: relay %q, replay %q: the replayed record is not the one the relay made of the row", id, h, orig.Headers[h], again.Headers[h])
			}
		}
	}
}

// --since/--until on a server in +05:00, against a TIMESTAMP(3) NULL
// column and a DATETIME(3) one (written in the server's local terms), with
// fractional bounds, each bound alone and both, in RFC 3339 and in server
// terms: each selects exactly the rows whose instant is in the range; NULL
// times never.
func TestReplayRangesPerColumnTypeFractional(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN ts TIMESTAMP(3) NULL"); err != nil {
		t.Fatal(err)
	}
	if err := env.DB.Exec("SET GLOBAL time_zone = '+05:00'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DB.Exec("SET GLOBAL time_zone = 'SYSTEM'") })
	// The session of insertTimeRows is in +05:00: ts is given in local terms, as
	// created_at is; UTC instants 10:00:00.100, .600, 10:00:01.100.
	insertTimeRows(t, s.Name, [][3]string{
		{"r1", "2026-11-30 15:00:00.100", "2026-11-30 15:00:00.100"},
		{"r2", "2026-11-30 15:00:00.600", "2026-11-30 15:00:00.600"},
		{"r3", "2026-11-30 15:00:01.100", "2026-11-30 15:00:01.100"},
		{"rnull", "", "2026-11-30 15:00:00.600"},
	})
	path := itest.WriteConfig(t, cfg)
	for _, col := range []string{"ts", "created_at"} {
		for _, c := range []struct {
			since, until string
			want         []string
		}{
			{"2026-11-30T10:00:00.5Z", "", []string{"r2", "r3"}},
			{"", "2026-11-30T10:00:00.6Z", []string{"r1"}},
			{"2026-11-30T10:00:00.100Z", "2026-11-30T10:00:01.1Z", []string{"r1", "r2"}},
			{"2026-11-30 15:00:00.5", "", []string{"r2", "r3"}},
			{"", "2026-11-30 15:00:00.6", []string{"r1"}},
			{"2026-11-30 15:00:00.100", "2026-11-30 15:00:01.1", []string{"r1", "r2"}},
		} {
			want := slices.Clone(c.want)
			if col == "created_at" && slices.Contains(want, "r2") {
				want = append(want, "rnull") // its created_at is r2's
			}
			args := []string{"replay", "--config", path, "--time-column", col, "--dry-run"}
			if c.since != "" {
				args = append(args, "--since", c.since)
			}
			if c.until != "" {
				args = append(args, "--until", c.until)
			}
			code, out := runCLI(t, nil, args...)
			var got []string
			for _, line := range strings.Split(out, "\n") {
				if id, _, ok := strings.Cut(line, "  topic="); ok {
					got = append(got, id)
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if code != 0 || !slices.Equal(got, want) {
				t.Errorf("%s --since %q --until %q: exit %d, selected %v, want %v", col, c.since, c.until, code, got, want)
			}
		}
	}
}

// An RFC 3339 --since/--until selects the right rows on a server not in
// UTC. The failure guarded against: replay turns an RFC 3339 time into UTC
// text and compares it with the time column, which the table default
// (CURRENT_TIMESTAMP) fills in the server's time zone. On a server not in
// UTC an absolute --since/--until selects the wrong rows: here the row
// written a moment ago is not found in [now-10m, now+10m).
func TestReplayRFC3339RangeOnNonUTCServer(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	if err := env.DB.Exec("SET GLOBAL time_zone = '+05:00'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DB.Exec("SET GLOBAL time_zone = 'SYSTEM'") })
	path := itest.WriteConfig(t, cfg)
	db := openDB(t, s.Name)
	ctx := context.Background()
	tx, _ := db.BeginTx(ctx, nil)
	if _, err := outbox.Write(ctx, tx, outbox.Event{ID: "tz-1", AggregateType: "alarm", AggregateID: "d", Type: "X", Payload: []byte(`{}`)}); err == nil {
		// outbox.Write targets the unqualified table "outbox" of the DSN's database.
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Fatal(err)
	}
	var created string
	_ = db.QueryRow("SELECT CAST(created_at AS CHAR) FROM outbox WHERE event_id = 'tz-1'").Scan(&created)
	now := time.Now().UTC()
	since, until := now.Add(-10*time.Minute).Format(time.RFC3339), now.Add(10*time.Minute).Format(time.RFC3339)
	code, out := runCLI(t, nil, "replay", "--config", path, "--since", since, "--until", until, "--dry-run")
	if code != 0 || !strings.Contains(out, "would publish 1 records") {
		t.Errorf("replay --since %s --until %s: the row written at %s (server time zone +05:00) was not selected: exit %d", since, until, created, code)
	}
}

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
