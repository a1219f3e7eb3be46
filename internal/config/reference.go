package config

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The configuration reference: every key with its type, default, example
// and meaning, from this package's definitions. docs/configuration.md and
// `outbox-relay config schema` are both made from Keys.

//go:generate go run ./docgen/cmd
//go:generate go run ../../tools/chartgen ../..

// Docs is the documentation read from this package's source by
// internal/config/docgen: the doc comment of each struct field
// ("Source.Hosts") and type ("TLS"), and the values of each type whose
// constants enumerate its choices ("Delivery": exactly-once, ...).
type Docs struct {
	Fields map[string]string
	Types  map[string]string
	Enums  map[string][]string
}

// SourceDocs returns the documentation generated into docs_gen.go.
func SourceDocs() Docs { return sourceDocs }

// Key is one configuration key.
type Key struct {
	Path    string   // kafka.batch.max_wait; router.additional_fields[].column
	Type    string   // as the reference shows it
	Default string   // YAML text; empty when there is none
	Example string   // YAML text
	Doc     string   // meaning
	Enum    []string // the values allowed, when Validate has fixed choices
	// Required: Validate refuses the configuration without it.
	Required bool
	// Secret: the key holds a secret (its field is tagged secret:"true"):
	// Redacted hides it, the reference says to write it as ${VAR} or in a
	// file, and the Helm chart refuses it in values (internal/chartgen).
	Secret bool

	typ reflect.Type
	def reflect.Value
}

// requiredKeys are refused empty by Validate.
var requiredKeys = []string{"name", "source.hosts", "source.user", "source.server_id", "source.tables", "kafka.brokers"}

// intEnums are the integer keys Validate allows only some values of.
var intEnums = map[string][]string{"kafka.transaction_lanes": {"1", "2"}}

