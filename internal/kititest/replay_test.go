//go:build integration

package kititest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReplayAndDeadLetter: replay publishes chosen rows again with their
// original event id and a replayed header; a row dead-lettered because its
// partition did not exist is listed, and after the fix (more partitions)
// dead-letter replay publishes it to its routed topic and partition, once.
func TestReplayAndDeadLetter(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN part INT NOT NULL DEFAULT 0"); err != nil {
		t.Fatal(err)
	}
	cfg.Router.OnError = "dead-letter"
	cfg.Router.AdditionalFields = []config.AdditionalField{{Column: "part", Placement: "partition"}}
	path := itest.WriteConfig(t, cfg)
	if code, out := runCLI(t, nil, "dead-letter", "list", "--config", path); code != 0 || !strings.Contains(out, "0 records listed") {
		t.Fatalf("dead-letter list before any dead letter (no topic yet): exit %d", code)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes"); code != 0 || !strings.Contains(out, "nothing pending") {
		t.Fatalf("dead-letter replay before any dead letter: exit %d", code)
	}
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)

	w, err := outbox.New(s.Table())
	if err != nil {
		t.Fatal(err)
	}
	ev := func(id string, part int) outbox.Event {
		return outbox.Event{ID: id, AggregateType: "alarm", AggregateID: "device-" + id, Type: "AlarmCreated",
			Payload: []byte(fmt.Sprintf(`{"alarm": %q}`, id)), Extra: map[string]any{"part": part}}
	}
	tx, _ := db.BeginTx(ctx, nil)
	if _, err := w.Write(ctx, tx, ev("g1", 0), ev("bad1", 7), ev("g2", 1)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	topic := cfg.Router.TopicPrefix + "alarm"
	byID := func() map[string][]itest.Record {
		m := map[string][]itest.Record{}
		for _, r := range itest.Consume(t, k.Brokers, topic) {
			m[r.ID] = append(m[r.ID], r)
		}
		return m
	}
	if got := byID(); len(got["g1"]) != 1 || len(got["g2"]) != 1 || len(got["bad1"]) != 0 {
		t.Fatalf("before replay: %v", got)
	}

	// replay by event id, and a dry run by aggregate type.
	if code, out := runCLI(t, nil, "replay", "--config", path, "--aggregate-type", "alarm", "--aggregate-id", "device-g2", "--dry-run"); code != 0 || !strings.Contains(out, "would publish 1 records") {
		t.Fatalf("replay dry run: exit %d", code)
	}
	day := 24 * time.Hour
	since, until := time.Now().Add(-day).UTC().Format(time.RFC3339), time.Now().Add(day).UTC().Format(time.RFC3339)
	if code, out := runCLI(t, nil, "replay", "--config", path, "--event-id", "g1,g2", "--since", since, "--until", until, "--dry-run"); code != 0 || !strings.Contains(out, "would publish 2 records") {
		t.Fatalf("replay dry run by ids and time range: exit %d", code)
	}
	// An explicit id outside the window is named as such: nothing to do is
	// an error when the operator named what to do.
	if code, out := runCLI(t, nil, "replay", "--config", path, "--event-id", "g1", "--since", until, "--dry-run"); code != 1 || !strings.Contains(out, "created since "+until+" has event id g1") {
		t.Fatalf("replay dry run with a range after the rows: exit %d, want 1 naming the window", code)
	}
	if code, out := runCLI(t, nil, "replay", "--config", path, "--event-id", "g1,g2", "--max-rows", "1", "--dry-run"); code != 1 || !strings.Contains(out, "more than 1 rows match") {
		t.Fatalf("replay over --max-rows: exit %d, want 1", code)
	}
	if code, _ := runCLI(t, nil, "replay", "--config", path); code != 2 {
		t.Fatalf("replay without a filter: exit %d, want 2", code)
	}
	if code, _ := runCLI(t, nil, "replay", "--config", path, "--event-id", "g1"); code != 2 {
		t.Fatalf("replay without --yes and no terminal: exit %d, want 2", code)
	}
	if code, out := runCLI(t, nil, "replay", "--config", path, "--event-id", "g1", "--yes"); code != 0 || !strings.Contains(out, "published 1 records") {
		t.Fatalf("replay: exit %d", code)
	}
	got := byID()
	if len(got["g1"]) != 2 || len(got["g2"]) != 1 {
		t.Fatalf("after replay of g1: g1 %d times, g2 %d times; want 2 and 1", len(got["g1"]), len(got["g2"]))
	}
	orig, again := got["g1"][0], got["g1"][1]
	if again.Headers["replayed"] == "" || orig.Headers["replayed"] != "" || string(again.Value) != string(orig.Value) ||
		again.Key != orig.Key || again.Partition != orig.Partition {
		t.Fatalf("replayed record %+v differs from the original %+v beyond its replayed header", again, orig)
	}

	// dead-letter list, the fix, replay.
	code, out := runCLI(t, nil, "dead-letter", "list", "--config", path, "--json")
	if code != 0 {
		t.Fatalf("dead-letter list: exit %d", code)
	}
	var list []struct {
		EventID  string `json:"event_id"`
		Table    string `json:"table"`
		Error    string `json:"error"`
		Replayed bool   `json:"replayed"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &list); err != nil || len(list) != 1 {
		t.Fatalf("dead-letter list --json: %d entries, %v; want one array of 1", len(list), err)
	}
	if listed := list[0]; listed.EventID != "bad1" || listed.Table != s.Table() ||
		!strings.Contains(listed.Error, "partition 7") || listed.Replayed {
		t.Fatalf("dead-letter list: %+v", listed)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes"); code != 1 || !strings.Contains(out, "nothing was replayed") {
		t.Fatalf("dead-letter replay before the fix: exit %d, want 1", code)
	}
	adm := kadm.NewClient(kgoClient(t, k.Brokers))
	if _, err := adm.CreatePartitions(ctx, 8, topic); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes"); code != 0 || !strings.Contains(out, "replayed 1 records") {
		t.Fatalf("dead-letter replay after the fix: exit %d", code)
	}
	got = byID()
	if len(got["bad1"]) != 1 || got["bad1"][0].Partition != 7 || got["bad1"][0].Headers["replayed"] == "" || string(got["bad1"][0].Value) != `{"alarm": "bad1"}` {
		t.Fatalf("dead-lettered row after replay: %+v", got["bad1"])
	}
	// Replayed records are not pending any more: a second replay does nothing.
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes"); code != 0 || !strings.Contains(out, "nothing pending") {
		t.Fatalf("second dead-letter replay: exit %d", code)
	}
	if code, out := runCLI(t, nil, "dead-letter", "list", "--config", path, "--all"); code != 0 || !strings.Contains(out, "replayed  ") {
		t.Fatalf("dead-letter list --all: exit %d", code)
	}
	if n := len(byID()["bad1"]); n != 1 {
		t.Fatalf("bad1 published %d times, want 1", n)
	}
}

func kgoClient(t testing.TB, brokers []string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Replay keeps the written order of one transaction's events. The failure
// guarded against: replay orders by the time column only. Two events of one
// aggregate written in one transaction (one multi-row INSERT: the same
// created_at) on a Debezium-layout table (primary key = event id, as
// `schema` prints for preset debezium) are replayed in event-id order, not
// in the order they were written and published.
func TestReplayKeepsOneTransactionsEventOrder(t *testing.T) {
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
