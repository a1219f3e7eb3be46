package config

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// An entry built in code holds only what it changes: For puts it on top
// of the router (a different preset renames the unset columns).
func TestForCodeBuiltEntry(t *testing.T) {
	r := Default().Router
	r.Tables = map[string]RouterConfig{"a.b": {Preset: PresetDebezium, TopicPrefix: "p."}}
	got := r.For("a.b")
	if got.TopicPrefix != "p." || got.PayloadColumn != "payload" || got.EventIDColumn != "id" || got.ValueFormat != FormatPayload {
		t.Fatalf("%+v", got)
	}
}

// A loaded "" override survives print-config and a second Load.
func TestEmptyOverrideSurvivesMarshal(t *testing.T) {
	raw := atkBase + `router:
  tables:
    app.other:
      topic_prefix: ""
`
	cfg, err := Parse([]byte(raw), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Parse(out, env(nil))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if p := again.Router.For("app.other").TopicPrefix; p != "" {
		t.Fatalf("topic_prefix %q after a round trip", p)
	}
	if p := again.Router.For("app.outbox").TopicPrefix; p != "outbox.event." {
		t.Fatalf("router topic_prefix %q", p)
	}
}

// Merge keys: a list of aliases, the first one wins, the own key wins over
// both; a merge of a scalar is refused.
func TestMergeKeyList(t *testing.T) {
	raw := strings.Replace(atkBase, "tables: [app.outbox, app.other]", "tables: [app.outbox, app.other, app.third]", 1) + `router:
  tables:
    app.outbox: &a
      invalid_op: fatal
      topic_prefix: a.
    app.third: &b
      invalid_op: error
      on_error: dead-letter
      dead_letter_topic: dlq
    app.other:
      <<: [*a, *b]
      topic_prefix: own.
`
	cfg, err := Parse([]byte(raw), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Router.For("app.other")
	if o.InvalidOp != InvalidOpFatal || o.TopicPrefix != "own." || o.OnError != OnErrorDeadLetter || o.DeadLetterTopic != "dlq" {
		t.Fatalf("%+v", o)
	}
	_, err = Parse([]byte(atkBase+"router:\n  <<: 3\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "merge key") {
		t.Fatalf("merge of a scalar: %v", err)
	}
}

// A per-table override to "" applies. The failure guarded against: a
// per-table override that sets a string setting to "" (a legal value:
// topic_prefix "" publishes to the aggregate type itself; timestamp_column
// "" uses the commit time) is silently dropped by RouterConfig.For, which
// copies only non-zero fields: the table keeps the router's value, so its
// records go to another topic than configured.
func TestPerTableEmptyOverrideApplies(t *testing.T) {
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

// A per-table override written as a YAML alias keeps the aliased mapping's
// columns. The failure guarded against: a per-table override written as a
// YAML alias of another table's entry, with a different preset: the columns
// the aliased mapping names are reset to the preset's (routerTables looks
// for set keys only in a MappingNode).
func TestPerTableAliasKeepsColumns(t *testing.T) {
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

// YAML merge keys in per-table entries apply. The failure guarded against:
// yAML merge keys, the usual way to share settings between per-table
// entries, are refused as an unknown key "<<".
func TestPerTableMergeKey(t *testing.T) {
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

// A problem in a per-table override names the line of the offending key.
// The failure guarded against: a problem in a per-table override names the
// line of "tables:" instead of the offending key: findKey splits the path
// on every dot, and the table name db.table has one.
func TestPerTableProblemNamesItsLine(t *testing.T) {
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

// A router value spelled "tables" does not hide the per-table overrides.
// The failure guarded against: decodeStruct finds router.tables with
// IndexFunc over keys AND values: a router value spelled "tables" before
// the key (a column, a prefix) is found first, at an odd index, and every
// per-table override is then dropped without a word.
func TestPerTableValueNamedTablesKeepsOverrides(t *testing.T) {
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