// keyDocs is the meaning of the keys whose field has no doc comment, or
// only a terse line comment, by key path or by Type.Field.
var keyDocs = map[string]string{
	"TLS.Enabled":                          "Use TLS (on by itself when a file below is set).",
	"TLS.CAFile":                           "PEM CA certificates to verify the server with; empty: the system roots.",
	"TLS.CertFile":                         "Client certificate (PEM), with key_file.",
	"TLS.KeyFile":                          "Client certificate's private key (PEM), with cert_file.",
	"TLS.ServerName":                       "Name to verify in the server's certificate; empty: the host dialed.",
	"TLS.InsecureSkipVerify":               "No verification of the server at all: only when asked, never in production.",
	"source.tables":                        "The captured outbox tables, db.table.",
	"kafka.sasl.mechanism":                 "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM; empty: no SASL.",
	"router.preset":                        "Column names of the *_column keys left unset: outbox (event_id, aggregate_type, aggregate_id, event_type, payload) or debezium (id, aggregatetype, aggregateid, type, payload).",
	"router.timestamp_column":              "Record timestamp from this column instead of the commit time (a TIMESTAMP is the instant it holds; a DATETIME is read as UTC).",
	"router.schema_version_column":         "Column of the envelope's schemaVersion.",
	"router.value_format":                  "payload: the value is the payload's bytes as stored; envelope: a JSON envelope (eventId, eventType, aggregateType, aggregateId, occurredAt, schemaVersion, payload); cloudevents: a CloudEvents 1.0 event (Kafka protocol binding, see cloudevents_mode).",
	"router.cloudevents_mode":              "With value_format cloudevents: structured (the value is the event as JSON, content-type application/cloudevents+json) or binary (the value is the payload as stored, the attributes ce_* headers, datacontenttype the content-type header).",
	"router.cloudevents_source":            "The CloudEvents source attribute, a URI-reference; empty: /outbox-relay/<name>/<db.table>.",
	"router.tracing_column":                "Column of each row's trace context, a W3C traceparent (a tracestate on a second line) or Debezium's serialized span context (traceparent=/tracestate= lines): it becomes the record's traceparent and tracestate headers; NULL, empty or a table without it: none; an invalid value: none, counted in outbox_relay_tracing_context_invalid_total. Preset debezium: tracingspancontext; else unset.",
	"name":                                 "Pipeline name: the checkpoint key and the Kafka transactional.id (with name#2, see kafka.transaction_lanes); letters, digits, '.', '_' and '-'.",
	"source.hosts":                         "host:port list, in order of preference: the relay reads the first host that has every transaction it already published (docs/source.md \"Source failover\"); list the replicas (with log_slave_updates) and/or the primary of one replication topology.",
	"source.user":                          "The replication user (README \"Against your own server\" lists its grants).",
	"source.password":                      "The replication user's password; write it as ${VAR}, or use password_file.",
	"source.server_id":                     "Replica server id, unique among the server's replicas.",
	"source.flavor":                        "auto (detected from the server's version), mysql or mariadb; a configured flavor must match the server.",
	"source.start":                         "Where to start without a checkpoint: now, earliest (the oldest binlog still on the server) or a GTID set.",
	"source.allow_public_key_retrieval":    "On a plaintext connection, encrypt the password with whatever RSA key the server sends (unverified: anyone in the middle can substitute theirs); refused by default.",
	"source.server_public_key_file":        "PEM RSA public key of the server (MySQL's public_key.pem): on a plaintext connection, caching_sha2_password full authentication and sha256_password get the password encrypted by the relay with this key only, whatever key the server sends; a server sending another key is refused by name.",
	"kafka.brokers":                        "Seed brokers, host:port.",
	"kafka.delivery":                       "exactly-once (Kafka transactions) or at-least-once.",
	"kafka.checkpoint_topic":               "The topic of the checkpoints: compacted, one partition; created if missing.",
	"kafka.topic_partitions":               "Partitions of the event topics the relay creates.",
	"kafka.replication_factor":             "Replication factor of the topics the relay creates; -1: the broker's default.",
	"kafka.batch.max_records":              "Records per Kafka transaction (at-least-once: per batch).",
	"kafka.batch.max_bytes":                "Key and value bytes per Kafka transaction (at-least-once: per batch).",
	"kafka.batch.max_wait":                 "Longest a batch stays open while the binlog keeps coming.",
	"kafka.tls":                            "TLS to the brokers; as source.tls.",
	"source.tls":                           "TLS to the source server.",
	"kafka.sasl.user":                      "PLAIN and SCRAM: the user name.",
	"kafka.sasl.password":                  "PLAIN and SCRAM: the password; write it as ${VAR}, or use password_file.",
	"kafka.sasl.password_file":             "PLAIN and SCRAM: a file holding the password (trailing newline dropped).",
	"kafka.sasl.token":                     "OAUTHBEARER: the token; write it as ${VAR}, or use token_file.",
	"kafka.sasl.token_file":                "OAUTHBEARER: a file holding the token, read at each authentication (rotated tokens).",
	"kafka.sasl.extensions":                "OAUTHBEARER: SASL extensions sent with the token.",
	"kafka.sasl.access_key_id":             "AWS_MSK_IAM: the access key id; unset: AWS_ACCESS_KEY_ID at each authentication.",
	"kafka.sasl.secret_access_key":         "AWS_MSK_IAM: the secret access key (or secret_access_key_file); unset: AWS_SECRET_ACCESS_KEY.",
	"kafka.sasl.secret_access_key_file":    "AWS_MSK_IAM: a file holding the secret access key, read at each authentication.",
	"kafka.sasl.session_token":             "AWS_MSK_IAM: the session token (or session_token_file); unset: AWS_SESSION_TOKEN.",
	"kafka.sasl.session_token_file":        "AWS_MSK_IAM: a file holding the session token, read at each authentication.",
	"router.event_id_column":               "Column of the record's id header; unset: the preset's.",
	"router.aggregate_type_column":         "Column naming the topic (topic_prefix + its value); unset: the preset's.",
	"router.aggregate_id_column":           "Column of the record's key; unset: the preset's.",
	"router.event_type_column":             "Column of the record's type header (NULL gives no header); unset: the preset's.",
	"router.payload_column":                "Column of the record's value; unset: the preset's.",
	"router.topic_prefix":                  "Topic = this prefix + the aggregate type; not in outbox-relay.* or __* (a row routed to the relay's own topics or Kafka's is a bad row).",
	"router.dead_letter_topic":             "The topic of bad rows with on_error dead-letter; empty: outbox-relay.dead-letter.<name>; not the checkpoint or lock topic, __*, or another pipeline's outbox-relay.dead-letter.<name>.",
	"router.additional_fields[].column":    "The column to copy.",
	"router.additional_fields[].placement": "header (a NULL value gives no header, '' an empty one), envelope (needs value_format envelope; NULL is null) or partition (the record's partition number; NULL is a bad row).",
	"router.additional_fields[].alias":     "The header or envelope field name; empty: the column's.",
	"router.topic_replacement":             "The topic, from the aggregate type matched by topic_regex (default ^(?P<routedByValue>.*)$): such as outbox.event.${routedByValue} or ${domain}.$2; empty: topic_prefix + the aggregate type.",
	"http.listen":                          "Address of /metrics, /healthz and /readyz; empty disables it.",
	"log.format":                           "json or console (run --log-format console).",
	"log.level":                            "debug, info, warn or error.",
}

