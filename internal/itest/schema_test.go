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
	BrokerOnlyAsSink(t)
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
	BrokerOnlyAsSink(t)
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

// With column names in the binlog, those names are the truth: a stored
// layout that disagrees is replaced (and logged), not a reason to stop.
func TestBinlogColumnNamesWinOverStoredLayout(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	db := startServer(t, nil)
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: Head(t, db), Flavor: "mariadb", Time: time.Now().UTC(),
		Schema: map[string][]string{"app.outbox": {"id", "something", "else"}}}
	if err := Store(t, cfg).EnsureTopic(context.Background(), kadmFor(t, k), 1); err != nil {
		t.Fatal(err)
	}
	if err := Store(t, cfg).Write(context.Background(), cfg.Name, cfg.Kafka.TransactionLanes, cp); err != nil {
		t.Fatal(err)
	}
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := db.Exec("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('m1', 'alarm', 'd', 'X', '{}')"); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	if len(recs) != 1 || recs[0].ID != "m1" || recs[0].Key != "d" {
		t.Fatalf("records %+v, want m1 routed by the binlog's column names", recs)
	}
	if !strings.Contains(r.Logs(), "replaces the one tracked from DDL") {
		t.Fatalf("the replaced layout is not logged:\n%s", r.Logs())
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// invalid_op fatal: an UPDATE of an outbox row stops the relay.
func TestInvalidOpFatal(t *testing.T) {
	BrokerOnlyAsSink(t)
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

// minimalPipeline starts a server whose binlog carries no column names
// (binlog_row_metadata=MINIMAL), so the relay decodes rows with the layout
// it tracks from DDL, with the outbox and alarm tables in database app, and
// a relay configuration for it starting at the head.
func minimalPipeline(t *testing.T) (*Kafka, *Schema, config.Config) {
	t.Helper()
	k := StartKafka(t)
	db := startServer(t, map[string]string{"binlog-row-metadata": "MINIMAL"})
	if err := db.Exec(fmt.Sprintf(AlarmDDL, "app")); err != nil {
		t.Fatal(err)
	}
	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{db.Addr}
	return k, &Schema{DB: db, Name: "app"}, cfg
}

// requireExactlyOnce waits until the relay's checkpoint covers the server's
// head, checks that it is still running, and that every outbox row arrived
// exactly once.
func requireExactlyOnce(t *testing.T, r *InProcess, k *Kafka, s *Schema, cfg config.Config, want int) {
	t.Helper()
	WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
	select {
	case <-r.Done():
		t.Fatalf("relay stopped: %v", r.Err())
	default:
	}
	rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if !rep.OK() || rep.Expected != want {
		t.Fatalf("want %d rows exactly once: %s", want, rep)
	}
}

func insertOutbox(t *testing.T, s *Schema, prefix string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		if err := s.DB.Exec(fmt.Sprintf("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) "+
			"VALUES ('%s-%d', 'alarm', '%s', 'X', JSON_OBJECT('seq', %d))", prefix, i, prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
}

// A trigger that writes the outbox (a common way to feed one): its CREATE
// TRIGGER mentions the outbox but changes no columns, so the relay goes on,
// and the rows the trigger writes are published exactly once.
func TestTriggerWritesOutbox(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := minimalPipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := s.DB.Exec(`CREATE TRIGGER app.alarm_outbox AFTER INSERT ON app.alarm_record FOR EACH ROW
		INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES (CONCAT('trg-', NEW.id), 'alarm', NEW.device_id, 'AlarmCreated', JSON_OBJECT('seq', NEW.seq))`); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 12; i++ {
		if err := s.DB.Exec(fmt.Sprintf("INSERT INTO app.alarm_record (device_id, level, temp, seq) VALUES ('dev-%d', 'CRITICAL', 90, %d)", i%3, i)); err != nil {
			t.Fatal(err)
		}
	}
	// Several trigger rows in one transaction.
	if err := s.DB.Exec("BEGIN", "INSERT INTO app.alarm_record (device_id, level, temp, seq) VALUES ('dev-0', 'INFO', 1, 13), ('dev-1', 'INFO', 1, 14), ('dev-2', 'INFO', 1, 15)",
		"COMMIT"); err != nil {
		t.Fatal(err)
	}
	requireExactlyOnce(t, r, k, s, cfg, 15)
	if err := s.DB.Exec("DROP TRIGGER app.alarm_outbox"); err != nil {
		t.Fatal(err)
	}
	insertOutbox(t, s, "after", 2)
	requireExactlyOnce(t, r, k, s, cfg, 17)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A stored procedure that inserts outbox rows: its CREATE PROCEDURE (whose
// body names the outbox) is no table change, and the rows of each CALL are
// published exactly once.
func TestProcedureWritesOutbox(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := minimalPipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if err := s.DB.Exec(`CREATE PROCEDURE app.emit(IN tag VARCHAR(16), IN n INT)
		BEGIN
			DECLARE i INT DEFAULT 1;
			WHILE i <= n DO
				INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload)
				VALUES (CONCAT(tag, '-', i), 'alarm', tag, 'Emitted', JSON_OBJECT('seq', i));
				SET i = i + 1;
			END WHILE;
		END`); err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec("CALL app.emit('auto', 4)", "BEGIN", "CALL app.emit('txn', 5)", "COMMIT"); err != nil {
		t.Fatal(err)
	}
	requireExactlyOnce(t, r, k, s, cfg, 9)
	if err := s.DB.Exec("DROP PROCEDURE app.emit"); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// CREATE EVENT whose body deletes from the outbox, and other statements that
// mention it without changing its columns, do not stop the relay; an
// INVISIBLE column (MariaDB syntax the TiDB parser rejects) is tracked.
func TestStatementsMentioningOutbox(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := minimalPipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertOutbox(t, s, "before", 3)
	if err := s.DB.Exec(
		"CREATE EVENT app.prune ON SCHEDULE EVERY 1 DAY DO DELETE FROM app.outbox WHERE created_at < NOW() - INTERVAL 30 DAY",
		"ALTER EVENT app.prune ON SCHEDULE EVERY 2 DAY",
		"CREATE VIEW app.recent AS SELECT * FROM app.outbox WHERE id > 0",
		"GRANT SELECT ON app.outbox TO 'weak'@'%'",
		"ANALYZE TABLE app.outbox",
		"OPTIMIZE TABLE app.outbox",
		"CREATE INDEX by_type ON app.outbox (event_type)",
		"DROP INDEX by_type ON app.outbox",
		"CREATE OR REPLACE TABLE app.outbox_archive (id BIGINT, payload LONGTEXT)",
		"ALTER TABLE app.outbox ADD COLUMN note VARCHAR(8) NOT NULL DEFAULT 'n' INVISIBLE AFTER id",
		"DROP EVENT app.prune",
	); err != nil {
		t.Fatal(err)
	}
	insertOutbox(t, s, "after", 3)
	requireExactlyOnce(t, r, k, s, cfg, 6)
	cp := WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
	if got := strings.Join(cp.Schema["app.outbox"], ","); got != "id,note,event_id,aggregate_type,aggregate_id,event_type,payload,created_at" {
		t.Fatalf("checkpoint layout %s", got)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A gh-ost cut-over without column names in the binlog: the shadow table is
// tracked from its CREATE ... LIKE and ALTER (across a relay restart in the
// middle of the migration: the checkpoint keeps it), and the rename swap
// carries its layout onto the outbox, so rows after the cut-over are routed
// by their new columns (aggregate_id moved: a wrong layout gives wrong keys).
func TestGhostCutOverMinimalMetadata(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := minimalPipeline(t)
	db := s.DB
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	writePhase(t, db, 0)
	if err := db.Exec(
		"create /* gh-ost */ table `app`.`_outbox_gho` like `app`.`outbox`",
		"alter /* gh-ost */ table `app`.`_outbox_gho` ADD COLUMN tenant VARCHAR(16) NOT NULL DEFAULT 'acme' FIRST, "+
			"MODIFY COLUMN aggregate_id VARCHAR(64) NOT NULL AFTER payload",
		"create /* gh-ost */ table `app`.`_outbox_ghc` (id bigint auto_increment, last_update timestamp not null DEFAULT CURRENT_TIMESTAMP "+
			"ON UPDATE CURRENT_TIMESTAMP, hint varchar(64) charset ascii not null, value varchar(4096) charset ascii not null, "+
			"primary key(id), unique key hint_uidx(hint)) auto_increment=256 comment='gh-ost changelog'",
		"insert /* gh-ost */ ignore into `app`.`_outbox_gho` (`id`, `event_id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `created_at`) "+
			"select `id`, `event_id`, `aggregate_type`, `aggregate_id`, `event_type`, `payload`, `created_at` from `app`.`outbox`",
	); err != nil {
		t.Fatal(err)
	}
	cp := WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	if got := strings.Join(cp.Schema["app._outbox_gho"], ","); got != "tenant,id,event_id,aggregate_type,event_type,payload,aggregate_id,created_at" {
		t.Fatalf("checkpoint does not hold the shadow table's layout: %v", cp.Schema)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec(
		"create /* gh-ost */ table `app`.`_outbox_del` (id int auto_increment primary key) engine=InnoDB comment='ghost-cut-over-sentry'",
		"drop /* gh-ost */ table if exists `app`.`_outbox_del`",
		"rename /* gh-ost */ table `app`.`outbox` to `app`.`_outbox_del`, `app`.`_outbox_gho` to `app`.`outbox`",
	); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 5; n++ {
		if err := db.Exec(fmt.Sprintf(schemaPhases[1].insert, n, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Exec("drop /* gh-ost */ table if exists `app`.`_outbox_ghc`", "drop /* gh-ost */ table if exists `app`.`_outbox_del`"); err != nil {
		t.Fatal(err)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	cp = WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	requirePhases(t, k, cfg, 2)
	if len(cp.Schema) != 1 || strings.Join(cp.Schema["app.outbox"], ",") != "tenant,id,event_id,aggregate_type,event_type,payload,aggregate_id,created_at" {
		t.Fatalf("checkpoint layout after the migration: %v", cp.Schema)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// checkpoint set keeps the stored layout: moved back to a position before
// DDL, the relay decodes the rows after it with the layout of that position
// (today's definition, or none, would decode the middle phase wrongly);
// --to now takes the server's current definitions.
func TestCheckpointSetKeepsLayout(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := minimalPipeline(t)
	db := s.DB
	path := WriteConfig(t, cfg)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	writePhase(t, db, 0)
	first := WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	writePhase(t, db, 1)
	writePhase(t, db, 2)
	// Set the checkpoint (again) to where phase 1 ended.
	_, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", first.GTIDSet, "--force", "--yes", "--config", path)
	if code != 0 || !strings.Contains(errOut, "kept the previous checkpoint's") {
		t.Fatalf("checkpoint set: exit %d\n%s", code, errOut)
	}
	cp := loadCheckpoint(t, cfg)
	if cp.GTIDSet != first.GTIDSet || strings.Join(cp.Schema["app.outbox"], ",") != strings.Join(first.Schema["app.outbox"], ",") {
		t.Fatalf("checkpoint after set: %+v, want the layout %v", cp, first.Schema)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	requirePhases(t, k, cfg, len(schemaPhases))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = env.CLI(t, "checkpoint", "set", "--to", "now", "--force", "--yes", "--config", path)
	if code != 0 || !strings.Contains(errOut, "took the current definition of app.outbox") {
		t.Fatalf("checkpoint set --to now: exit %d\n%s", code, errOut)
	}
	if got := strings.Join(loadCheckpoint(t, cfg).Schema["app.outbox"], ","); got != "tenant,id,event_id,aggregate_type,event_type,payload,aggregate_id,created_at" {
		t.Fatalf("layout after set --to now: %s", got)
	}
}
