//go:build integration

package kititest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestWriterEndToEnd: events written with package outbox inside business
// transactions, into the article's table and into a Debezium-layout table
// made from `schema`'s DDL, are published exactly as written; a rolled-back
// transaction and a refused event publish nothing.
func TestWriterEndToEnd(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	dbz := s.Name + ".dbz"
	ddl, err := outbox.CreateTable(outbox.MariaDB, outbox.TableSpec{Table: dbz, Columns: outbox.DebeziumColumns, Debezium: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(strings.TrimSuffix(strings.TrimSpace(ddl), ";")); err != nil {
		t.Fatalf("the DDL of schema does not run on MariaDB: %v\n%s", err, ddl)
	}
	cfg.Source.Tables = append(cfg.Source.Tables, dbz)
	cfg.Router.Tables = map[string]config.RouterConfig{dbz: {Preset: "debezium"}}
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)

	w, err := outbox.New(s.Table())
	if err != nil {
		t.Fatal(err)
	}
	wd, err := outbox.New(dbz, outbox.WithColumns(outbox.DebeziumColumns))
	if err != nil {
		t.Fatal(err)
	}
	alarm := func(i int) outbox.Event {
		return outbox.Event{AggregateType: "alarm", AggregateID: fmt.Sprintf("device-%d", i%2), Type: "AlarmCreated",
			Payload: []byte(fmt.Sprintf(`{"deviceId": "device-%d",  "temperature": %d}`, i%2, 90+i))}
	}
	want := map[string]string{} // event id -> payload
	// 1. business row + one event, then a batch of three in one statement.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO alarm_record (device_id, level, temp, seq) VALUES ('device-1', 'CRITICAL', 91, 1)"); err != nil {
		t.Fatal(err)
	}
	ids, err := w.Write(ctx, tx, alarm(1))
	if err != nil {
		t.Fatal(err)
	}
	batch := []outbox.Event{alarm(2), alarm(3), alarm(4)}
	batch[1].ID = "caller-chosen-id"
	ids2, err := w.Write(ctx, tx, batch...)
	if err != nil {
		t.Fatal(err)
	}
	if ids2[1] != "caller-chosen-id" || len(ids[0]) != 36 {
		t.Fatalf("ids %v %v: want a UUIDv7 and the caller's id kept", ids, ids2)
	}
	// A refused event (payload not JSON) sends nothing and leaves tx usable.
	bad := alarm(5)
	bad.Payload = []byte(`{"deviceId": `)
	if _, err := w.Write(ctx, tx, alarm(6), bad); !errors.Is(err, outbox.ErrInvalidEvent) {
		t.Fatalf("invalid payload: err = %v, want ErrInvalidEvent", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for i, id := range append(ids, ids2...) {
		want[id] = string(alarm(i + 1).Payload)
	}
	// 2. rolled back: never published.
	tx, _ = db.BeginTx(ctx, nil)
	rolled, err := w.Write(ctx, tx, alarm(7))
	if err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback()
	// 3. the Debezium-layout table.
	tx, _ = db.BeginTx(ctx, nil)
	ids3, err := wd.Write(ctx, tx, alarm(8), alarm(9))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	want[ids3[0]], want[ids3[1]] = string(alarm(8).Payload), string(alarm(9).Payload)

	if n := count(t, db, "SELECT COUNT(*) FROM outbox"); n != 4 {
		t.Fatalf("outbox holds %d rows, want 4 (refused and rolled-back events must not be there)", n)
	}
	var got []itest.Record
	itest.Eventually(t, time.Minute, func() error {
		got = itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix)
		if len(got) < len(want) {
			return fmt.Errorf("%d of %d records", len(got), len(want))
		}
		return nil
	})
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for _, r := range got {
		p, ok := want[r.ID]
		if !ok {
			t.Errorf("unexpected record id %s (rolled back: %v)", r.ID, rolled)
			continue
		}
		if string(r.Value) != p {
			t.Errorf("record %s value %q, want the payload exactly as written %q", r.ID, r.Value, p)
		}
		if r.Topic != cfg.Router.TopicPrefix+"alarm" || !strings.HasPrefix(r.Key, "device-") || r.Headers["type"] != "AlarmCreated" {
			t.Errorf("record %s: topic %s key %s type %q", r.ID, r.Topic, r.Key, r.Headers["type"])
		}
		delete(want, r.ID)
	}
	if len(want) > 0 {
		t.Errorf("not published: %v", slices.Sorted(maps.Keys(want)))
	}
}

// Write splits a batch within the placeholder limit whatever the number of
// Extra columns. The failure guarded against: write splits a batch at 65535
// / (columns + 8) rows, room for at most 8 Extra columns; with more the
// INSERT exceeds MySQL's 65,535 placeholders and the documented "split only
// past 65,535 placeholders" fails instead.
func TestWriterSplitsBatchWithManyExtraColumns(t *testing.T) {
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
