//go:build integration

package itest

// Row images a writing session logs without every column: the server runs
// binlog_row_image=FULL (the start-up check passes) and an application
// session sets MINIMAL or NOBLOB for itself.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// defaultsOutbox is an outbox whose columns an INSERT may leave to their
// defaults: under MINIMAL those are not in the row image (created_at, a
// CURRENT_TIMESTAMP default, and the AUTO_INCREMENT id are); note, a TEXT
// column, is not in a NOBLOB image unless the statement sets it.
const defaultsOutbox = `CREATE TABLE %s.outbox (
	id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	event_id       VARCHAR(64)  NOT NULL,
	aggregate_type VARCHAR(64)  NOT NULL DEFAULT 'order',
	aggregate_id   VARCHAR(64)  NOT NULL,
	event_type     VARCHAR(64)  NOT NULL DEFAULT 'Created',
	payload        VARCHAR(255) NOT NULL DEFAULT '{}',
	note           TEXT         NULL,
	created_at     DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
	UNIQUE KEY uk_event_id (event_id)
) ENGINE=InnoDB`

// defaultsPipeline starts a broker and a relay capturing a fresh
// defaultsOutbox, ready; it returns them with the configuration's file.
func defaultsPipeline(t *testing.T, tweak func(*config.Config)) (*Kafka, *Schema, config.Config, string, *InProcess) {
	t.Helper()
	k := StartKafka(t)
	s := env.NewSchema(t)
	if err := env.DB.Exec("DROP TABLE "+s.Table(), fmt.Sprintf(defaultsOutbox, s.Name)); err != nil {
		t.Fatal(err)
	}
	cfg := env.RelayConfig(k, s.Table())
	if tweak != nil {
		tweak(&cfg)
	}
	path := WriteConfig(t, cfg)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	return k, s, cfg, path, r
}

// defaultedInsert is an INSERT into table that leaves event_type, payload
// and note to their defaults: a MINIMAL image lacks them.
func defaultedInsert(table, id, agg string) string {
	return fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id) VALUES ('%s', 'order', '%s')", table, id, agg)
}

// sessionTx commits stmts in one transaction of a session whose
// binlog_row_image is image ("" leaves the server's) and returns its GTID.
func sessionTx(t *testing.T, db *devdb.Server, image string, stmts ...string) string {
	t.Helper()
	c, err := db.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	all := []string{"BEGIN"}
	if image != "" {
		all = []string{"SET SESSION binlog_row_image=" + image, "BEGIN"}
	}
	for _, q := range append(append(all, stmts...), "COMMIT") {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return LastGTID(t, c)
}

// insertAll is an INSERT into table that gives every column but the
// auto-increment id a value.
func insertAll(table, id, agg, payload string) string {
	return fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload, note, created_at) "+
		"VALUES ('%s', 'order', '%s', 'Placed', '%s', NULL, NOW(3))", table, id, agg, payload)
}

// checkPartialImageStop checks that err is the stop at gtid for table's row
// lacking the columns missing: ErrPartialRowImage, exit 78, counted as a
// source configuration error, the message naming binlog_row_image, the
// GTID, the table, the columns and the way past it.
func checkPartialImageStop(t *testing.T, r *InProcess, err error, gtid, table string, missing ...string) {
	t.Helper()
	if !errors.Is(err, binlog.ErrPartialRowImage) {
		t.Fatalf("relay stopped with %v, want ErrPartialRowImage", err)
	}
	if code := relay.ExitCode(err); code != relay.ExitConfig {
		t.Fatalf("exit code %d, want %d", code, relay.ExitConfig)
	}
	if n := testutil.ToFloat64(r.Metrics.Errors.WithLabelValues("source_config")); n < 1 {
		t.Fatalf("outbox_relay_errors_total{kind=\"source_config\"} = %v", n)
	}
	for _, want := range append([]string{"binlog_row_image", "transaction " + gtid + " ", table, "binlog_row_image=FULL",
		"checkpoint skip --gtid " + gtid}, missing...) {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %q", err, want)
		}
	}
}

