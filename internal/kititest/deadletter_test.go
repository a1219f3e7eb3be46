//go:build integration

package kititest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestAttack16InboxDistinctEventsTakenAsDuplicates: the consumed_event
// table of inbox.DDL has no collation of its own, so it takes the
// database's (utf8mb4_general_ci / latin1_swedish_ci: case-insensitive,
// PAD SPACE), and event_id is VARCHAR(64). Distinct event ids that the
// relay publishes distinctly then collide on the marker's PRIMARY KEY and
// the second event is skipped as "already done": it is never applied.
func TestAttack16InboxDistinctEventsTakenAsDuplicates(t *testing.T) {
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

// TestAttack16ConsumerStopsOnTopicNotCreatedYet: the demo's and the docs'
// consumer subscribes to outbox.event.<type>, which the relay creates on
// the first event. A consumer started first should wait, not fail.
func TestAttack16ConsumerStopsOnTopicNotCreatedYet(t *testing.T) {
	k := itest.StartKafka(t)
	name := env.Unique("atk16nt")
	if err := env.DB.Exec("CREATE DATABASE "+name, inbox.DDL(name+".consumed_event")); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, name)
	c, err := inbox.NewConsumer(&inbox.Store{DB: db, Name: "n"}, name, []string{"outbox.event." + name}, kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = c.Run(ctx, func(context.Context, *sql.Tx, *kgo.Record) error { return nil })
	if err != nil {
		t.Errorf("consumer of a topic not created yet stopped for good within 20s: %v", err)
	}
}

// TestAttack16ReplayReordersOneTransactionsEvents: replay orders by the
// time column only. Two events of one aggregate written in one
// transaction (one multi-row INSERT: the same created_at) on a
// Debezium-layout table (primary key = event id, as `schema` prints for
// preset debezium) are replayed in event-id order, not in the order they
// were written and published.
func TestAttack16ReplayReordersOneTransactionsEvents(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	ddl, err := outbox.CreateTable(outbox.MariaDB, outbox.TableSpec{Table: s.Name + ".outboxevent", Columns: outbox.DebeziumColumns, Debezium: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.DB.Exec(strings.TrimSuffix(strings.TrimSpace(ddl[strings.Index(ddl, "CREATE"):]), ";")); err != nil {
		t.Fatal(err)
	}
	cfg.Source.Tables = []string{s.Name + ".outboxevent"}
	cfg.Router.Preset = "debezium"
	cfg.Router.EventIDColumn, cfg.Router.AggregateTypeColumn, cfg.Router.AggregateIDColumn, cfg.Router.EventTypeColumn, cfg.Router.PayloadColumn = "id", "aggregatetype", "aggregateid", "type", "payload"
	path := itest.WriteConfig(t, cfg)
	db := openDB(t, s.Name)
	w, err := outbox.New(s.Name+".outboxevent", outbox.WithColumns(outbox.DebeziumColumns))
	if err != nil {
		t.Fatal(err)
	}
	tx, _ := db.BeginTx(ctx, nil)
	// Random (v4) ids, as Debezium users have: the second sorts first.
	if _, err := w.Write(ctx, tx,
		outbox.Event{ID: "f3a1c9e0-0000-4000-8000-000000000001", AggregateType: "order", AggregateID: "o-1", Type: "OrderCreated", Payload: []byte(`{"step":1}`)},
		outbox.Event{ID: "0b7d2a44-0000-4000-8000-000000000002", AggregateType: "order", AggregateID: "o-1", Type: "OrderCancelled", Payload: []byte(`{"step":2}`)},
	); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	code, out := runCLI(t, nil, "replay", "--config", path, "--aggregate-type", "order", "--aggregate-id", "o-1", "--yes")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s", code, out)
	}
	var got []string
	for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"order") {
		got = append(got, string(r.Value))
	}
	if len(got) != 2 || got[0] != `{"step":1}` {
		t.Errorf("replayed order of aggregate o-1: %v; written (and published by the relay) as step 1 then step 2", got)
	}
}

// TestAttack16DeadLetterSharedTopic: router.dead_letter_topic is a free
// setting; two pipelines (two shards of one service, same schema) that set
// the same topic each replay the other's dead letters: the event is
// published twice, once by a pipeline whose database never had the row.
// And a record from a pipeline with another table blocks every replay.
func TestAttack16DeadLetterSharedTopic(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	cfg.Router.DeadLetterTopic = "shared.dead-letter." + s.Name
	cfgA := cfg
	cfgB := cfg
	cfgB.Name = cfg.Name + "-shard-b"
	pathA := itest.WriteConfig(t, cfgA)
	pathB := itest.WriteConfig(t, cfgB)
	cl := kgoClient(t, k.Brokers)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, cfg.Router.DeadLetterTopic); err != nil {
		t.Fatal(err)
	}
	// Shard B's relay dead-lettered its row b-1 (headers as the relay writes them).
	value := `{"id":7,"event_id":"b-1","aggregate_type":"alarm","aggregate_id":"dev-b","event_type":"X","payload":"{\"shard\":\"b\"}"}`
	r := &kgo.Record{Topic: cfg.Router.DeadLetterTopic, Value: []byte(value), Headers: []kgo.RecordHeader{
		{Key: "error", Value: []byte("partition 7 of a topic with 1")}, {Key: "source.table", Value: []byte(s.Table())},
		{Key: "source.gtid", Value: []byte("0-2-99")}, {Key: "id", Value: []byte("b-1")}}}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Adjusted (fix16): without a pipeline header on dead-letter records,
	// a record whose row is in neither pipeline's table (here both
	// pipelines read one test server, so b-1 cannot be put into B's table
	// only) is claimed by neither on a configured, possibly shared, topic;
	// shard B's operator takes it with --from-record. On two real servers
	// B finds b-1 in its own table (prune keeps pending dead-lettered rows)
	// and needs no flag.
	for _, run := range [][]string{{"--config", pathA}, {"--config", pathB, "--from-record"}} {
		args := append([]string{"dead-letter", "replay", "--yes"}, run...)
		if code, out := runCLI(t, nil, args...); code != 0 {
			t.Fatalf("dead-letter replay %v: exit %d: %s", run, code, out)
		}
	}
	n := 0
	for _, rec := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm") {
		if rec.ID == "b-1" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("shard B's dead-lettered event b-1 was published %d times by the two pipelines' dead-letter replays, want 1", n)
	}

	// A dead letter from a pipeline of another table, then one of ours.
	other := &kgo.Record{Topic: cfg.Router.DeadLetterTopic}
	other.Headers = []kgo.RecordHeader{{Key: "error", Value: []byte("x")}, {Key: "source.table", Value: []byte("billing.outbox")},
		{Key: "source.gtid", Value: []byte("0-3-5")}, {Key: "id", Value: []byte("bill-1")}}
	other.Value = []byte(`{"event_id":"bill-1","aggregate_type":"invoice","aggregate_id":"i","event_type":"X","payload":"{}"}`)
	mine := &kgo.Record{Topic: cfg.Router.DeadLetterTopic, Value: []byte(strings.ReplaceAll(value, "b-1", "a-1")), Headers: []kgo.RecordHeader{
		{Key: "error", Value: []byte("x")}, {Key: "source.table", Value: []byte(s.Table())}, {Key: "source.gtid", Value: []byte("0-1-5")}, {Key: "id", Value: []byte("a-1")}}}
	if err := cl.ProduceSync(ctx, other, mine).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", pathA, "--yes"); code != 0 {
		t.Errorf("dead-letter replay of pipeline A is blocked for good by another pipeline's record on the shared topic: exit %d: %s", code, out)
	}
	// Added (fix16): the ignored records are not pending for A any more
	// (a run that only ignores commits the group's offsets too).
	if code, out := runCLI(t, nil, "dead-letter", "list", "--config", pathA); code != 0 || !strings.Contains(out, "dead-letter: 0 records listed") {
		t.Errorf("after A's replay ignored the other pipelines' records they are still pending for A: exit %d: %s", code, out)
	}
}

