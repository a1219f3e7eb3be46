//go:build integration

package kititest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// Adversarial review of 6da8fc2 and 85b052d (replay reads TIMESTAMP
// columns in UTC "as the relay renders them", time ranges compared per
// column type).

// insertA24 inserts outbox rows with explicit time columns (id, ts,
// created_at; "" leaves ts NULL).
func insertA24(t *testing.T, db string, rows [][3]string) {
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

// A row read again must route to the record the relay made of it (the
// commit's own words: "a row read again must route to the same record").
// With a time column copied into a header (router.additional_fields), the
// relay renders TIMESTAMP(3)/DATETIME(3) from the binlog with the column's
// 3 digits ("10:00:00.000", "10:00:00.120"); replay reads the row through
// a prepared statement, whose binary result go-mysql renders with no
// fraction when it is zero and with 6 digits otherwise ("10:00:00",
// "10:00:00.120000"). The replayed record's headers differ from the
// original's, although the session is now in UTC.
func TestAttack24ReplayTimeColumnHeaderDiffersFromRelay(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN ts TIMESTAMP(3) NULL"); err != nil {
		t.Fatal(err)
	}
	cfg.Router.AdditionalFields = []config.AdditionalField{{Column: "ts", Placement: "header"}, {Column: "created_at", Placement: "header"}}
	path := itest.WriteConfig(t, cfg)
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	insertA24(t, s.Name, [][3]string{
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
// times never. Passes: the attack failed.
func TestAttack24ReplayRangesPerColumnTypeFractional(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN ts TIMESTAMP(3) NULL"); err != nil {
		t.Fatal(err)
	}
	if err := env.DB.Exec("SET GLOBAL time_zone = '+05:00'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DB.Exec("SET GLOBAL time_zone = 'SYSTEM'") })
	// The session of insertA24 is in +05:00: ts is given in local terms, as
	// created_at is; UTC instants 10:00:00.100, .600, 10:00:01.100.
	insertA24(t, s.Name, [][3]string{
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
