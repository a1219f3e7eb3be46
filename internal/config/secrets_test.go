package config

import (
	"strings"
	"testing"
)

const atkBase = `name: a
source:
  hosts: ["db1:3306"]
  user: relay
  server_id: 7
  tables: [app.outbox, app.other]
kafka:
  brokers: ["k1:9092"]
`

// A per-table override that sets a string setting to "" (a legal value:
// topic_prefix "" publishes to the aggregate type itself; timestamp_column
// "" uses the commit time) is silently dropped by RouterConfig.For, which
// copies only non-zero fields: the table keeps the router's value, so its
// records go to another topic than configured.
func TestAttack13PerTableEmptyOverrideIgnored(t *testing.T) {
	raw := atkBase + `router:
  topic_prefix: "outbox.event."
  timestamp_column: created_at
  tables:
    app.other:
      topic_prefix: ""
      timestamp_column: ""
`
	cfg, err := Parse([]byte(raw), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Router.Tables["app.other"].TopicPrefix; got != "" {
		t.Fatalf("decoded entry has topic_prefix %q", got)
	}
	rc := cfg.Router.For("app.other")
	if rc.TopicPrefix != "" {
		t.Errorf("router.tables.app.other.topic_prefix \"\" ignored: For gives %q (records go to outbox.event.<type>, not <type>)", rc.TopicPrefix)
	}
	if rc.TimestampColumn != "" {
		t.Errorf("router.tables.app.other.timestamp_column \"\" ignored: For gives %q", rc.TimestampColumn)
	}
}

// yaml.v3 truncates a float into an integer setting: server_id 4242.9
// becomes 4242, topic_partitions 2.5 becomes 2, silently.
func TestAttack13FloatTruncatedIntoInteger(t *testing.T) {
	raw := strings.Replace(atkBase, "server_id: 7", "server_id: 4242.9", 1) + "  topic_partitions: 2.5\n  batch:\n    max_records: 1.5\n"
	cfg, err := Parse([]byte(raw), env(nil))
	if err == nil {
		t.Errorf("accepted: server_id=%d topic_partitions=%d max_records=%d", cfg.Source.ServerID, cfg.Kafka.TopicPartitions, cfg.Kafka.Batch.MaxRecords)
	}
}

// A per-table override written as a YAML alias of another table's entry,
// with a different preset: the columns the aliased mapping names are reset
// to the preset's (routerTables looks for set keys only in a MappingNode).
func TestAttack13AliasedPerTableLosesColumns(t *testing.T) {
	raw := strings.Replace(atkBase, "tables: [app.outbox, app.other]", "tables: [app.outbox, app.other, app.third]", 1) + `router:
  tables:
    app.other: &dbz
      preset: debezium
      payload_column: body
    app.third: *dbz
`
	cfg, err := Parse([]byte(raw), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Router.For("app.other"), cfg.Router.For("app.third")
	if a.PayloadColumn != b.PayloadColumn {
		t.Errorf("same mapping, different result: app.other payload %q, app.third (alias) payload %q", a.PayloadColumn, b.PayloadColumn)
	}
}

// YAML merge keys, the usual way to share settings between per-table
// entries, are refused as an unknown key "<<".
func TestAttack13MergeKeyRefused(t *testing.T) {
	raw := atkBase + `router:
  tables:
    app.outbox: &common
      invalid_op: fatal
    app.other:
      <<: *common
      topic_prefix: other.
`
	cfg, err := Parse([]byte(raw), env(nil))
	if err != nil {
		t.Fatalf("merge key refused: %v", err)
	}
	if cfg.Router.For("app.other").InvalidOp != InvalidOpFatal {
		t.Errorf("merge key not applied")
	}
}

// A second YAML document in the file is silently ignored.
func TestAttack13SecondDocumentIgnored(t *testing.T) {
	raw := atkBase + "---\nrouter:\n  topic_prefix: prod.\n"
	cfg, err := Parse([]byte(raw), env(nil))
	if err == nil {
		t.Errorf("second document ignored silently (topic_prefix %q)", cfg.Router.TopicPrefix)
	}
}

// source.password_file and kafka.sasl.password_file that do not exist are
// refused by Load; kafka.sasl.token_file, secret_access_key_file and
// session_token_file are not checked at all: a typo passes Load (and so
// `run --print-config`) and only shows as failed authentications.
func TestAttack13MissingSecretFilesAccepted(t *testing.T) {
	for _, sasl := range []string{
		"    mechanism: OAUTHBEARER\n    token_file: /nonexistent/token\n",
		"    mechanism: AWS_MSK_IAM\n    access_key_id: AKIA\n    secret_access_key_file: /nonexistent/secret\n",
		"    mechanism: AWS_MSK_IAM\n    access_key_id: AKIA\n    secret_access_key: s\n    session_token_file: /nonexistent/session\n",
	} {
		_, err := Parse([]byte(atkBase+"  sasl:\n"+sasl), env(nil))
		if err == nil {
			t.Errorf("accepted a secret file that does not exist:\n%s", sasl)
		}
	}
}

// A DATABASE_URL-style variable put into source.hosts (a common 12-factor
// habit) is echoed, password and all, in the error: Load's contract says
// it never returns secrets inside errors.
func TestAttack13HostErrorEchoesCredentials(t *testing.T) {
	raw := strings.Replace(atkBase, `hosts: ["db1:3306"]`, `hosts: ["${DB_URL}"]`, 1)
	_, err := Parse([]byte(raw), env(map[string]string{"DB_URL": "relay:s3cretPW@db1:3306"}))
	if err == nil {
		t.Fatal("accepted")
	}
	if strings.Contains(err.Error(), "s3cretPW") {
		t.Errorf("error shows the password: %v", err)
	}
}

// A problem in a per-table override names the line of "tables:" instead of
// the offending key: findKey splits the path on every dot, and the table
// name db.table has one.
func TestAttack13PerTableProblemLine(t *testing.T) {
	raw := atkBase + `router:
  tables:
    app.other:
      topic_prefix: ok.
      value_format: bogus
`
	_, err := Parse([]byte(raw), env(nil))
	if err == nil {
		t.Fatal("accepted")
	}
	if !strings.Contains(err.Error(), "router.tables.app.other.value_format (line 13)") {
		t.Errorf("want the line of value_format (13):\n%v", err)
	}
}

// decodeStruct finds router.tables with IndexFunc over keys AND values: a
// router value spelled "tables" before the key (a column, a prefix) is
// found first, at an odd index, and every per-table override is then
// dropped without a word.
func TestAttack13ValueNamedTablesDropsOverrides(t *testing.T) {
	raw := atkBase + `router:
  schema_version_column: tables
  tables:
    app.other:
      topic_prefix: other.
`
	cfg, err := Parse([]byte(raw), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Router.For("app.other").TopicPrefix; got != "other." {
		t.Errorf("per-table topic_prefix lost: %q (Tables %v)", got, cfg.Router.Tables)
	}
}

// Before issue 13, ${VAR} was substituted into the text, so the common
// unquoted flow list `brokers: [${KAFKA_BROKERS}]` worked. Expanding after
// parsing makes "{" a flow indicator: such a file is a YAML syntax error.
// Decided (fix13): refuse it, but name the right line (yaml.v3 reports
// parser errors 0-based) and say to quote ${VAR} inside [ ] and { }.
func TestAttack13UnquotedVarInFlowList(t *testing.T) {
	for _, tc := range []struct{ from, to string }{
		{`brokers: ["k1:9092"]`, `brokers: [${KAFKA_BROKER}]`},
		{`brokers: ["k1:9092"]`, `brokers: ["k0:9092", ${KAFKA_BROKER}]`},
		{`brokers: ["k1:9092"]`, "brokers: [\n    ${KAFKA_BROKER}\n  ]"},
	} {
		raw := strings.Replace(atkBase, tc.from, tc.to, 1)
		_, err := Parse([]byte(raw), env(map[string]string{"KAFKA_BROKER": "k1:9092"}))
		if err == nil {
			t.Fatalf("%s: accepted", tc.to)
		}
		want := "line 8: "
		if strings.Contains(tc.to, "\n") {
			want = "line 9: "
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `quote ${VAR} inside [ ] and { }`) {
			t.Errorf("%s: want %q and the quoting hint:\n%v", tc.to, want, err)
		}
	}
	raw := strings.Replace(atkBase, `brokers: ["k1:9092"]`, `brokers: ["${KAFKA_BROKER}"]`, 1)
	cfg, err := Parse([]byte(raw), env(map[string]string{"KAFKA_BROKER": "k1:9092"}))
	if err != nil {
		t.Fatalf("quoted: %v", err)
	}
	if len(cfg.Kafka.Brokers) != 1 || cfg.Kafka.Brokers[0] != "k1:9092" {
		t.Fatalf("brokers %q", cfg.Kafka.Brokers)
	}
}
