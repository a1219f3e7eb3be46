package mysqlsource

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/client"
)

// The queries independent binlog clients send before they ask for the
// binlog, as MySQL 8.0 and 8.4 answer them: mysql-binlog-connector-java's
// BinaryLogClient (Debezium's binlog client: gtid_purged, binary log
// status, binlog_checksum and its declaration, server_id, heartbeat,
// timeouts), the Debezium MySQL connector's checks (GTID mode and sets,
// binlog format and row image, binary logs, grants, character sets,
// sql_mode, TLS status, databases, GTID_SUBTRACT), Connector/J's session
// set-up, and what go-mysql and a MySQL replica declare. Each gets a
// well-formed answer (the columns MySQL names, the values it gives), and
// the double records none as not modelled.
func TestStartupQueriesOfBinlogClientsAnswered(t *testing.T) {
	type want struct {
		q    string
		cols []string
		// row: the first row's values, "*" for any; nil: no result set
		// (OK), or rows only counted (n).
		row []string
		n   int // rows; 0: one, -1: at least one
	}
	for _, version := range []string{"8.0.40", "8.4.3"} {
		p := startTest(t, Options{Version: version, UUID: "5a5a5a5a-0000-4000-8000-000000000001"})
		if _, err := p.CreateOutbox("app", "outbox"); err != nil {
			t.Fatal(err)
		}
		status := "show master status"
		if tagged(version) {
			status = "show binary log status"
		}
		sid := p.UUID()
		cases := []want{
			// BinaryLogClient.
			{q: "show global variables like 'gtid_purged'", cols: []string{"Variable_name", "Value"}, row: []string{"gtid_purged", ""}},
			{q: status, cols: []string{"File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"},
				row: []string{"binlog.000001", "*", "", "", sid + ":1"}},
			{q: "show global variables like 'binlog_checksum'", cols: []string{"Variable_name", "Value"}, row: []string{"binlog_checksum", "CRC32"}},
			{q: "set @master_binlog_checksum= @@global.binlog_checksum"},
			{q: "SELECT @master_binlog_checksum", cols: []string{"@master_binlog_checksum"}, row: []string{"CRC32"}},
			{q: "select @@server_id", cols: []string{"@@server_id"}, row: []string{"1"}},
			{q: "set @master_heartbeat_period=60000000000"},
			{q: "set net_write_timeout=60"},
			{q: "set net_read_timeout=60"},
			// The brief list of an independent client's probes.
			{q: "SELECT @@version", cols: []string{"@@version"}, row: []string{version}},
			{q: "SELECT @@server_uuid", cols: []string{"@@server_uuid"}, row: []string{sid}},
			{q: "SHOW VARIABLES LIKE 'gtid_mode'", cols: []string{"Variable_name", "Value"}, row: []string{"gtid_mode", "ON"}},
			{q: "SHOW GLOBAL VARIABLES LIKE 'GTID_MODE'", cols: []string{"Variable_name", "Value"}, row: []string{"gtid_mode", "ON"}},
			{q: "SELECT @@global.gtid_executed", cols: []string{"@@global.gtid_executed"}, row: []string{sid + ":1"}},
			{q: "SELECT @@global.gtid_purged", cols: []string{"@@global.gtid_purged"}, row: []string{""}},
			{q: "SHOW GLOBAL VARIABLES LIKE 'binlog_row_image'", cols: []string{"Variable_name", "Value"}, row: []string{"binlog_row_image", "FULL"}},
			{q: "SHOW GLOBAL VARIABLES LIKE 'binlog_format'", cols: []string{"Variable_name", "Value"}, row: []string{"binlog_format", "ROW"}},
			{q: "SHOW GLOBAL VARIABLES LIKE 'binlog_row_value_options'", cols: []string{"Variable_name", "Value"}, row: []string{"binlog_row_value_options", ""}},
			{q: "SHOW GLOBAL VARIABLES LIKE 'binlog_row%'", cols: []string{"Variable_name", "Value"}, n: 3},
			{q: "SET @slave_uuid = '11111111-2222-3333-4444-555555555555', @replica_uuid = '11111111-2222-3333-4444-555555555555'"},
			{q: "SELECT @replica_uuid, @slave_uuid AS s, @nothing", cols: []string{"@replica_uuid", "s", "@nothing"},
				row: []string{"11111111-2222-3333-4444-555555555555", "11111111-2222-3333-4444-555555555555", "NULL"}},
			{q: "SHOW BINARY LOGS", cols: []string{"Log_name", "File_size", "Encrypted"}, row: []string{"binlog.000001", "*", "No"}},
			// The Debezium connector's checks.
			{q: "SHOW GRANTS FOR CURRENT_USER", cols: []string{"Grants for relay@%"}, n: -1},
			{q: "SHOW VARIABLES WHERE Variable_name IN ('character_set_server','collation_server')", cols: []string{"Variable_name", "Value"},
				row: []string{"character_set_server", "utf8mb4"}, n: 2},
			{q: "SHOW VARIABLES WHERE Variable_name = 'sql_mode'", cols: []string{"Variable_name", "Value"}, row: []string{"sql_mode", "*"}},
			{q: "SHOW SESSION STATUS LIKE 'Ssl_version'", cols: []string{"Variable_name", "Value"}, row: []string{"Ssl_version", ""}},
			{q: "SHOW VARIABLES LIKE 'lower_case_table_names'", cols: []string{"Variable_name", "Value"}, row: []string{"lower_case_table_names", "0"}},
			{q: "SHOW DATABASES", cols: []string{"Database"}, row: []string{"app"}, n: 5},
			{q: "SELECT GTID_SUBTRACT('" + sid + ":1-5', '" + sid + ":1-3')", cols: []string{"GTID_SUBTRACT('" + sid + ":1-5', '" + sid + ":1-3')"},
				row: []string{sid + ":4-5"}},
			{q: "SELECT GTID_SUBSET('" + sid + ":1', @@global.gtid_executed) AS sub", cols: []string{"sub"}, row: []string{"1"}},
			// Connector/J's session set-up.
			{q: "/* mysql-connector-j-8.4.0 (Revision: 1c3f5c149e0bfe31c7fbeb24e2d260cd890972c4) */SELECT @@session.auto_increment_increment AS auto_increment_increment, " +
				"@@character_set_client AS character_set_client, @@character_set_connection AS character_set_connection, @@character_set_results AS character_set_results, " +
				"@@character_set_server AS character_set_server, @@collation_server AS collation_server, @@collation_connection AS collation_connection, " +
				"@@init_connect AS init_connect, @@interactive_timeout AS interactive_timeout, @@license AS license, @@lower_case_table_names AS lower_case_table_names, " +
				"@@max_allowed_packet AS max_allowed_packet, @@net_write_timeout AS net_write_timeout, @@performance_schema AS performance_schema, " +
				"@@sql_mode AS sql_mode, @@system_time_zone AS system_time_zone, @@time_zone AS time_zone, @@transaction_isolation AS transaction_isolation, " +
				"@@wait_timeout AS wait_timeout",
				cols: []string{"auto_increment_increment", "character_set_client", "character_set_connection", "character_set_results", "character_set_server",
					"collation_server", "collation_connection", "init_connect", "interactive_timeout", "license", "lower_case_table_names", "max_allowed_packet",
					"net_write_timeout", "performance_schema", "sql_mode", "system_time_zone", "time_zone", "transaction_isolation", "wait_timeout"},
				row: []string{"1", "utf8mb4", "utf8mb4", "utf8mb4", "utf8mb4", "utf8mb4_0900_ai_ci", "utf8mb4_0900_ai_ci", "", "28800", "GPL", "0", "67108864",
					"60", "1", "*", "*", "SYSTEM", "REPEATABLE-READ", "28800"}},
			{q: "SET NAMES utf8mb4"},
			{q: "SET character_set_results = NULL"},
			{q: "SET autocommit=1"},
			{q: "SELECT @@session.transaction_read_only", cols: []string{"@@session.transaction_read_only"}, row: []string{"0"}},
			{q: "SHOW WARNINGS", cols: []string{"Level", "Code", "Message"}, n: 0},
			// go-mysql's and a MySQL replica's declarations.
			{q: "SET @master_binlog_checksum='NONE', @source_binlog_checksum='NONE'"},
			{q: "SET @master_binlog_checksum = @@global.binlog_checksum, @source_binlog_checksum = @@global.binlog_checksum"},
			{q: "SELECT @source_binlog_checksum", cols: []string{"@source_binlog_checksum"}, row: []string{"CRC32"}},
			{q: "SET @master_heartbeat_period = 1000000000, @source_heartbeat_period = 1000000000"},
		}
		c, err := client.Connect(p.Addr(), "relay", "relay-pw", "")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Ping(); err != nil {
			t.Fatalf("%s: COM_PING: %v", version, err)
		}
		for _, w := range cases {
			r, err := c.Execute(w.q)
			if err != nil {
				t.Errorf("%s: %s: %v", version, w.q, err)
				continue
			}
			if w.cols == nil {
				if r.Resultset != nil && len(r.Fields) > 0 {
					t.Errorf("%s: %s: a result set, want OK", version, w.q)
				}
				continue
			}
			var cols []string
			for _, f := range r.Fields {
				cols = append(cols, string(f.Name))
			}
			if strings.Join(cols, "|") != strings.Join(w.cols, "|") {
				t.Errorf("%s: %s: columns %q, want %q", version, w.q, cols, w.cols)
				continue
			}
			n := r.RowNumber()
			switch {
			case w.n == 0 && w.row != nil && n != 1, w.n > 0 && n != w.n, w.n == 0 && w.row == nil && n != 0, w.n < 0 && n < 1:
				t.Errorf("%s: %s: %d rows", version, w.q, n)
				continue
			}
			for i, v := range w.row {
				got, _ := r.GetString(0, i)
				if isNull, _ := r.IsNull(0, i); isNull {
					got = "NULL"
				}
				if v != "*" && got != v {
					t.Errorf("%s: %s: column %s is %q, want %q", version, w.q, w.cols[i], got, v)
				}
			}
		}
		c.Close()
		if u := p.Unmodelled(); len(u) > 0 {
			t.Errorf("%s: not modelled: %q", version, u)
		}
	}
}
