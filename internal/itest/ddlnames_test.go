//go:build integration

package itest

import (
	"strings"
	"testing"
	"time"
)

// A column renamed to another letter case only (MODIFY COLUMN
// AGGREGATE_TYPE ... keeps the new spelling on the server) is the router's
// column still, as the server compares column names: with the binlog's
// column names and with the layout tracked from DDL, every row before and
// after it is published exactly once, and the relay goes on.
func TestCaseOnlyColumnRenameKeepsPublishing(t *testing.T) {
	BrokerOnlyAsSink(t)
	for _, metadata := range []string{"FULL", "MINIMAL"} {
		t.Run(metadata, func(t *testing.T) {
			k := StartKafka(t)
			s := &Schema{DB: startServer(t, map[string]string{"binlog-row-metadata": metadata}), Name: "app"}
			cfg := env.RelayConfig(k, "app.outbox")
			cfg.Source.Hosts = []string{s.DB.Addr}
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			insertOutbox(t, s, "before", 3)
			if err := s.DB.Exec("ALTER TABLE app.outbox MODIFY COLUMN AGGREGATE_TYPE VARCHAR(64) NOT NULL",
				"ALTER TABLE app.outbox CHANGE COLUMN payload Payload JSON NOT NULL"); err != nil {
				t.Fatal(err)
			}
			insertOutbox(t, s, "after", 3)
			requireExactlyOnce(t, r, k, s, cfg, 6)
			cp := WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
			if got := strings.Join(cp.Schema["app.outbox"], ","); metadata == "MINIMAL" &&
				got != "id,event_id,AGGREGATE_TYPE,aggregate_id,event_type,Payload,created_at" {
				t.Fatalf("checkpoint layout %s", got)
			}
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// An ALTER TABLE whose clauses name columns other clauses of it move
// (MODIFY a ... AFTER b, MODIFY b ... FIRST), which the server runs in its
// own order: without column names in the binlog the relay decodes the rows
// after it with the layout the server built (a wrong order gives wrong
// keys), and goes on.
func TestMultiClauseAlterDecodedInServerOrder(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := minimalPipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertOutbox(t, s, "before", 3)
	if err := s.DB.Exec("ALTER TABLE app.outbox MODIFY aggregate_id VARCHAR(64) NOT NULL AFTER event_type, " +
		"MODIFY event_type VARCHAR(64) NOT NULL FIRST, ADD COLUMN note VARCHAR(8) NOT NULL DEFAULT 'n' AFTER aggregate_id, " +
		"MODIFY event_id VARCHAR(64) NOT NULL AFTER note"); err != nil {
		t.Fatal(err)
	}
	insertOutbox(t, s, "after", 3)
	requireExactlyOnce(t, r, k, s, cfg, 6)
	want, err := s.DB.Query("SELECT GROUP_CONCAT(column_name ORDER BY ordinal_position) FROM information_schema.columns " +
		"WHERE table_schema = 'app' AND table_name = 'outbox'")
	if err != nil {
		t.Fatal(err)
	}
	cp := WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
	if got := strings.Join(cp.Schema["app.outbox"], ","); got != want[0][0] {
		t.Fatalf("checkpoint layout %s, the server's %s", got, want[0][0])
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A server with lower_case_table_names=1 takes APP.OUTBOX and App.Outbox
// for app.outbox (and logs `use app` for USE App), and so does the relay
// (it reads the setting at start): DDL that names the outbox in other
// letter cases, an online schema change among them, is followed without
// column names in the binlog, the configured name's case does not matter
// either, and every row is published exactly once.
func TestUpperCaseTableNamesUnderLowerCaseTableNames(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	db := startServer(t, map[string]string{"binlog-row-metadata": "MINIMAL", "lower-case-table-names": "1"})
	s := &Schema{DB: db, Name: "app"}
	cfg := env.RelayConfig(k, "App.Outbox")
	cfg.Source.Hosts = []string{db.Addr}
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertOutbox(t, s, "before", 3)
	c, err := db.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{
		"ALTER TABLE APP.OUTBOX ADD COLUMN tenant VARCHAR(16) NOT NULL DEFAULT 'acme' FIRST",
		"USE App",
		"ALTER TABLE Outbox MODIFY COLUMN aggregate_id VARCHAR(64) NOT NULL AFTER payload",
		"CREATE TABLE App._Outbox_New LIKE APP.outbox",
		"ALTER TABLE APP._OUTBOX_NEW ADD COLUMN note VARCHAR(8) NOT NULL DEFAULT 'n' AFTER tenant",
		"INSERT INTO app._outbox_new (tenant, id, event_id, aggregate_type, event_type, payload, aggregate_id, created_at) " +
			"SELECT tenant, id, event_id, aggregate_type, event_type, payload, aggregate_id, created_at FROM OUTBOX",
		"RENAME TABLE App.Outbox TO App._Outbox_Old, APP._outbox_new TO app.OUTBOX",
		"DROP TABLE APP._OUTBOX_OLD",
	} {
		if _, err := c.Execute(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	insertOutbox(t, s, "after", 3)
	requireExactlyOnce(t, r, k, s, cfg, 6)
	cp := WaitCheckpoint(t, cfg, Head(t, db), time.Minute)
	if got := strings.Join(cp.Schema["App.Outbox"], ","); got != "tenant,note,id,event_id,aggregate_type,event_type,payload,aggregate_id,created_at" {
		t.Fatalf("checkpoint layout %s (%v)", got, cp.Schema)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}
