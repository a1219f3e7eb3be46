package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/outbox"
)

func TestPrintSchemaFollowsRouterColumns(t *testing.T) {
	cfg, err := config.Parse([]byte(`name: alarms
source: {hosts: ["db:3306"], user: relay, server_id: 7, tables: ["app.outbox", "billing.events"]}
kafka: {brokers: ["k:9092"]}
router:
  preset: debezium
  timestamp_column: timestamp
  tables:
    billing.events: {preset: outbox}
`), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for _, f := range []outbox.Flavor{outbox.MySQL, outbox.MariaDB} {
		if err := printSchema(&out, cfg, f, true); err != nil {
			t.Fatal(err)
		}
	}
	s := out.String()
	for _, want := range []string{
		"-- mysql: outbox table", "-- mariadb: outbox table",
		"CREATE TABLE `app`.`outbox`", "`aggregatetype`", "PRIMARY KEY (`id`)", "KEY idx_timestamp (`timestamp`)",
		"CREATE TABLE `billing`.`events`", "`aggregate_type`", "UNIQUE KEY uk_event_id (`event_id`)",
		"CREATE TABLE `consumed_event`", "PRIMARY KEY (consumer_name, event_id)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in:\n%s", want, s)
		}
	}
	// preset debezium reads Debezium's tracingspancontext; outbox has none
	if n := strings.Count(s, "`tracingspancontext` VARCHAR(1024) NULL"); n != 2 {
		t.Errorf("%d tracingspancontext columns, want one per flavor in the debezium table:\n%s", n, s)
	}
	if n := strings.Count(s, "CREATE TABLE"); n != 6 {
		t.Errorf("%d CREATE TABLEs, want 6 (2 tables + consumed_event, 2 flavors)", n)
	}
	if err := printSchema(&out, cfg, "oracle", false); err == nil {
		t.Error("flavor oracle accepted")
	}
}

// TestSchemaRunsWithoutSecrets: `schema` connects to nothing, so a
// password variable that is not set (a workstation) and a password file
// that is not there do not stop it.
func TestSchemaRunsWithoutSecrets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(`name: alarms
source:
  hosts: ["db:3306"]
  user: relay
  password: ${RELAY_TEST_SCHEMA_NEVER_SET}
  tables: ["app.outbox"]
  server_id: 7
kafka:
  brokers: ["k:9092"]
  sasl: {mechanism: PLAIN, user: relay, password_file: /nonexistent/kafka-password}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := execute([]string{"schema", "--config", path, "--flavor", "mariadb"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "CREATE TABLE `app`.`outbox`") {
		t.Fatalf("no CREATE TABLE in:\n%s", stdout.String())
	}
}

// TestSchemaPrintsOneFlavor: schema prints the table of one flavor, so that
// its output can be piped into a client (flavor auto printed the MySQL and
// the MariaDB table one after the other: ERROR 1050, table exists). With
// source.flavor auto and no --flavor it asks the source; a source that
// does not answer stops it naming --flavor, with nothing on stdout.
func TestSchemaPrintsOneFlavor(t *testing.T) {
	dir := t.TempDir()
	write := func(name, flavor string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(`name: alarms
source:
  hosts: ["127.0.0.1:1"]
  user: relay
  password: x
  tables: ["app.outbox", "app.outbox2"]
  server_id: 7
  flavor: `+flavor+`
  connect_timeout: 1s
kafka:
  brokers: ["k:9092"]
`), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	auto, mariadb := write("auto.yaml", "auto"), write("mariadb.yaml", "mariadb")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"schema", "--config", auto, "--flavor", "mysql"}, "-- mysql: outbox table"},
		{[]string{"schema", "--config", mariadb}, "-- mariadb: outbox table"},
		{[]string{"schema", "--config", mariadb, "--flavor", "mysql"}, "-- mysql: outbox table"},
	} {
		var stdout, stderr bytes.Buffer
		if code := execute(c.args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", c.args, code, stderr.String())
		}
		if n := strings.Count(stdout.String(), "CREATE TABLE"); n != 2 || !strings.Contains(stdout.String(), c.want) {
			t.Errorf("%v: %d CREATE TABLEs, want 2 (one per table) of %q:\n%s", c.args, n, c.want, stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	code := execute([]string{"schema", "--config", auto}, &stdout, &stderr)
	if code != 1 || stdout.Len() != 0 || !strings.Contains(stderr.String(), "pass --flavor mysql or --flavor mariadb") ||
		!strings.Contains(stderr.String(), "127.0.0.1:1") {
		t.Fatalf("flavor auto, source down: exit %d, stdout %q, stderr %s; want 1 naming the host and --flavor, nothing printed",
			code, stdout.String(), stderr.String())
	}
}
