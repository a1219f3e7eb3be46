//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/router"
)

// A Debezium user switches by changing one line (preset: debezium); the
// envelope format embeds a JSON payload as JSON; extra columns become
// headers. Checked record by record.
func TestDebeziumPresetAndEnvelope(t *testing.T) {
	k := StartKafka(t)
	db := env.NewSchema(t).Name // creates the relay user too
	if err := env.DB.Exec(fmt.Sprintf(`CREATE TABLE %s.outboxevent (
		id VARCHAR(36) NOT NULL PRIMARY KEY, aggregatetype VARCHAR(255) NOT NULL, aggregateid VARCHAR(255) NOT NULL,
		type VARCHAR(255) NOT NULL, payload JSON, tenant VARCHAR(32) NOT NULL)`, db)); err != nil {
		t.Fatal(err)
	}
	cfg := env.RelayConfig(k, db+".outboxevent")
	cfg.Router.Preset = "debezium"
	cfg.Router.EventIDColumn, cfg.Router.AggregateTypeColumn, cfg.Router.AggregateIDColumn = "id", "aggregatetype", "aggregateid"
	cfg.Router.EventTypeColumn, cfg.Router.PayloadColumn = "type", "payload"
	cfg.Router.ValueFormat = "envelope"
	cfg.Router.AdditionalFields = nil
	r := RunRelay(t, WithHeader(cfg, "tenant"))
	r.WaitReady(t)
	rows := [][]string{
		{"0f6a1c2e-0001", "order", "o-1", "OrderCreated", `{"total": 12.5, "items": ["a", "b"]}`, "acme"},
		{"0f6a1c2e-0002", "customer", "c-9", "CustomerMoved", `{"city": "Zürich"}`, "globex"},
	}
	for _, row := range rows {
		if err := env.DB.Exec(fmt.Sprintf("INSERT INTO %s.outboxevent VALUES ('%s', '%s', '%s', '%s', '%s', '%s')",
			db, row[0], row[1], row[2], row[3], row[4], row[5])); err != nil {
			t.Fatal(err)
		}
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	if len(recs) != len(rows) {
		t.Fatalf("%d records, want %d", len(recs), len(rows))
	}
	byID := map[string]Record{}
	for _, rec := range recs {
		byID[rec.ID] = rec
	}
	for _, row := range rows {
		rec, ok := byID[row[0]]
		if !ok {
			t.Fatalf("no record with id %s", row[0])
		}
		if rec.Topic != cfg.Router.TopicPrefix+row[1] || rec.Key != row[2] || rec.Headers["type"] != row[3] || rec.Headers["tenant"] != row[5] {
			t.Fatalf("record %s: topic %s key %s headers %v", row[0], rec.Topic, rec.Key, rec.Headers)
		}
		var env struct {
			EventID, EventType, AggregateType, AggregateID, OccurredAt string
			Payload                                                    json.RawMessage
		}
		if err := json.Unmarshal(rec.Value, &env); err != nil {
			t.Fatalf("record %s: envelope is not JSON: %v: %s", row[0], err, rec.Value)
		}
		if env.EventID != row[0] || env.EventType != row[3] || env.AggregateType != row[1] || env.AggregateID != row[2] || env.OccurredAt == "" {
			t.Fatalf("record %s: envelope %+v", row[0], env)
		}
		if string(env.Payload) != row[4] || env.Payload[0] != '{' {
			t.Fatalf("record %s: payload %s, want the stored JSON %s embedded as JSON", row[0], env.Payload, row[4])
		}
	}
}

// badRowCases are rows the router or Kafka cannot take, each with the words
// its error must contain.
var badRowCases = []struct {
	name, values, reason string
}{
	{"empty key", "'b-key', 'alarm', '', 'X', '{}', 0", `"aggregate_id" is empty`},
	{"topic Kafka refuses", "'b-topic', 'al arm', 'd', 'X', '{}', 0", "Kafka allows"},
	{"partition out of range", "'b-part', 'alarm', 'd', 'X', '{}', 7", "partition 7"},
	{"record over max.message.bytes", "'b-big', 'big', 'd', 'X', REPEAT('x', 5000), 0", "max.message.bytes"},
	{"NULL payload with null_payload error", "'b-null', 'alarm', 'd', 'X', NULL, 0", `"payload" is NULL`},
}

// policyTable makes a table for the bad-row tests: a latin1 payload column
// and a shard column placed as the partition; the topic for aggregate type
// "big" takes at most 2,000 bytes.
func policyTable(t *testing.T, k *Kafka) (*Schema, config.Config) {
	t.Helper()
	s := env.NewSchema(t)
	if err := env.DB.Exec(fmt.Sprintf(`CREATE TABLE %s.events (
		id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL, aggregate_type VARCHAR(64) NOT NULL,
		aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64) NOT NULL, payload TEXT CHARACTER SET latin1, shard INT NOT NULL)`, s.Name)); err != nil {
		t.Fatal(err)
	}
	cfg := env.RelayConfig(k, s.Name+".events")
	cfg.Router.AdditionalFields = []config.AdditionalField{{Column: "shard", Placement: "partition"}}
	cfg.Router.NullPayload = "error"
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1,
		map[string]*string{"max.message.bytes": kadm.StringPtr("2000")}, cfg.Router.TopicPrefix+"big"); err != nil {
		t.Fatal(err)
	}
	return s, cfg
}

