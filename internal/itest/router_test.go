//go:build integration

package itest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
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
