package config

import (
	"strings"
	"testing"
)

const routerBase = `name: alarms
source: {hosts: ["db:3306"], user: relay, server_id: 7, tables: ["app.outbox", "app.other"]}
kafka: {brokers: ["k:9092"]}
`

// TestTracingColumnPresetDefault: preset debezium reads Debezium's
// tracingspancontext column, preset outbox none; a table of the other
// preset takes that preset's default.
func TestTracingColumnPresetDefault(t *testing.T) {
	for _, tt := range []struct{ yaml, table, want string }{
		{"router: {preset: debezium}\n", "app.outbox", "tracingspancontext"},
		{"router: {}\n", "app.outbox", ""},
		{"router: {preset: debezium, tracing_column: span}\n", "app.outbox", "span"},
		{"router: {preset: debezium, tables: {app.other: {preset: outbox}}}\n", "app.other", ""},
		{"router: {tables: {app.other: {preset: debezium}}}\n", "app.other", "tracingspancontext"},
	} {
		cfg, err := Parse([]byte(routerBase+tt.yaml), env(nil))
		if err != nil {
			t.Fatalf("%s: %v", tt.yaml, err)
		}
		if got := cfg.Router.For(tt.table).TracingColumn; got != tt.want {
			t.Errorf("%s: %s tracing_column %q, want %q", strings.TrimSpace(tt.yaml), tt.table, got, tt.want)
		}
	}
	// For on an entry built in code: another preset renames the column too
	r := Default().Router
	r.Preset, r.TracingColumn = PresetDebezium, "tracingspancontext"
	r.Tables = map[string]RouterConfig{"app.other": {Preset: PresetOutbox}}
	if got := r.For("app.other").TracingColumn; got != "" {
		t.Errorf("code-built outbox table under a debezium router: tracing_column %q, want none", got)
	}
}

// TestCloudEventsSettings: the mode defaults to structured, the source to
// one derived from the pipeline and table; bad values name their key.
func TestCloudEventsSettings(t *testing.T) {
	cfg, err := Parse([]byte(routerBase+"router: {value_format: cloudevents}\n"), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Router.CloudEventsMode != CloudEventsStructured {
		t.Errorf("cloudevents_mode %q, want structured", cfg.Router.CloudEventsMode)
	}
	if got := cfg.Router.CloudEventsSourceFor("alarms eu", "app.outbox"); got != "/outbox-relay/alarms%20eu/app.outbox" {
		t.Errorf("default source %q", got)
	}
	cfg.Router.CloudEventsSource = "urn:x"
	if got := cfg.Router.CloudEventsSourceFor("alarms", "app.outbox"); got != "urn:x" {
		t.Errorf("configured source %q", got)
	}
	for _, tt := range []struct{ yaml, want string }{
		{"router: {cloudevents_mode: batched}\n", `router.cloudevents_mode (line 4): "batched": write structured or binary`},
		{"router: {value_format: cloudevents, cloudevents_source: \"a b\"}\n", `router.cloudevents_source (line 4): "a b": character ' ' is not allowed in a URI-reference`},
		{"router: {value_format: cloudevents, cloudevents_source: \"http://[::1\"}\n", `router.cloudevents_source (line 4): "http://[::1": not a URI-reference`},
		{"router: {value_format: yaml}\n", `write payload, envelope or cloudevents`},
		{"router: {tracing_column: tp, additional_fields: [{column: tracestate, placement: header}]}\n", "header tracestate would duplicate the trace header of tracing_column tp"},
	} {
		_, err := Parse([]byte(routerBase+tt.yaml), env(nil))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", strings.TrimSpace(tt.yaml), err, tt.want)
		}
	}
}
