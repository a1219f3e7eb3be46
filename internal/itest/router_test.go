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
	BrokerOnlyAsSink(t)
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
// its error must contain; tweak adjusts the configuration the case needs.
var badRowCases = []struct {
	name, values, reason string
	tweak                func(*config.Config)
}{
	{"empty key", "'b-key', 'alarm', '', 'X', '{}', 0", `"aggregate_id" is empty`, nil},
	{"NULL route value", "'b-route', 'alarm', 'd', NULL, '{}', 0", `"event_type" is NULL`, func(c *config.Config) {
		c.Router.AggregateTypeColumn = "event_type" // nullable in this table
		c.Router.EventTypeColumn = ""
	}},
	{"topic Kafka refuses", "'b-topic', 'al arm', 'd', 'X', '{}', 0", "Kafka allows", nil},
	{"partition out of range", "'b-part', 'alarm', 'd', 'X', '{}', 7", "partition 7", nil},
	{"record over max.message.bytes", "'b-big', 'big', 'd', 'X', REPEAT('x', 5000), 0", "max.message.bytes", nil},
	{"NULL payload with null_payload error", "'b-null', 'alarm', 'd', 'X', NULL, 0", `"payload" is NULL`, nil},
	{"invalid JSON where the envelope needs JSON", "'b-json', 'alarm', 'd', 'X', 'not json', 0", "not valid JSON",
		func(c *config.Config) { c.Router.ValueFormat = "envelope" }},
	{"configured column missing", "'b-col', 'alarm', 'd', 'X', '{}', 0", `"region" is missing`,
		func(c *config.Config) {
			c.Router.AdditionalFields = append(c.Router.AdditionalFields, config.AdditionalField{Column: "region", Placement: "header"})
		}},
}

// policyTable makes a table for the bad-row tests: a latin1 payload column
// and a shard column placed as the partition; the topic for aggregate type
// "big" takes at most 2,000 bytes.
func policyTable(t *testing.T, k *Kafka) (*Schema, config.Config) {
	t.Helper()
	s := env.NewSchema(t)
	if err := env.DB.Exec(fmt.Sprintf(`CREATE TABLE %s.events (
		id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL, aggregate_type VARCHAR(64) NOT NULL,
		aggregate_id VARCHAR(64) NOT NULL, event_type VARCHAR(64), payload TEXT CHARACTER SET latin1, shard INT NOT NULL)`, s.Name)); err != nil {
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
// checkpoint before it. on_error dead-letter: the row goes to the dead-letter
// topic in the same transaction, its headers naming the error, the table and
// the GTID, and the relay goes on.
func TestBadRowPolicies(t *testing.T) {
	k := StartKafka(t)
	for _, bc := range badRowCases {
		t.Run("fail/"+bc.name, func(t *testing.T) {
			s, cfg := policyTable(t, k)
			if bc.tweak != nil {
				bc.tweak(&cfg)
			}
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			before := loadCheckpoint(t, cfg)
			insertEvent(t, s, bc.values)
			err := r.StoppedWith(t)
			if !errors.Is(err, router.ErrBadRow) || !strings.Contains(err.Error(), bc.reason) {
				t.Fatalf("error %v, want a bad row saying %q", err, bc.reason)
			}
			if cp := loadCheckpoint(t, cfg); cp.GTIDSet != before.GTIDSet {
				t.Fatalf("checkpoint moved past the bad row: %s -> %s", before.GTIDSet, cp.GTIDSet)
			}
		})
		t.Run("dead-letter/"+bc.name, func(t *testing.T) {
			s, cfg := policyTable(t, k)
			if bc.tweak != nil {
				bc.tweak(&cfg)
			}
			cfg.Router.OnError = "dead-letter"
			cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			insertEvent(t, s, bc.values)
			gtid := Head(t, env.DB)
			WaitCheckpoint(t, cfg, gtid, time.Minute)
			recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
			if len(recs) != 1 || recs[0].Topic != cfg.Router.DeadLetterTopic {
				t.Fatalf("records %+v, want one dead letter", recs)
			}
			h := recs[0].Headers
			if !strings.Contains(h["error"], bc.reason) || h["source.table"] != s.Name+".events" || h["source.gtid"] != gtid {
				t.Fatalf("dead letter headers %v, want error %q, table and gtid %s", h, bc.reason, gtid)
			}
			if got := testutil.ToFloat64(r.Metrics.Events.WithLabelValues(cfg.Router.DeadLetterTopic, "dead_letter")); got != 1 {
				t.Fatalf("dead_letter events counted %v, want 1", got)
			}
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Good rows next to bad ones: a latin1 payload arrives as stored, the shard column
// is the partition, an UPDATE is counted and skipped, delete-after-insert
// publishes the insert, and a bad row in between only goes to the dead-letter
// topic.
func TestRoutingAroundBadRows(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	s, cfg := policyTable(t, k)
	cfg.Router.OnError = "dead-letter"
	cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertEvent(t, s, "'good-1', 'alarm', 'dev-1', 'X', CONVERT('{\"city\":\"Zürich\"}' USING latin1), 2")
	insertEvent(t, s, badRowCases[0].values)
	if err := env.DB.Exec("BEGIN",
		fmt.Sprintf("INSERT INTO %s.events (event_id, aggregate_type, aggregate_id, event_type, payload, shard) VALUES ('good-2', 'alarm', 'dev-2', 'X', '{}', 1)", s.Name),
		fmt.Sprintf("DELETE FROM %s.events WHERE event_id = 'good-2'", s.Name),
		"COMMIT",
		fmt.Sprintf("UPDATE %s.events SET event_type = 'Y' WHERE event_id = 'good-1'", s.Name)); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	good, dead := map[string]Record{}, 0
	for _, rec := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		if rec.Topic == cfg.Router.DeadLetterTopic {
			dead++
		} else {
			good[rec.ID] = rec
		}
	}
	if len(good) != 2 || good["good-1"].Partition != 2 || good["good-2"].Partition != 1 || dead != 1 {
		t.Fatalf("published %+v and %d dead letters, want good-1 on partition 2, good-2 on 1, one dead letter", good, dead)
	}
	if string(good["good-1"].Value) != "{\"city\":\"Z\xfcrich\"}" {
		t.Fatalf("latin1 payload arrived as %q, want its bytes as stored", good["good-1"].Value)
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