// checkpointBefore checks that cfg's committed checkpoint holds before (the
// transaction just before the stop) and not stopped.
func checkpointBefore(t *testing.T, cfg config.Config, before, stopped string) {
	t.Helper()
	cp, err := Store(t, cfg).Load(context.Background(), cfg.Name)
	if err != nil || !ContainsGTID(cp, before) || ContainsGTID(cp, stopped) {
		t.Fatalf("checkpoint %+v (%v): want it to hold %s and not %s", cp, err, before, stopped)
	}
}

// A session with binlog_row_image=MINIMAL inserts an outbox row that leaves
// event_type, payload and note to their defaults: the image lacks them, and the
// relay stops at that transaction (exit 78, named), after publishing the
// transactions before it exactly once, among them a MINIMAL session's
// insert that gave every column (its image is whole). Nothing of the
// stopped transaction, or after it, is published; the checkpoint is just
// before it. The way past it that the error names (FULL, replay the rows,
// checkpoint skip) then publishes everything once. Without the check the
// relay published the row as a tombstone with no type header, stayed ready
// and moved its checkpoint past it.
func TestSessionRowImageMinimalStopsAtItsTransaction(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg, path, r := defaultsPipeline(t, nil)
	sessionTx(t, env.DB, "", insertAll(s.Table(), "full-1", "a", `{"seq":1}`), insertAll(s.Table(), "full-2", "b", `{"seq":1}`))
	before := sessionTx(t, env.DB, "MINIMAL", insertAll(s.Table(), "minimal-whole", "a", `{"seq":2}`))
	stopped := sessionTx(t, env.DB, "MINIMAL", defaultedInsert(s.Table(), "minimal-defaults", "a"))
	sessionTx(t, env.DB, "", insertAll(s.Table(), "full-after", "b", `{"seq":2}`))

	checkPartialImageStop(t, r, r.StoppedWith(t), stopped, s.Table(), "lacks column(s) event_type, payload, note:")
	checkpointBefore(t, cfg, before, stopped)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	rep := Compare(t, s, recs)
	slices.Sort(rep.Missing)
	if len(rep.Duplicates)+len(rep.Unexpected)+len(rep.OutOfOrder)+len(rep.WrongKey) > 0 ||
		!slices.Equal(rep.Missing, []string{"full-after", "minimal-defaults"}) {
		t.Fatalf("want every row before the stop once and nothing after: %s", rep)
	}
	for _, rec := range recs {
		if rec.Headers["type"] != "Placed" {
			t.Fatalf("record %s: type header %q, want Placed", rec.ID, rec.Headers["type"])
		}
	}

	// The way past it the error names (the writing session is gone).
	if out, errOut, code := env.CLI(t, "replay", "--config", path, "--event-id", "minimal-defaults", "--yes"); code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := env.CLI(t, "checkpoint", "skip", "--config", path, "--gtid", stopped, "--yes"); code != 0 {
		t.Fatalf("checkpoint skip: exit %d\n%s%s", code, out, errOut)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	recs = Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	if rep := Compare(t, s, recs); !rep.OK() || rep.Received != rep.Expected {
		t.Fatalf("after the fix: %s", rep)
	}
	for _, rec := range recs {
		if rec.ID == "minimal-defaults" && (rec.Headers["type"] != "Created" || string(rec.Value) != "{}") {
			t.Fatalf("replayed row: type %q, value %q; want the table's Created and its payload", rec.Headers["type"], rec.Value)
		}
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// The other shapes of a partial image: a MINIMAL insert that leaves the
// column the topic comes from to its default is named as the row image,
// not as "aggregate_type is NULL"; a NOBLOB session leaves out a TEXT
// column the statement did not set, although the router reads no such
// column (any column of the row: a dead letter or another router setting
// would carry the NULL). A FULL session leaving every default publishes
// the defaults.
func TestSessionRowImagePartialInsertsStop(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, tc := range []struct {
		name, image, insert string
		missing             []string // nil: published
	}{
		{"minimal-aggregate-type", "MINIMAL", "INSERT INTO %s (event_id, aggregate_id, event_type, payload, note) VALUES ('r', 'a', 'Placed', '{}', NULL)",
			[]string{"lacks column(s) aggregate_type:"}},
		{"noblob-text-column", "NOBLOB", "INSERT INTO %s (event_id, aggregate_id, payload) VALUES ('r', 'a', '{}')", []string{"lacks column(s) note:"}},
		{"noblob-text-column-set", "NOBLOB", "INSERT INTO %s (event_id, aggregate_id, note) VALUES ('r', 'a', 'n')", nil},
		{"full-defaults", "FULL", "INSERT INTO %s (event_id, aggregate_id) VALUES ('r', 'a')", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := StartKafka(t)
			s := env.NewSchema(t)
			if err := env.DB.Exec("DROP TABLE "+s.Table(), fmt.Sprintf(defaultsOutbox, s.Name)); err != nil {
				t.Fatal(err)
			}
			cfg := env.RelayConfig(k, s.Table())
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			before := sessionTx(t, env.DB, "", insertAll(s.Table(), "first", "a", "{}"))
			gtid := sessionTx(t, env.DB, tc.image, fmt.Sprintf(tc.insert, s.Table()))
			if tc.missing == nil {
				WaitCheckpoint(t, cfg, gtid, time.Minute)
				recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
				if rep := Compare(t, s, recs); !rep.OK() || rep.Received != 2 {
					t.Fatalf("%s", rep)
				}
				for _, rec := range recs {
					if rec.ID == "r" && (rec.Headers["type"] != "Created" || string(rec.Value) != "{}" || rec.Topic != cfg.Router.TopicPrefix+"order") {
						t.Fatalf("row r: topic %s, type %q, value %q; want the defaults", rec.Topic, rec.Headers["type"], rec.Value)
					}
				}
				return
			}
			checkPartialImageStop(t, r, r.StoppedWith(t), gtid, s.Table(), tc.missing...)
			if strings.Contains(r.Err().Error(), "is NULL") {
				t.Fatalf("the stop names a NULL: %v", r.Err())
			}
			checkpointBefore(t, cfg, before, gtid)
			if recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix); len(recs) != 1 || recs[0].ID != "first" {
				t.Fatalf("published %+v, want the first row only", recs)
			}
		})
	}
}

// A GTID the tests read (LastGTID) keeps its value while another session
// reads its own: go-mysql hands a closed result's buffer to the next query
// (of any connection, the in-process relay's too), and the text GetString
// had returned from it changed with it (the row-image tests compared the
// relay's stop with the next transaction's GTID, "before" or "stopped", and
// failed now and then although the relay had named the right one).
func TestLastGTIDKeepsItsValueAfterLaterQueries(t *testing.T) {
	BrokerOnlyAsSink(t)
	s := env.NewSchema(t)
	if err := env.DB.Exec("DROP TABLE "+s.Table(), fmt.Sprintf(defaultsOutbox, s.Name)); err != nil {
		t.Fatal(err)
	}
	// One P: go-mysql's results are pooled per P, so the next query takes
	// the buffer the last one closed.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i := range 10 {
		var conns [2]*client.Conn
		for j := range conns {
			c, err := env.DB.Root()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Execute(insertAll(s.Table(), fmt.Sprintf("g-%d-%d", i, j), "a", "{}")); err != nil {
				t.Fatal(err)
			}
			conns[j] = c
		}
		first := LastGTID(t, conns[0])
		was := strings.Clone(first)
		second := LastGTID(t, conns[1])
		if first != was || first == second {
			t.Fatalf("the first session's GTID read %s, now %s; the second's %s", was, first, second)
		}
	}
}