// keyExamples are the examples of the keys whose default is no example.
var keyExamples = map[string]string{
	"name":                                 "alarms",
	"source.hosts":                         `["db1:3306", "db2:3306"]`,
	"source.user":                          "relay",
	"source.password":                      "${RELAY_MYSQL_PASSWORD}",
	"source.password_file":                 "/run/secrets/mysql-password",
	"source.tls.ca_file":                   "/etc/outbox-relay/ca.pem",
	"source.tls.cert_file":                 "/etc/outbox-relay/client.pem",
	"source.tls.key_file":                  "/etc/outbox-relay/client-key.pem",
	"source.tls.server_name":               "db.internal",
	"source.server_id":                     "4242",
	"source.tables":                        `["app.outbox"]`,
	"source.start":                         "earliest",
	"source.server_public_key_file":        "/etc/outbox-relay/mysql-public-key.pem",
	"source.max_packet_bytes":              "67108864",
	"kafka.brokers":                        `["kafka1:9092", "kafka2:9092"]`,
	"kafka.tls.ca_file":                    "/etc/outbox-relay/kafka-ca.pem",
	"kafka.tls.cert_file":                  "/etc/outbox-relay/kafka-client.pem",
	"kafka.tls.key_file":                   "/etc/outbox-relay/kafka-client-key.pem",
	"kafka.tls.server_name":                "kafka.internal",
	"kafka.sasl.mechanism":                 "SCRAM-SHA-512",
	"kafka.sasl.user":                      "relay",
	"kafka.sasl.password":                  "${RELAY_KAFKA_PASSWORD}",
	"kafka.sasl.password_file":             "/run/secrets/kafka-password",
	"kafka.sasl.token":                     "${RELAY_KAFKA_TOKEN}",
	"kafka.sasl.token_file":                "/run/secrets/kafka-token",
	"kafka.sasl.extensions":                "{logicalCluster: lkc-123}",
	"kafka.sasl.access_key_id":             "${AWS_ACCESS_KEY_ID}",
	"kafka.sasl.secret_access_key":         "${AWS_SECRET_ACCESS_KEY}",
	"kafka.sasl.secret_access_key_file":    "/run/secrets/aws-secret-access-key",
	"kafka.sasl.session_token":             "${AWS_SESSION_TOKEN}",
	"kafka.sasl.session_token_file":        "/run/secrets/aws-session-token",
	"kafka.replication_factor":             "3",
	"kafka.linger":                         "5ms",
	"kafka.transaction_lanes":              "1",
	"router.event_id_column":               "id",
	"router.aggregate_type_column":         "aggregatetype",
	"router.aggregate_id_column":           "aggregateid",
	"router.event_type_column":             "type",
	"router.payload_column":                "payload",
	"router.timestamp_column":              "created_at",
	"router.schema_version_column":         "schema_version",
	"router.topic_prefix":                  "events.",
	"router.cloudevents_source":            "https://alarms.example.com/outbox",
	"router.tracing_column":                "tracingspancontext",
	"tracing.otlp_endpoint":                "http://otel-collector:4318",
	"tracing.sample_ratio":                 "0.1",
	"router.additional_fields":             "[{column: tenant_id, placement: header, alias: tenant}]",
	"router.additional_fields[].column":    "tenant_id",
	"router.additional_fields[].placement": "header",
	"router.additional_fields[].alias":     "tenant",
	"router.topic_regex":                   `^(?P<domain>[a-z]+)\.(.*)$`,
	"router.topic_replacement":             "${domain}.$2",
	"router.dead_letter_topic":             "alarms.dead-letter",
	"router.tables":                        `{"billing.outbox": {preset: debezium}}`,
	"ha.instance_id":                       "relay-a",
	"ha.session_timeout":                   "10s",
	"http.listen":                          "0.0.0.0:9464",
	"http.stall_timeout":                   "5m",
	"log.progress_interval":                "1m",
}

// Keys lists every key of the configuration, in the order of the struct
// fields, documented by d.
func (d Docs) Keys() []Key {
	var keys []Key
	d.walk(&keys, "", reflect.ValueOf(defaults()))
	return keys
}

