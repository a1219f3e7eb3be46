//go:build integration

package kititest

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// TestSchemaCommandRunsOnMariaDB: every statement `schema` prints (both
// flavors, both presets, the consumed_event table) is accepted by MariaDB
// and creates the columns the router reads.
func TestSchemaCommandRunsOnMariaDB(t *testing.T) {
	k := itest.StartKafka(t)
	for _, flavor := range []string{"mysql", "mariadb"} {
		name := env.Unique("schema")
		if err := env.DB.Exec("CREATE DATABASE " + name); err != nil {
			t.Fatal(err)
		}
		cfg := env.RelayConfig(k, name+".outbox")
		code, out := runCLI(t, nil, "schema", "--config", itest.WriteConfig(t, cfg), "--flavor", flavor, "--consumed-event")
		if code != 0 {
			t.Fatalf("schema: exit %d", code)
		}
		dbz := env.RelayConfig(k, name+".dbz")
		dbz.Router.Preset = "debezium"
		dbz.Router.EventIDColumn, dbz.Router.AggregateTypeColumn, dbz.Router.AggregateIDColumn = "", "", ""
		dbz.Router.EventTypeColumn, dbz.Router.PayloadColumn = "", ""
		code, out2 := runCLI(t, nil, "schema", "--config", itest.WriteConfig(t, dbz), "--flavor", flavor)
		if code != 0 {
			t.Fatalf("schema (debezium): exit %d", code)
		}
		out += out2
		db := openDB(t, name)
		execScript(t, db, out, flavor+" DDL")
		for table, cols := range map[string]string{
			"outbox":         "aggregate_id,aggregate_type,created_at,event_id,event_type,id,payload",
			"dbz":            "aggregateid,aggregatetype,created_at,id,payload,seq,tracingspancontext,type", // tracing_column: preset debezium's
			"consumed_event": "consumed_at,consumer_name,event_id",
		} {
			var got string
			if err := db.QueryRow("SELECT GROUP_CONCAT(COLUMN_NAME ORDER BY COLUMN_NAME) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ?", name, table).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != cols {
				t.Errorf("%s %s columns %s, want %s", flavor, table, got, cols)
			}
		}
	}
}

// execScript runs each statement of script (statements end with ";" at a
// line's end; "--" comment lines are dropped), as a client fed the script
// would; what names the script when the server refuses one.
func execScript(t *testing.T, db *sql.DB, script, what string) {
	t.Helper()
	for _, stmt := range strings.Split(script, ";\n") {
		var lines []string
		for _, l := range strings.Split(stmt, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "--") {
				lines = append(lines, l)
			}
		}
		if q := strings.TrimSpace(strings.Join(lines, "\n")); q != "" {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s refused by MariaDB: %v\n%s", what, err, q)
			}
		}
	}
}