func insertEvent(t *testing.T, s *Schema, values string) {
	t.Helper()
	if err := env.DB.Exec(fmt.Sprintf("INSERT INTO %s.events (event_id, aggregate_type, aggregate_id, event_type, payload, shard) VALUES (%s)", s.Name, values)); err != nil {
		t.Fatal(err)
	}
}

// on_error fail: each bad row stops the relay, naming the reason, with the
// checkpoint before it.
func TestBadRowsFailPolicy(t *testing.T) {
	k := StartKafka(t)
	for _, bc := range badRowCases {
		t.Run(bc.name, func(t *testing.T) {
			s, cfg := policyTable(t, k)
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			before := loadCheckpoint(t, cfg)
			insertEvent(t, s, bc.values)
			_ = r.StoppedWith(t)
			if !errors.Is(r.Err(), router.ErrBadRow) || !strings.Contains(r.Err().Error(), bc.reason) {
				t.Fatalf("error %v, want a bad row saying %q", r.Err(), bc.reason)
			}
			if cp := loadCheckpoint(t, cfg); cp.GTIDSet != before.GTIDSet {
				t.Fatalf("checkpoint moved past the bad row: %s -> %s", before.GTIDSet, cp.GTIDSet)
			}
		})
	}
}

// on_error dead-letter: bad rows go to the dead-letter topic in the same
// transaction, with headers naming the error, table and GTID; good rows are
// published (latin1 text as UTF-8, the shard column as the partition); an
// UPDATE is counted and skipped; delete-after-insert publishes the insert.
func TestBadRowsDeadLetterPolicy(t *testing.T) {
	k := StartKafka(t)
	s, cfg := policyTable(t, k)
	cfg.Router.OnError = "dead-letter"
	cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertEvent(t, s, "'good-1', 'alarm', 'dev-1', 'X', CONVERT('{\"city\":\"Zürich\"}' USING latin1), 2")
	gtids := map[string]string{}
	for _, bc := range badRowCases {
		insertEvent(t, s, bc.values)
		gtids[bc.reason] = Head(t, env.DB)
	}
	if err := env.DB.Exec("BEGIN",
		fmt.Sprintf("INSERT INTO %s.events (event_id, aggregate_type, aggregate_id, event_type, payload, shard) VALUES ('good-2', 'alarm', 'dev-2', 'X', '{}', 1)", s.Name),
		fmt.Sprintf("DELETE FROM %s.events WHERE event_id = 'good-2'", s.Name),
		"COMMIT",
		fmt.Sprintf("UPDATE %s.events SET event_type = 'Y' WHERE event_id = 'good-1'", s.Name)); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	var dead []Record
	good := map[string]Record{}
	for _, rec := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		if rec.Topic == cfg.Router.DeadLetterTopic {
			dead = append(dead, rec)
		} else {
			good[rec.ID] = rec
		}
	}
	if len(good) != 2 || good["good-1"].Partition != 2 || good["good-2"].Partition != 1 {
		t.Fatalf("published %+v, want good-1 on partition 2 and good-2 on partition 1", good)
	}
	if string(good["good-1"].Value) != `{"city":"Zürich"}` {
		t.Fatalf("latin1 payload arrived as %q, want UTF-8", good["good-1"].Value)
	}
	if len(dead) != len(badRowCases) {
		t.Fatalf("%d dead letters, want %d", len(dead), len(badRowCases))
	}
	byID := map[string]Record{}
	for _, rec := range dead {
		byID[rec.ID] = rec
	}
	for _, bc := range badRowCases {
		id := strings.Trim(strings.SplitN(bc.values, ",", 2)[0], "'")
		h := byID[id].Headers
		if !strings.Contains(h["error"], bc.reason) || h["source.table"] != s.Name+".events" || h["source.gtid"] != gtids[bc.reason] {
			t.Errorf("dead letter %s headers %v, want error %q, table and gtid %s", id, h, bc.reason, gtids[bc.reason])
		}
	}
	if got := testutil.ToFloat64(r.Metrics.Events.WithLabelValues(cfg.Router.DeadLetterTopic, "dead_letter")); int(got) != len(badRowCases) {
		t.Fatalf("dead_letter events counted %v", got)
	}
	if got := testutil.ToFloat64(r.Metrics.InvalidOps.WithLabelValues(s.Name+".events", "update")); got != 1 {
		t.Fatalf("invalid update ops counted %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.Metrics.InvalidOps.WithLabelValues(s.Name+".events", "delete_after_insert")); got != 1 {
		t.Fatalf("delete-after-insert counted %v, want 1", got)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Payload column types: BLOB and VARBINARY arrive as the stored bytes, a
// utf8mb4 TEXT as its text, a NULL payload as a tombstone.
func TestPayloadColumnTypes(t *testing.T) {
	k := StartKafka(t)
	s := env.NewSchema(t)
	for _, typ := range []string{"BLOB", "VARBINARY(64)", "TEXT CHARACTER SET utf8mb4"} {
		tbl := fmt.Sprintf("p_%d", len(typ))
		if err := env.DB.Exec(fmt.Sprintf(`CREATE TABLE %s.%s (event_id VARCHAR(64) NOT NULL, aggregate_type VARCHAR(64) NOT NULL,
			aggregate_id VARCHAR(64) NOT NULL, payload %s)`, s.Name, tbl, typ)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := env.RelayConfig(k, s.Name+".p_4", s.Name+".p_13", s.Name+".p_26")
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := env.DB.Exec(
		fmt.Sprintf("INSERT INTO %s.p_4 VALUES ('blob', 'bin', 'k', 0x00FF10)", s.Name),
		fmt.Sprintf("INSERT INTO %s.p_13 VALUES ('varbinary', 'bin', 'k', 0xCAFE)", s.Name),
		fmt.Sprintf("INSERT INTO %s.p_26 VALUES ('text', 'txt', 'k', 'Grüße 🚨')", s.Name),
		fmt.Sprintf("INSERT INTO %s.p_26 VALUES ('null', 'txt', 'k', NULL)", s.Name),
	); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	got := map[string][]byte{}
	for _, rec := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		got[rec.ID] = rec.Value
	}
	want := map[string][]byte{"blob": {0x00, 0xff, 0x10}, "varbinary": {0xca, 0xfe}, "text": []byte("Grüße 🚨"), "null": nil}
	for id, w := range want {
		v, ok := got[id]
		if !ok || string(v) != string(w) || (w == nil) != (v == nil) {
			t.Fatalf("%s: value %q (present %v), want %q", id, v, ok, w)
		}
	}
}
