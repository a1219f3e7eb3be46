//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

func kadmFor(t *testing.T, k *Kafka) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// schemaPhases write outbox rows around DDL that moves columns: the second
// phase adds a column FIRST, the third moves aggregate_id after payload.
// Each row's event id, key and payload say which phase wrote it.
var schemaPhases = []struct{ ddl, insert string }{
	{"", "INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('p1-%d', 'alarm', 'k1-%d', 'X', '{\"phase\":1}')"},
	{"ALTER TABLE app.outbox ADD COLUMN tenant VARCHAR(16) NOT NULL DEFAULT 'acme' FIRST",
		"INSERT INTO app.outbox (tenant, event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('t2', 'p2-%d', 'alarm', 'k2-%d', 'X', '{\"phase\":2}')"},
	{"ALTER TABLE app.outbox MODIFY COLUMN aggregate_id VARCHAR(64) NOT NULL AFTER payload",
		"INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('p3-%d', 'alarm', 'k3-%d', 'X', '{\"phase\":3}')"},
}

func writePhase(t *testing.T, db *devdb.Server, i int) {
	t.Helper()
	if p := schemaPhases[i]; p.ddl != "" {
		if err := db.Exec(p.ddl); err != nil {
			t.Fatal(err)
		}
	}
	for n := 0; n < 5; n++ {
		if err := db.Exec(fmt.Sprintf(schemaPhases[i].insert, n, n)); err != nil {
			t.Fatal(err)
		}
	}
}

// requirePhases checks that every row of the phases arrived with its own
// columns: id pN-i, key kN-i, payload {"phase":N}.
func requirePhases(t *testing.T, k *Kafka, cfg config.Config, phases int) {
	t.Helper()
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	if len(recs) != 5*phases {
		t.Fatalf("%d records, want %d", len(recs), 5*phases)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		var phase, n int
		if _, err := fmt.Sscanf(r.ID, "p%d-%d", &phase, &n); err != nil {
			t.Fatalf("record id %q: decoded with the wrong columns", r.ID)
		}
		if r.Key != fmt.Sprintf("k%d-%d", phase, n) || string(r.Value) != fmt.Sprintf(`{"phase":%d}`, phase) {
			t.Fatalf("record %s: key %q value %q: decoded with the wrong columns", r.ID, r.Key, r.Value)
		}
		if seen[r.ID] {
			t.Fatalf("record %s twice", r.ID)
		}
		seen[r.ID] = true
	}
}

// binlog_row_metadata MINIMAL: the binlog has no column names; the relay
// follows the DDL from the earliest position and decodes every row with the
// columns its table had when the row was written.
func TestSchemaTrackingFromEarliest(t *testing.T) {
	k := StartKafka(t)
	db := startServer(t, map[string]string{"binlog-row-metadata": "MINIMAL"})
	for i := range schemaPhases {
		writePhase(t, db, i)
	}
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	cfg.Source.Start = "earliest"
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	cp := WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	requirePhases(t, k, cfg, len(schemaPhases))
	if got := strings.Join(cp.Schema["app.outbox"], ","); got != "tenant,id,event_id,aggregate_type,event_type,payload,aggregate_id,created_at" {
		t.Fatalf("checkpoint schema %s", got)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// The same with restarts between the DDL: each restart takes the layout
// from its checkpoint, never today's definition.
func TestSchemaTrackingAcrossRestarts(t *testing.T) {
	k := StartKafka(t)
	db := startServer(t, map[string]string{"binlog-row-metadata": "MINIMAL"})
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	cfg.Source.Start = "earliest"
	for i := range schemaPhases {
		writePhase(t, db, i)
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
		if err := r.Stop(); err != nil { // the next phase's DDL happens while the relay is down
			t.Fatal(err)
		}
	}
	requirePhases(t, k, cfg, len(schemaPhases))
}

// With column names in the binlog, the relay still checks them against the
// layout it tracks and stops when they disagree.
func TestSchemaMismatchStops(t *testing.T) {
	k := StartKafka(t)
	db := startServer(t, nil)
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: Head(t, db), Flavor: "mariadb", Time: time.Now().UTC(),
		Schema: map[string][]string{"app.outbox": {"id", "something", "else"}}}
	if err := Store(t, cfg).EnsureTopic(context.Background(), kadmFor(t, k), 1); err != nil {
		t.Fatal(err)
	}
	if err := Store(t, cfg).Write(context.Background(), cfg.Name, cp); err != nil {
		t.Fatal(err)
	}
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := db.Exec("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('m1', 'alarm', 'd', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	_ = r.StoppedWith(t)
	if !errors.Is(r.Err(), binlog.ErrSchemaMismatch) {
		t.Fatalf("error %v, want ErrSchemaMismatch", r.Err())
	}
}

// invalid_op fatal: an UPDATE of an outbox row stops the relay.
func TestInvalidOpFatal(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	cfg.Router.InvalidOp = "fatal"
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := env.DB.Exec(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('u1', 'alarm', 'd', 'X', '{}')", s.Table()),
		fmt.Sprintf("UPDATE %s SET event_type = 'Y'", s.Table())); err != nil {
		t.Fatal(err)
	}
	_ = r.StoppedWith(t)
	if !errors.Is(r.Err(), relay.ErrInvalidOp) || !strings.Contains(r.Err().Error(), "update") {
		t.Fatalf("error %v, want ErrInvalidOp naming the update", r.Err())
	}
}
