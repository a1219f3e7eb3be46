package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// base is a valid configuration whose password and connect_timeout come
// from ${PW} and ${CT}; a comment references a variable that is never set.
const base = `# rotated: ${OLD_PASSWORD_NEVER_SET}
name: a
source:
  hosts: ["db1:3306"]
  user: relay
  password: ${PW} # was ${OLD_PASSWORD_NEVER_SET}
  server_id: 7
  tables: [app.outbox]
kafka:
  brokers: ["k1:9092"]
`

func TestExpansionPerScalarArrivesExactly(t *testing.T) {
	for _, pw := range []string{
		"abc #def", "~", "null", "pa: ss", "  lead and trail  ", `"double"`, `'single'`, "yes", "123", "[x]", "{y}",
		"- item", "&anchor", "*alias", "!tag", "a\nb", "", "${NOT_A_REF_AFTER_EXPANSION}",
	} {
		cfg, err := Parse([]byte(base), env(map[string]string{"PW": pw}))
		if err != nil {
			t.Fatalf("%q: %v", pw, err)
		}
		if cfg.Source.Password != pw {
			t.Errorf("password %q arrived as %q", pw, cfg.Source.Password)
		}
	}
}

func TestExpansionTypedValues(t *testing.T) {
	raw := base + "  connect_timeout: ${CT}\n  batch:\n    max_records: ${N}\n"
	raw = strings.Replace(raw, "kafka:\n  brokers: [\"k1:9092\"]\n  connect_timeout: ${CT}\n", "kafka:\n  brokers: [\"k1:9092\"]\n", 1)
	raw = strings.Replace(raw, "  user: relay\n", "  user: relay\n  connect_timeout: ${CT}\n", 1)
	raw = strings.Replace(raw, "  connect_timeout: ${CT}\n  batch:", "  batch:", 1)
	cfg, err := Parse([]byte(raw), env(map[string]string{"PW": "x", "CT": "7s", "N": "42"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.ConnectTimeout != 7*time.Second || cfg.Kafka.Batch.MaxRecords != 42 {
		t.Fatalf("connect_timeout %s max_records %d", cfg.Source.ConnectTimeout, cfg.Kafka.Batch.MaxRecords)
	}
	_, err = Parse([]byte(raw), env(map[string]string{"PW": "x", "CT": "7", "N": "many"}))
	want := `invalid configuration: 2 problems:
  source.connect_timeout (line 6): the value of ${CT} is not valid here: write a duration such as 5s, 250ms or 1m30s
  kafka.batch.max_records (line 13): the value of ${N} is not valid here: write a whole number from -9223372036854775808 to 9223372036854775807`
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}

func TestExactErrorMessages(t *testing.T) {
	lookup := env(map[string]string{"PW": "x"})
	tests := []struct {
		name, edit, want string
	}{
		{"empty file", "", "invalid configuration: the file is empty: write at least name, source (hosts, user, server_id, tables) and kafka.brokers"},
		{"comment only", "# nothing\n", "invalid configuration: the file is empty: write at least name, source (hosts, user, server_id, tables) and kafka.brokers"},
		{"duration as int", "source:\n  connect_timeout: 5\n",
			`invalid configuration: source.connect_timeout (line 2): "5" is not valid here: write a duration such as 5s, 250ms or 1m30s`},
		{"unset variable", "source:\n  user: ${RELAY_NEVER_SET}\n",
			"invalid configuration: source.user (line 2): environment variable RELAY_NEVER_SET is not set: export it, or write $${RELAY_NEVER_SET} for a literal ${RELAY_NEVER_SET}"},
		{"non-numeric port", "source:\n  hosts: [\"db:abc\"]\n",
			`invalid configuration: source.hosts[0] (line 2): "db:abc" has port "abc": write a number from 1 to 65535`},
		{"http listen", "http:\n  listen: notanaddr\n",
			`invalid configuration: http.listen (line 2): "notanaddr" is not host:port: write it as host:port, such as db1:3306 or [::1]:3306`},
		{"dead letter topic", "router:\n  dead_letter_topic: \"bad topic!\"\n",
			`invalid configuration: router.dead_letter_topic (line 2): "bad topic!" has ' ': Kafka topic names take only ASCII letters, digits, '.', '_' and '-'`},
		{"topic prefix", "router:\n  topic_prefix: \"a b/\"\n",
			`invalid configuration: router.topic_prefix (line 2): "a b/" has ' ': Kafka topic names take only ASCII letters, digits, '.', '_' and '-'`},
		{"topic dot", "kafka:\n  checkpoint_topic: \"..\"\n",
			`invalid configuration: kafka.checkpoint_topic (line 2): "..": Kafka refuses the topic names "." and ".."`},
		{"topic too long", "kafka:\n  checkpoint_topic: " + strings.Repeat("t", 250) + "\n",
			`invalid configuration: kafka.checkpoint_topic (line 2): "` + strings.Repeat("t", 250) + `" is 250 characters: Kafka allows at most 249`},
		{"gtid set", "source:\n  start: \"0-1\"\n",
			`invalid configuration: source.start (line 2): "0-1" is not now, earliest or a GTID set: write a MariaDB set such as 0-1-100,1-2-5 or a MySQL set such as 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100`},
		{"mysql gtid set for mariadb", "source:\n  flavor: mariadb\n  start: \"3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5\"\n",
			`invalid configuration: source.start (line 3): "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5" is not now, earliest or a GTID set: write a MariaDB set such as 0-1-100,1-2-5 or a MySQL set such as 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100`},
		{"regex", "router:\n  topic_regex: \"([\"\n  topic_replacement: x\n",
			"invalid configuration: router.topic_regex (line 2): \"([\" is not a valid regular expression (Go RE2 syntax): missing closing ]: `[`"},
		{"unknown key", "kafka:\n  brokerz: [a]\n",
			"invalid configuration: kafka.brokerz (line 2): unknown key: did you mean brokers? (the keys here: batch, brokers, checkpoint_interval, checkpoint_topic, client_metrics, compression, delivery, linger, on_partitions_added, replication_factor, request_timeout, sasl, tls, topic_partitions, transaction_lanes, transaction_timeout)"},
		{"unknown key, nothing near", "kafka:\n  zzz: [a]\n",
			"invalid configuration: kafka.zzz (line 2): unknown key: write one of batch, brokers, checkpoint_interval, checkpoint_topic, client_metrics, compression, delivery, linger, on_partitions_added, replication_factor, request_timeout, sasl, tls, topic_partitions, transaction_lanes, transaction_timeout"},
		{"list for a string", "source:\n  user: [a, b]\n",
			`invalid configuration: source.user (line 2): got a list: write a single value (quote it if it contains ": ", " #" or starts with a special character)`},
		{"mapping for a list", "source:\n  tables: {app: outbox}\n",
			`invalid configuration: source.tables (line 2): got a mapping: write a list, such as [a, b], one "- item" per line, or one value a, b`},
		{"syntax", "source:\n  user: pa: ss\n",
			`invalid configuration: line 2: mapping values are not allowed in this context: fix the YAML syntax (quote a value that contains ": " or " #")`},
		{"compression", "kafka:\n  compression: brotli\n",
			`invalid configuration: kafka.compression (line 2): "brotli": write none, gzip, snappy, lz4 or zstd`},
		{"typed enum", "log:\n  level: verbose\n",
			`invalid configuration: log.level (line 2): "verbose": write debug, info, warn or error`},
		{"set twice", "log:\n  level: info\n  level: debug\n",
			`invalid configuration: log.level (line 3): set twice: keep one`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw := tc.edit
			if tc.edit != "" && !strings.HasPrefix(tc.edit, "#") {
				raw = merge(base, tc.edit)
			}
			_, err := Parse([]byte(raw), lookup)
			if err == nil {
				t.Fatal("want an error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v does not wrap ErrInvalid", err)
			}
			if err.Error() != strings.Replace(tc.want, "(line ", "(line ", 1) {
				t.Fatalf("got\n%s\nwant\n%s", err, tc.want)
			}
		})
	}
}

// merge puts edit's sections first, with base's keys of the same sections
// after them (edit's top-level sections replace nothing: keys are added).
func merge(base, edit string) string {
	sections := map[string]string{}
	var order []string
	cur := ""
	for _, l := range strings.SplitAfter(edit, "\n") {
		if l == "" {
			continue
		}
		if !strings.HasPrefix(l, " ") {
			cur = strings.TrimSuffix(strings.TrimSpace(l), ":")
			order = append(order, cur)
			continue
		}
		sections[cur] += l
	}
	var out strings.Builder
	done := map[string]bool{}
	for _, s := range order {
		out.WriteString(s + ":\n" + sections[s])
		done[s] = true
		// base's keys of that section follow
		in := false
		for _, l := range strings.SplitAfter(base, "\n") {
			if !strings.HasPrefix(l, " ") {
				in = strings.TrimSuffix(strings.TrimSpace(l), ":") == s
				continue
			}
			if in && !hasKey(sections[s], l) {
				out.WriteString(l)
			}
		}
	}
	in := true
	for _, l := range strings.SplitAfter(base, "\n") {
		if !strings.HasPrefix(l, " ") {
			name, _, _ := strings.Cut(l, ":")
			in = !done[strings.TrimSpace(name)]
		}
		if in {
			out.WriteString(l)
		}
	}
	return out.String()
}

func hasKey(section, line string) bool {
	k, _, _ := strings.Cut(strings.TrimSpace(line), ":")
	for _, l := range strings.Split(section, "\n") {
		if k2, _, _ := strings.Cut(strings.TrimSpace(l), ":"); k2 == k && strings.HasPrefix(l, "  ") && !strings.HasPrefix(l, "   ") {
			return true
		}
	}
	return false
}

func TestEveryProblemReported(t *testing.T) {
	raw := `name: "bad name"
source:
  hosts: ["db:abc"]
  server_id: 0
  tables: [nodot]
  flavor: oracle
kafka:
  brokers: []
  delivery: twice
  linger: -1s
log:
  format: xml
`
	_, err := Parse([]byte(raw), env(nil))
	want := `invalid configuration: 10 problems:
  name (line 1): "bad name": write 1-200 characters of letters, digits, '.', '_' or '-'
  source.hosts[0] (line 3): "db:abc" has port "abc": write a number from 1 to 65535
  source.user (line 2, not set): empty: write the replication user
  source.server_id (line 4): must be set and unique among the server's replicas, such as 4242
  source.flavor (line 6): "oracle": write auto, mysql or mariadb
  source.tables[0] (line 5): "nodot": write db.table
  kafka.brokers (line 8): empty: list bootstrap brokers, such as ["kafka1:9092"]
  kafka.delivery (line 9): "twice": write exactly-once or at-least-once
  kafka.linger (line 10): -1s: write a duration from 0 to 1m, such as 5ms
  log.format (line 12): "xml": write json or console`
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
}

// A per-table override inherits every router setting it does not set,
// including settings added later: the table is decoded onto a copy.
func TestPerTableInheritsEverySetting(t *testing.T) {
	raw := base + `  tables_extra: x
`
	raw = strings.Replace(raw, "  tables_extra: x\n", "", 1)
	raw = strings.Replace(raw, "  tables: [app.outbox]\n", "  tables: [app.outbox, app.other]\n", 1)
	raw += `router:
  preset: outbox
  event_type_column: kind
  timestamp_column: at
  schema_version_column: v
  topic_prefix: ev.
  value_format: envelope
  null_payload: error
  topic_regex: "(.*)"
  topic_replacement: "t.$1"
  additional_missing: skip
  on_error: dead-letter
  dead_letter_topic: dlq
  invalid_op: fatal
  additional_fields: [{column: c, placement: header}]
  cloudevents_mode: binary
  cloudevents_source: urn:alarms
  tracing_column: trace
  tables:
    app.other:
      topic_prefix: other.
`
	cfg, err := Parse([]byte(raw), env(map[string]string{"PW": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	parent, other := cfg.Router, cfg.Router.For("app.other")
	pv, ov := reflect.ValueOf(parent), reflect.ValueOf(other)
	for i := range pv.NumField() {
		name := pv.Type().Field(i).Name
		if !pv.Type().Field(i).IsExported() {
			continue
		}
		switch name {
		case "Tables":
			continue
		case "TopicPrefix":
			if other.TopicPrefix != "other." {
				t.Errorf("TopicPrefix %q", other.TopicPrefix)
			}
			continue
		}
		if pv.Field(i).IsZero() {
			t.Errorf("test does not set router field %s: add it above", name)
		}
		if !reflect.DeepEqual(pv.Field(i).Interface(), ov.Field(i).Interface()) {
			t.Errorf("%s: table has %v, router %v", name, ov.Field(i).Interface(), pv.Field(i).Interface())
		}
	}
	if got := cfg.Router.For("app.outbox"); got.TopicPrefix != "ev." {
		t.Fatalf("a table without overrides: %+v", got)
	}
}

// A float in an integer setting is refused, never truncated. The failure
// guarded against: yaml.v3 truncates a float into an integer setting:
// server_id 4242.9 becomes 4242, topic_partitions 2.5 becomes 2, silently.
func TestDecodeRefusesFloatForInteger(t *testing.T) {
	raw := strings.Replace(atkBase, "server_id: 7", "server_id: 4242.9", 1) + "  topic_partitions: 2.5\n  batch:\n    max_records: 1.5\n"
	cfg, err := Parse([]byte(raw), env(nil))
	if err == nil {
		t.Errorf("accepted: server_id=%d topic_partitions=%d max_records=%d", cfg.Source.ServerID, cfg.Kafka.TopicPartitions, cfg.Kafka.Batch.MaxRecords)
	}
}

// A second YAML document is refused, never ignored. The failure guarded
// against: A second YAML document in the file is silently ignored.
func TestDecodeRefusesSecondDocument(t *testing.T) {
	raw := atkBase + "---\nrouter:\n  topic_prefix: prod.\n"
	cfg, err := Parse([]byte(raw), env(nil))
	if err == nil {
		t.Errorf("second document ignored silently (topic_prefix %q)", cfg.Router.TopicPrefix)
	}
}

// ${VAR} is expanded after parsing, so in the unquoted flow list
// `brokers: [${KAFKA_BROKERS}]` "{" is a flow indicator: such a file is a
// YAML syntax error. It is refused with the right line (yaml.v3 reports
// parser errors 0-based) and the advice to quote ${VAR} inside [ ] and { }.
func TestUnquotedVarInFlowListNamesLineAndFix(t *testing.T) {
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

// The second document's error names the line of its "---".
func TestSecondDocumentLine(t *testing.T) {
	_, err := Parse([]byte(atkBase+"---\nrouter:\n  topic_prefix: prod.\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "line 9: a second YAML document") {
		t.Fatalf("%v", err)
	}
}

// TestMissingNameSaysRequiredWithFileAndLine: a file without name says it
// is required, with the file and the line of the mapping it belongs in
// (it said name: "": write 1-200 characters..., with neither); an empty
// name is required too, at its own line.
func TestMissingNameSaysRequiredWithFileAndLine(t *testing.T) {
	t.Setenv("RELAY_MYSQL_PASSWORD", "x")
	_, err := Load("testdata/no-name.bad.yaml")
	want := "testdata/no-name.bad.yaml: invalid configuration: name (line 1, not set): required: write the pipeline's name " +
		"(its checkpoint key and Kafka transactional id), 1-200 characters of letters, digits, '.', '_' or '-'"
	if err == nil || err.Error() != want || !errors.Is(err, ErrInvalid) {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}
	_, err = Parse([]byte(strings.Replace(base, "name: a\n", "name: \"\"\n", 1)), env(map[string]string{"PW": "x"}))
	if err == nil || !strings.HasPrefix(err.Error(), "invalid configuration: name (line 2): required: ") {
		t.Fatalf("empty name: got %v", err)
	}
}