// TestAttack16PruneDeletesTruncatedDeadLetterRow: a row too large for its
// topic is dead-lettered; its dead-letter record is too large as well, so
// the relay sends it without the columns ("truncated": "the row stays in
// the outbox table; the headers say where"). The checkpoint is past it, so
// prune deletes it: after the fix (a larger max.message.bytes) dead-letter
// replay can no longer rebuild the event. It is lost, and the pending
// record blocks every later dead-letter replay.
func TestAttack16PruneDeletesTruncatedDeadLetterRow(t *testing.T) {
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

// TestAttack16ReplayRFC3339OnNonUTCServer: replay turns an RFC 3339 time
// into UTC text and compares it with the time column, which the table
// default (CURRENT_TIMESTAMP) fills in the server's time zone. On a server
// not in UTC an absolute --since/--until selects the wrong rows: here the
// row written a moment ago is not found in [now-10m, now+10m).
func TestAttack16ReplayRFC3339OnNonUTCServer(t *testing.T) {
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

// TestAttack16PruneBatchOverPlaceholderLimit: --batch is accepted up to
// 100000, but the DELETE binds one placeholder per row and MySQL/MariaDB
// take at most 65,535 in one prepared statement: a large batch fails
// after the wait, deleting nothing.
func TestAttack16PruneBatchOverPlaceholderLimit(t *testing.T) {
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

// TestAttack16PruneDeletesByNonUniqueEventID: prune selects candidates,
// waits for the checkpoint to cover them, then DELETEs "WHERE event_id IN
// (...)". On an outbox table whose event id is not unique (the outbox
// package tells applications to re-send an event with its original id;
// the article's and many existing tables have no unique key on it) the
// DELETE also removes a newer row with that id that committed while prune
// waited and that the relay has not published.
func TestAttack16PruneDeletesByNonUniqueEventID(t *testing.T) {
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

// TestAttack16PruneSpinsOnNullEventID: a candidate whose event id is NULL
// is read as "" and "DELETE ... IN (”)" deletes nothing; when a whole
// batch is such rows the same batch is selected again, forever.
func TestAttack16PruneSpinsOnNullEventID(t *testing.T) {
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

// TestAttack16WriterExtraColumnsOverflowPlaceholders: Write splits a batch
// at 65535 / (columns + 8) rows, room for at most 8 Extra columns; with
// more the INSERT exceeds MySQL's 65,535 placeholders and the documented
// "split only past 65,535 placeholders" fails instead.
func TestAttack16WriterExtraColumnsOverflowPlaceholders(t *testing.T) {
	s := env.NewSchema(t)
	db := openDB(t, s.Name)
	extra := map[string]any{}
	for i := range 12 {
		c := fmt.Sprintf("x%d", i)
		if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN " + c + " VARCHAR(16) NULL"); err != nil {
			t.Fatal(err)
		}
		extra[c] = "v"
	}
	w, err := outbox.New(s.Table())
	if err != nil {
		t.Fatal(err)
	}
	evs := make([]outbox.Event, 5041)
	for i := range evs {
		evs[i] = outbox.Event{AggregateType: "alarm", AggregateID: "d", Type: "X", Payload: []byte(`{}`), Extra: extra}
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := w.Write(ctx, tx, evs...); err != nil {
		t.Errorf("write %d events with %d Extra columns: %v", len(evs), len(extra), err)
	}
}

// TestAttack16DeadLetterReplayRunTwice: two dead-letter replays run at the
// same time (a retried CI job, two operators) both read the same pending
// records before either commits the replay group's offsets; the second
// transaction fences the first only if they overlap at the producer, so
// the record can be published twice although "a replayed record is not
// pending any more".
func TestAttack16DeadLetterReplayRunTwice(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	path := itest.WriteConfig(t, cfg)
	dlq := "outbox-relay.dead-letter." + cfg.Name
	cl := kgoClient(t, k.Brokers)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, dlq); err != nil {
		t.Fatal(err)
	}
	dup := 0
	for round := range 5 {
		id := fmt.Sprintf("dl-%d", round)
		value := fmt.Sprintf(`{"event_id":%q,"aggregate_type":"alarm","aggregate_id":"d","event_type":"X","payload":"{}"}`, id)
		r := &kgo.Record{Topic: dlq, Value: []byte(value), Headers: []kgo.RecordHeader{{Key: "error", Value: []byte("x")},
			{Key: "source.table", Value: []byte(s.Table())}, {Key: "source.gtid", Value: []byte("0-1-1")}, {Key: "id", Value: []byte(id)}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		outs := make(chan string, 2)
		for range 2 {
			go func() {
				cmd := exec.Command(env.Binary, "dead-letter", "replay", "--config", path, "--yes")
				out, err := cmd.CombinedOutput()
				outs <- fmt.Sprintf("%v: %s", err, out)
			}()
		}
		t.Logf("round %d:\n%s\n%s", round, <-outs, <-outs)
		n := 0
		for _, rec := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm") {
			if rec.ID == id {
				n++
			}
		}
		if n > 1 {
			dup++
		}
	}
	if dup > 0 {
		t.Errorf("%d of 5 dead-lettered records were published twice by two concurrent dead-letter replays", dup)
	}
}
