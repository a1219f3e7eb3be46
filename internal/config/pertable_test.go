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

// The second document's error names the line of its "---".
func TestSecondDocumentLine(t *testing.T) {
	_, err := Parse([]byte(atkBase+"---\nrouter:\n  topic_prefix: prod.\n"), env(nil))
	if err == nil || !strings.Contains(err.Error(), "line 9: a second YAML document") {
		t.Fatalf("%v", err)
	}
}

// A broker or host written as a URL with credentials: the error hides them.
func TestBrokerErrorMasksCredentials(t *testing.T) {
	raw := strings.Replace(atkBase, `brokers: ["k1:9092"]`, `brokers: ["sasl://u:pw123@k1:9092"]`, 1)
	_, err := Parse([]byte(raw), env(nil))
	if err == nil || strings.Contains(err.Error(), "pw123") || !strings.Contains(err.Error(), "URL or holds credentials") {
		t.Fatalf("%v", err)
	}
}
