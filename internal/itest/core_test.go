//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/router"
)

var env *Env

func TestMain(m *testing.M) { os.Exit(Main(m, &env)) }

// Several writers, some transactions rolled back: every committed outbox row
// arrives once on its topic, with key and id header, value exactly as
// stored, and per-aggregate order equal to commit order.
func TestCommittedRowsArriveOnce(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)

	committed, err := s.Write(context.Background(), WriteOptions{Writers: 4, Transactions: 150, Devices: 8, RollbackRate: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	if len(committed) == 0 || len(committed) == 600 {
		t.Fatalf("want some committed and some rolled back transactions, got %d committed of 600", len(committed))
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	rep := Compare(t, s, recs)
	if !rep.OK() || rep.Expected != len(committed) {
		t.Fatalf("%s (writers committed %d)", rep, len(committed))
	}
	payloads, err := env.DB.Query("SELECT event_id, payload, UNIX_TIMESTAMP(created_at) FROM " + s.Table())
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string][]string{}
	for _, p := range payloads {
		byID[p[0]] = p
	}
	for _, rec := range recs {
		if want := cfg.Router.TopicPrefix + "alarm"; rec.Topic != want {
			t.Fatalf("record %s on topic %s, want %s", rec.ID, rec.Topic, want)
		}
		if got, want := string(rec.Value), byID[rec.ID][1]; got != want {
			t.Fatalf("record %s value %q, want the stored payload %q", rec.ID, got, want)
		}
		if rec.Headers["type"] != "AlarmCreated" {
			t.Fatalf("record %s header type %q, want AlarmCreated", rec.ID, rec.Headers["type"])
		}
		var created float64
		fmt.Sscan(byID[rec.ID][2], &created)
		if d := rec.Timestamp.Sub(time.Unix(int64(created), 0)); d < -time.Second || d > 5*time.Second {
			t.Fatalf("record %s timestamp %s is %s away from its commit", rec.ID, rec.Timestamp, d)
		}
	}
	if got := testutil.ToFloat64(r.Metrics.Events.WithLabelValues(cfg.Router.TopicPrefix+"alarm", "published")); int(got) != len(committed) {
		t.Fatalf("outbox_relay_events_total = %v, want %d", got, len(committed))
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// A restart with no new outbox rows publishes nothing new.
func TestRestartWithoutWritesPublishesNothing(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 50}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	before := Consume(t, k.Brokers, cfg.Router.TopicPrefix)

	r = RunRelay(t, cfg)
	r.WaitReady(t)
	// A business-only transaction after the restart: once the checkpoint
	// covers it, the restarted relay has read everything after its position.
	if err := env.DB.Exec("INSERT INTO " + s.Name + ".alarm_record (device_id, level, temp, seq) VALUES ('x', 'INFO', 1, 0)"); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	after := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	if len(after) != len(before) || len(before) != 100 {
		t.Fatalf("records before restart %d, after %d; want 100 both", len(before), len(after))
	}
	if rep := Compare(t, s, after); !rep.OK() {
		t.Fatal(rep)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Other tables, and UPDATE/DELETE anywhere, publish nothing.
func TestOnlyOutboxInsertsArePublished(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	db := s.Name
	err := env.DB.Exec(
		// a table shaped like the outbox but not captured
		"CREATE TABLE "+db+".outbox_copy LIKE "+db+".outbox",
		"INSERT INTO "+db+".outbox_copy (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('copy-1', 'alarm', 'd', 'X', '{}')",
		"INSERT INTO "+db+".alarm_record (device_id, level, temp, seq) VALUES ('d', 'INFO', 1, 1)",
		"UPDATE "+db+".alarm_record SET temp = 2",
		"DELETE FROM "+db+".alarm_record",
		"INSERT INTO "+db+".outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('keep-1', 'alarm', 'd', 'X', '{\"a\":1}')",
		"UPDATE "+db+".outbox SET event_type = 'Y' WHERE event_id = 'keep-1'",
		"INSERT INTO "+db+".outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('gone-1', 'alarm', 'd', 'X', '{\"a\":2}')",
		"DELETE FROM "+db+".outbox WHERE event_id = 'gone-1'",
	)
	if err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.ID)
	}
	// gone-1 was committed by its INSERT: it is an event, even though a later
	// transaction deleted the row.
	if strings.Join(ids, ",") != "keep-1,gone-1" {
		t.Fatalf("published %v, want [keep-1 gone-1]", ids)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Two outbox tables in two databases, one relay.
func TestTwoOutboxTables(t *testing.T) {
	k := StartKafka(t)
	a, b := env.NewSchema(t), env.NewSchema(t)
	cfg := env.RelayConfig(k, a.Table(), b.Table())
	// per-table settings: b's events go under their own prefix
	cfg.Router.Tables = map[string]config.RouterConfig{b.Table(): {TopicPrefix: cfg.Router.TopicPrefix + "b."}}
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	ctx := context.Background()
	if _, err := a.Write(ctx, WriteOptions{Writers: 2, Transactions: 40, AggregateType: "alarm"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Write(ctx, WriteOptions{Writers: 2, Transactions: 30, AggregateType: "order"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	perTopic := map[string]int{}
	var ra, rb []Record
	for _, r := range recs {
		perTopic[r.Topic]++
		if strings.HasPrefix(r.ID, a.Name+"-") {
			ra = append(ra, r)
		} else {
			rb = append(rb, r)
		}
	}
	if perTopic[cfg.Router.TopicPrefix+"alarm"] != 80 || perTopic[cfg.Router.TopicPrefix+"b.order"] != 60 {
		t.Fatalf("records per topic %v, want 80 alarm and 60 b.order", perTopic)
	}
	if rep := Compare(t, a, ra); !rep.OK() {
		t.Fatal(rep)
	}
	if rep := Compare(t, b, rb); !rep.OK() {
		t.Fatal(rep)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Heartbeat: with no outbox rows, checkpoint-only transactions still move the
// position forward, and publish nothing.
func TestHeartbeatAdvancesCheckpoint(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	first := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	for i := 0; i < 20; i++ {
		if err := env.DB.Exec("INSERT INTO " + s.Name + ".alarm_record (device_id, level, temp, seq) VALUES ('x', 'INFO', 1, 0)"); err != nil {
			t.Fatal(err)
		}
	}
	cp := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if cp.GTIDSet == first.GTIDSet || !cp.Time.After(first.Time) || cp.Events != 0 {
		t.Fatalf("checkpoint %+v after business-only writes, first %+v", cp, first)
	}
	if recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix); len(recs) != 0 {
		t.Fatalf("published %d records without outbox rows", len(recs))
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// source.start without a checkpoint: earliest replays what the server still
// has; an explicit GTID set starts right after it; now skips the past.
func TestStartPositions(t *testing.T) {
	k := StartKafka(t)
	for _, tc := range []struct {
		name, want string
	}{
		{"earliest", "old-1,old-2,new"},
		{"gtid", "old-2,new"},
		{"now", "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := startServer(t, nil)
			insert := func(id string) {
				t.Helper()
				if err := db.Exec("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('" + id + "', 'alarm', 'd', 'X', '{}')"); err != nil {
					t.Fatal(err)
				}
			}
			insert("old-1")
			middle := Head(t, db)
			insert("old-2")
			cfg := env.RelayConfig(k, "app.outbox")
			cfg.Source.Hosts = []string{db.Addr}
			cfg.Source.Start = tc.name
			if tc.name == "gtid" {
				cfg.Source.Start = middle
			}
			cfg.Log.ProgressInterval = 20 * time.Millisecond
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			insert("new")
			WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
			var ids []string
			for _, rec := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
				ids = append(ids, rec.ID)
			}
			if got := strings.Join(ids, ","); got != tc.want {
				t.Fatalf("start %q published %s, want %s; logs:\n%s", cfg.Source.Start, got, tc.want, r.Logs())
			}
			Eventually(t, time.Minute, func() error {
				if !strings.Contains(r.Logs(), `"message":"progress"`) {
					return fmt.Errorf("no progress line in the log yet")
				}
				return nil
			})
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A row the router cannot handle stops the relay with an error naming the
// table, event_id and GTID; the checkpoint stays before it and nothing of its
// transaction is published.
func TestBadRowStopsWithoutAdvancing(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := env.DB.Exec(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('good-1', 'alarm', 'd', 'X', '{}')", s.Table())); err != nil {
		t.Fatal(err)
	}
	before := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	err := env.DB.Exec("BEGIN",
		fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('good-2', 'alarm', 'd', 'X', '{}')", s.Table()),
		fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('bad-1', 'alarm', '', 'X', '{}')", s.Table()),
		"COMMIT")
	if err != nil {
		t.Fatal(err)
	}
	badGTID := Head(t, env.DB)
	_ = r.StoppedWith(t)
	msg := fmt.Sprint(r.Err())
	if !errors.Is(r.Err(), router.ErrBadRow) || !strings.Contains(msg, s.Table()) || !strings.Contains(msg, `"bad-1"`) || !strings.Contains(msg, badGTID) {
		t.Fatalf("error %q, want a bad row naming %s, bad-1 and %s", msg, s.Table(), badGTID)
	}
	if cp := loadCheckpoint(t, cfg); cp.GTIDSet != before.GTIDSet {
		t.Fatalf("checkpoint moved from %s to %s past the bad row", before.GTIDSet, cp.GTIDSet)
	}
	var ids []string
	for _, rec := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		ids = append(ids, rec.ID)
	}
	if strings.Join(ids, ",") != "good-1" {
		t.Fatalf("published %v, want only good-1 (good-2 shares the bad row's transaction)", ids)
	}
}
