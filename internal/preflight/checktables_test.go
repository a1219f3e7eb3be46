//go:build integration

package preflight

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// checkTablesOn runs checkTables on a fresh MariaDB where ddl ran, with
// the configuration tables (the source.tables list) and router (the
// router section, indented, may be "") give.
func checkTablesOn(t *testing.T, ddl []string, tables, router string) Report {
	t.Helper()
	ctx := context.Background()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.Exec(append(append([]string{"CREATE DATABASE app"}, ddl...),
		"CREATE USER r@'%' IDENTIFIED BY 'pw'", "GRANT SELECT ON *.* TO r@'%'")...); err != nil {
		t.Fatal(err)
	}
	raw := `name: a
source:
  hosts: ["` + srv.Addr + `"]
  user: r
  password: pw
  server_id: 7
  tables: [` + tables + `]
kafka:
  brokers: ["127.0.0.1:1"]
` + router
	cfg, err := config.Parse([]byte(raw), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	conn, err := binlog.Connect(ctx, binlog.Config{User: "r", Password: "pw", ServerID: 7, ConnectTimeout: 5 * time.Second}, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var r Report
	checkTables(conn, cfg, collector{target: "source " + srv.Addr, items: &r})
	for _, it := range r {
		t.Logf("%s %s %s", it.Status, it.Name, it.Detail)
	}
	return r
}

// checkTables checks each table against its own columns. The failure
// guarded against: checkTables checks every captured table against the
// router's global columns, not the table's own (router.tables.<t>): a table
// whose override picks the debezium preset (or names its own columns) fails
// `check` although the relay routes it, and a table whose override names a
// column that does not exist passes.
func TestCheckTablesUsesPerTableColumns(t *testing.T) {
	r := checkTablesOn(t, []string{
		"CREATE TABLE app.outbox (event_id BINARY(16) PRIMARY KEY, aggregate_type VARCHAR(255), aggregate_id VARCHAR(255), event_type VARCHAR(255), payload JSON, created_at TIMESTAMP)",
		"CREATE TABLE app.dbz (id BINARY(16) PRIMARY KEY, aggregatetype VARCHAR(255), aggregateid VARCHAR(255), type VARCHAR(255), payload JSON)",
	}, "app.outbox, app.dbz", `router:
  tables:
    app.dbz:
      preset: debezium
    app.outbox:
      payload_column: no_such_column
`)
	for _, it := range r {
		switch {
		case it.Name == "table app.dbz" && it.Status == Fail:
			t.Errorf("app.dbz has the debezium columns its override asks for, yet: %s", it.Detail)
		case it.Name == "table app.outbox" && it.Status == Pass:
			t.Errorf("app.outbox lacks payload column no_such_column its override names, yet check passes")
		}
	}
}

// A router column spelt in another letter case on the server (renamed by
// ALTER TABLE ... MODIFY COLUMN AGGREGATE_TYPE ..., or created so) is the
// router's column, as the server compares column names: check passes it.
func TestCheckTablesFindsColumnsWhateverTheirLetterCase(t *testing.T) {
	r := checkTablesOn(t, []string{
		"CREATE TABLE app.outbox (Event_ID VARCHAR(64) PRIMARY KEY, aggregate_type VARCHAR(255), aggregate_id VARCHAR(255), event_type VARCHAR(255), PAYLOAD JSON)",
		"ALTER TABLE app.outbox MODIFY COLUMN AGGREGATE_TYPE VARCHAR(255)",
	}, "app.outbox", "")
	if len(r) != 1 || r[0].Name != "table app.outbox" || r[0].Status != Pass {
		t.Fatalf("check of a table whose router columns differ in letter case only: %+v", r)
	}
}
