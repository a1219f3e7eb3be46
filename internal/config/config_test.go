package config

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestTestdata(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	lookup := env(map[string]string{"RELAY_MYSQL_PASSWORD": "s3cret"})
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Parse(raw, lookup)
			switch {
			case strings.HasSuffix(f, ".good.yaml") && err != nil:
				t.Fatalf("want valid, got %v", err)
			case strings.HasSuffix(f, ".bad.yaml"):
				if err == nil {
					t.Fatal("want an error, got none")
				}
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error %v does not wrap ErrInvalid", err)
				}
			}
		})
	}
}

func TestDefaultsAndExpansion(t *testing.T) {
	raw, _ := os.ReadFile("testdata/minimal.good.yaml")
	cfg, err := Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": "s3cret"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.Password != "s3cret" {
		t.Fatalf("password %q, want the expanded variable", cfg.Source.Password)
	}
	if cfg.Kafka.Delivery != ExactlyOnce || cfg.Source.Start != "now" || cfg.Source.Flavor != "auto" ||
		cfg.Kafka.CheckpointTopic != "outbox-relay.checkpoints" || cfg.Router.TopicPrefix != "outbox.event." ||
		cfg.Router.PayloadColumn != "payload" || cfg.HTTP.Listen != "127.0.0.1:9464" || cfg.Kafka.TransactionLanes != 2 ||
		cfg.Kafka.OnPartitionsAdded != PartitionsKeep {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
	full, _ := os.ReadFile("testdata/full.good.yaml")
	cfg, err = Parse(full, env(map[string]string{"RELAY_MYSQL_PASSWORD": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Batch.MaxWait != 50*time.Millisecond || cfg.Source.HeartbeatPeriod != 2*time.Second || cfg.Kafka.TopicPartitions != 12 ||
		cfg.Kafka.TransactionLanes != 1 || cfg.Kafka.OnPartitionsAdded != PartitionsAdopt {
		t.Fatalf("values not read: %+v", cfg.Kafka)
	}
}

func TestRedacted(t *testing.T) {
	raw, _ := os.ReadFile("testdata/minimal.good.yaml")
	cfg, err := Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": "s3cret-value"}))
	if err != nil {
		t.Fatal(err)
	}
	out := cfg.Redacted().YAML()
	if strings.Contains(out, "s3cret-value") || !strings.Contains(out, "REDACTED") {
		t.Fatalf("redacted config shows the secret or no marker:\n%s", out)
	}
	if cfg.Source.Password != "s3cret-value" {
		t.Fatal("Redacted changed the original")
	}
	// A rendered config parses back.
	if _, err := Parse([]byte(out), env(nil)); err != nil {
		t.Fatalf("rendered config does not parse: %v\n%s", err, out)
	}
}

func TestUnsetVariableNamed(t *testing.T) {
	raw, _ := os.ReadFile("testdata/unset-env.bad.yaml")
	_, err := Parse(raw, env(nil))
	if err == nil || !strings.Contains(err.Error(), "RELAY_TEST_NEVER_SET") {
		t.Fatalf("error %v does not name the variable", err)
	}
}

// TestConfigErrorsNeverShowExpandedValues: a secret variable written in
// the wrong keys (server_id, name, a host, a duration) makes errors that
// name the variable, never the value it expanded to.
func TestConfigErrorsNeverShowExpandedValues(t *testing.T) {
	raw, _ := os.ReadFile("testdata/secret-in-wrong-key.bad.yaml")
	for _, secret := range []string{"s3cret-pw", `p@ss"w:rd\x1b[31m zz`} {
		_, err := Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": secret}))
		if err == nil {
			t.Fatal("want an error, got none")
		}
		msg := err.Error()
		for _, shown := range []string{secret, strconv.Quote(secret), strconv.Quote(secret)[1 : len(strconv.Quote(secret))-1]} {
			if strings.Contains(msg, shown) {
				t.Fatalf("the error shows the expanded value %q:\n%s", shown, msg)
			}
		}
		for _, key := range []string{"source.server_id", "source.hosts[0]", "kafka.delivery", "kafka.batch.max_wait"} {
			if !strings.Contains(msg, key) {
				t.Errorf("the error does not name %s:\n%s", key, msg)
			}
		}
		if !strings.Contains(msg, "${RELAY_MYSQL_PASSWORD}") {
			t.Fatalf("the error does not name the variable:\n%s", msg)
		}
	}
}

func TestSecretsFromFilesAndRedaction(t *testing.T) {
	raw, _ := os.ReadFile("testdata/secure.good.yaml")
	cfg, err := Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": "sasl-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.Password != "s3cret-from-file" || cfg.Kafka.SASL.Password != "sasl-secret" {
		t.Fatalf("passwords %q %q", cfg.Source.Password, cfg.Kafka.SASL.Password)
	}
	out := cfg.Redacted().YAML()
	if strings.Contains(out, "s3cret-from-file") || strings.Contains(out, "sasl-secret") {
		t.Fatalf("a secret in the redacted config:\n%s", out)
	}
	if c, err := cfg.Kafka.TLS.Config(); err != nil || c == nil {
		t.Fatalf("kafka tls enabled: %v %v", c, err)
	}
	if _, err := cfg.Source.TLS.Config(); err == nil {
		t.Fatal("a CA file without a certificate in it should fail")
	}
	if c, _ := (TLS{}).Config(); c != nil {
		t.Fatal("TLS off should give no config")
	}
}

func TestDebeziumPreset(t *testing.T) {
	raw, _ := os.ReadFile("testdata/debezium.good.yaml")
	cfg, err := Parse(raw, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Router
	if r.EventIDColumn != "id" || r.AggregateTypeColumn != "aggregatetype" || r.AggregateIDColumn != "aggregateid" ||
		r.EventTypeColumn != "type" || r.PayloadColumn != "payload" {
		t.Fatalf("debezium preset columns: %+v", r)
	}
	// A column set explicitly wins over the preset.
	raw = []byte(strings.Replace(string(raw), "preset: debezium", "preset: debezium\n  aggregate_id_column: deviceid", 1))
	cfg, err = Parse(raw, env(nil))
	if err != nil || cfg.Router.AggregateIDColumn != "deviceid" || cfg.Router.EventIDColumn != "id" {
		t.Fatalf("explicit column with preset: %+v %v", cfg.Router, err)
	}
}

func TestPerTableRouter(t *testing.T) {
	raw, _ := os.ReadFile("testdata/per-table.good.yaml")
	cfg, err := Parse(raw, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	base, legacy := cfg.Router.For("app.outbox"), cfg.Router.For("legacy.outboxevent")
	if base.EventIDColumn != "event_id" || base.OnError != "dead-letter" || base.InvalidOp != "error" || base.TopicReplacement != "" {
		t.Fatalf("app.outbox: %+v", base)
	}
	if legacy.EventIDColumn != "id" || legacy.AggregateTypeColumn != "aggregatetype" || legacy.OnError != "dead-letter" ||
		legacy.TopicReplacement != "${domain}.$2" || legacy.AdditionalMissing != "skip" || len(legacy.AdditionalFields) != 1 {
		t.Fatalf("legacy.outboxevent: %+v", legacy)
	}
}

func TestExpansionEscapes(t *testing.T) {
	raw := []byte("name: a\nsource: {hosts: [\"db:1\"], user: \"$${USER}-${WHO}\", server_id: 1, tables: [a.b]}\nkafka: {brokers: [k:1]}\nrouter: {topic_replacement: \"ev.${routedByValue}\"}\n")
	cfg, err := Parse(raw, env(map[string]string{"WHO": "relay", "USER": "wrong"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.User != "${USER}-relay" || cfg.Router.TopicReplacement != "ev.${routedByValue}" {
		t.Fatalf("user %q replacement %q", cfg.Source.User, cfg.Router.TopicReplacement)
	}
}

func TestBackgroundAuditIsOffByDefaultWithAnHourWindow(t *testing.T) {
	raw, _ := os.ReadFile("testdata/minimal.good.yaml")
	cfg, err := Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Audit; a.Interval != 0 || a.Window != time.Hour || a.Delay != time.Minute || a.Margin != 5*time.Minute || a.Wait != 10*time.Second {
		t.Fatalf("audit defaults: %+v", a)
	}
	raw, _ = os.ReadFile("testdata/audit.good.yaml")
	if cfg, err = Parse(raw, env(nil)); err != nil {
		t.Fatal(err)
	}
	if a := cfg.Audit; a.Interval != 15*time.Minute || a.Window != 2*time.Hour || a.Delay != 2*time.Minute || a.Margin != 10*time.Minute || a.Wait != 30*time.Second {
		t.Fatalf("audit values not read: %+v", a)
	}
	for _, bad := range []string{"interval: 500ms", "window: 30s", "delay: -1s", "wait: -1s"} {
		k, v, _ := strings.Cut(bad, ": ")
		y := strings.Replace(string(raw), "\n  "+k+": ", "\n  "+k+": "+v+" #", 1)
		if _, err := Parse([]byte(y), env(nil)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "audit."+k) {
			t.Errorf("audit.%s %s: got %v, want an error naming audit.%s", k, v, err, k)
		}
	}
}

// Spans are off unless tracing.otlp_endpoint is set; a set section is
// read; a bad one names its key; credentials written into the endpoint (its
// user information, or a query the exporter would drop: an API key) are
// refused without being repeated.
func TestTracingIsOffByDefaultAndRefusesCredentialsInTheEndpoint(t *testing.T) {
	raw, _ := os.ReadFile("testdata/minimal.good.yaml")
	cfg, err := Parse(raw, env(map[string]string{"RELAY_MYSQL_PASSWORD": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if tr := cfg.Tracing; tr.OTLPEndpoint != "" || tr.OTLPProtocol != OTLPHTTP || tr.SampleRatio != 1 {
		t.Fatalf("tracing defaults: %+v", tr)
	}
	raw, _ = os.ReadFile("testdata/tracing.good.yaml")
	if cfg, err = Parse(raw, env(nil)); err != nil {
		t.Fatal(err)
	}
	if tr := cfg.Tracing; tr.OTLPEndpoint != "http://otel-collector:4317" || tr.OTLPProtocol != OTLPGRPC || tr.SampleRatio != 0.25 {
		t.Fatalf("tracing values not read: %+v", tr)
	}
	for file, key := range map[string]string{
		"tracing-endpoint-scheme": "tracing.otlp_endpoint", "tracing-endpoint-credentials": "tracing.otlp_endpoint",
		"tracing-sample-ratio": "tracing.sample_ratio", "tracing-protocol": "tracing.otlp_protocol",
		"tracing-endpoint-query": "tracing.otlp_endpoint", "tracing-endpoint-query-scheme": "tracing.otlp_endpoint",
	} {
		raw, _ := os.ReadFile("testdata/" + file + ".bad.yaml")
		_, err := Parse(raw, env(nil))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: got %v, want an error naming %s", file, err, key)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error repeats the credentials: %v", file, err)
		}
	}
}