func (d Docs) walk(keys *[]Key, prefix string, v reflect.Value) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		k := Key{Path: prefix + name, typ: f.Type, def: v.Field(i)}
		k.Doc = keyDocs[k.Path]
		if k.Doc == "" {
			k.Doc = keyDocs[t.Name()+"."+f.Name]
		}
		if k.Doc == "" {
			k.Doc = goNames(d.Fields[t.Name()+"."+f.Name], f.Name, name)
		}
		if k.Doc == "" && f.Type.PkgPath() != "" && f.Type != durationType {
			k.Doc = d.Types[f.Type.Name()]
		}
		k.Enum = d.Enums[f.Type.Name()]
		if e, ok := intEnums[k.Path]; ok {
			k.Enum = e
		}
		k.Required = slices.Contains(requiredKeys, k.Path)
		k.Secret = isSecret(f)
		k.Type = typeName(f.Type)
		k.Default = yamlText(k.def)
		k.Example = keyExamples[k.Path]
		if k.Example == "" {
			k.Example = example(k)
		}
		*keys = append(*keys, k)
		switch {
		case f.Type.Kind() == reflect.Struct && f.Type != durationType:
			d.walk(keys, k.Path+".", v.Field(i))
		case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
			d.walk(keys, k.Path+"[].", reflect.New(f.Type.Elem()).Elem())
		}
	}
}

// goNameRef is a Go field name in a doc comment, such as HeartbeatPeriod.
var goNameRef = regexp.MustCompile(`\b[A-Z][a-z]+(?:[A-Z][a-z]*)+\b`)

// goNames rewrites a field's doc comment for the reference: the Go names
// of fields it mentions become their keys (PasswordFile: password_file).
func goNames(doc, field, key string) string {
	if rest, ok := strings.CutPrefix(doc, field+" "); ok {
		doc = "`" + key + "` " + rest
	}
	return goNameRef.ReplaceAllStringFunc(doc, func(n string) string {
		if k, ok := yamlNames()[n]; ok {
			return k
		}
		return n
	})
}

// yamlNames maps the Go names of the configuration's fields to their keys.
func yamlNames() map[string]string {
	names := map[string]string{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == durationType {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" && f.IsExported() {
				if _, seen := names[f.Name]; !seen {
					names[f.Name] = name
					walk(f.Type)
				}
			}
		}
	}
	walk(reflect.TypeFor[Config]())
	return names
}

// example is a key's example when keyExamples has none: a value other
// than the default.
func example(k Key) string {
	switch {
	case len(k.Enum) > 0:
		for _, e := range k.Enum {
			if e != k.Default && e != "" {
				return e
			}
		}
	case k.typ.Kind() == reflect.Bool:
		return "true"
	}
	return k.Default
}

// typeName is how the reference names a key's type.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "duration"
	case t == reflect.TypeFor[map[string]RouterConfig]():
		return "mapping of db.table to router settings"
	case t.Kind() == reflect.Struct:
		return "mapping"
	case t.Kind() == reflect.Bool:
		return "boolean"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	case t.Kind() == reflect.Float64:
		return "number"
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return "list of strings"
	case t.Kind() == reflect.Slice:
		return "list of mappings"
	case t.Kind() == reflect.Map:
		return "mapping of strings"
	}
	return t.String()
}

// yamlText writes a default value as YAML text; empty for a zero string,
// list or mapping.
func yamlText(v reflect.Value) string {
	switch {
	case v.Type() == durationType:
		return shortDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.String:
		return v.String()
	case v.Kind() == reflect.Bool:
		return strconv.FormatBool(v.Bool())
	case v.Kind() >= reflect.Int && v.Kind() <= reflect.Int64:
		return strconv.FormatInt(v.Int(), 10)
	case v.Kind() >= reflect.Uint && v.Kind() <= reflect.Uint64:
		return strconv.FormatUint(v.Uint(), 10)
	case v.Kind() == reflect.Float64:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	}
	return ""
}

// shortDuration writes 1m rather than time's 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// intBounds are the smallest and largest value of an integer type.
func intBounds(t reflect.Type) (lo, hi string) {
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		return "0", strconv.FormatUint(uint64(1)<<t.Bits()-1, 10)
	}
	return strconv.FormatInt(-(int64(1) << (t.Bits() - 1)), 10), strconv.FormatInt(int64(1)<<(t.Bits()-1)-1, 10)
}

// isSecret reports whether a configuration field holds a secret: the one
// mark every list of secrets derives from (SecretKeys, Redacted).
func isSecret(f reflect.StructField) bool { return f.Tag.Get("secret") == "true" }

// SecretKeys lists the paths of the keys that hold a secret, in the order
// of Keys.
func SecretKeys() []string {
	var paths []string
	for _, k := range SourceDocs().Keys() {
		if k.Secret {
			paths = append(paths, k.Path)
		}
	}
	return paths
}

func (k Key) String() string { return fmt.Sprintf("%s (%s)", k.Path, k.Type) }
