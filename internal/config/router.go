package config

import (
	"cmp"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The router settings: which columns an outbox table has and how its rows
// become records, with per-table overrides (router.tables).

// RouterConfig selects columns and says how records look. Unset columns
// take the preset's names: "outbox" (default) the article's table, "debezium"
// the Debezium Outbox Event Router's.
type RouterConfig struct {
	Preset              Preset      `yaml:"preset"` // outbox | debezium
	EventIDColumn       string      `yaml:"event_id_column"`
	AggregateTypeColumn string      `yaml:"aggregate_type_column"`
	AggregateIDColumn   string      `yaml:"aggregate_id_column"`
	EventTypeColumn     string      `yaml:"event_type_column"`
	PayloadColumn       string      `yaml:"payload_column"`
	TimestampColumn     string      `yaml:"timestamp_column"`      // optional: record timestamp instead of the commit time
	SchemaVersionColumn string      `yaml:"schema_version_column"` // optional: envelope schemaVersion
	TopicPrefix         string      `yaml:"topic_prefix"`
	ValueFormat         ValueFormat `yaml:"value_format"` // payload | envelope | cloudevents
	// CloudEventsMode: structured (the value is a CloudEvents JSON event) or
	// binary (the value is the payload, the attributes ce_* headers), with
	// value_format cloudevents.
	CloudEventsMode CloudEventsMode `yaml:"cloudevents_mode"`
	// CloudEventsSource is the CloudEvents source attribute (a
	// URI-reference); empty: /outbox-relay/<name>/<db.table>.
	CloudEventsSource string `yaml:"cloudevents_source"`
	// TracingColumn holds each row's trace context (a W3C traceparent, or
	// Debezium's serialized span context): it becomes the record's
	// traceparent and tracestate headers. Preset debezium: tracingspancontext.
	TracingColumn string `yaml:"tracing_column"`
	// AdditionalFields copies more columns into headers or the envelope.
	AdditionalFields []AdditionalField `yaml:"additional_fields"`
	// NullPayload: tombstone (a record with a null value) or error.
	NullPayload NullPayload `yaml:"null_payload"`
	// TopicRegex and TopicReplacement name the topic from the aggregate type
	// (Debezium's route.topic.regex/replacement) when TopicReplacement is set.
	TopicRegex       string `yaml:"topic_regex"`
	TopicReplacement string `yaml:"topic_replacement"`
	// AdditionalMissing: error (a bad row) or skip, when a row lacks an
	// additional column.
	AdditionalMissing AdditionalMissing `yaml:"additional_missing"`
	// OnError: fail stops the relay at a bad row; dead-letter sends it to
	// DeadLetterTopic in the same Kafka transaction and goes on.
	OnError         OnError `yaml:"on_error"`
	DeadLetterTopic string  `yaml:"dead_letter_topic"`
	// InvalidOp is what an UPDATE or DELETE on an outbox table does: warn
	// (log, count, skip), error (the same at error level) or fatal (stop).
	InvalidOp InvalidOp `yaml:"invalid_op"`
	// Tables overrides these settings for single outbox tables (db.table).
	Tables map[string]RouterConfig `yaml:"tables,omitempty"`
	// complete marks an entry of Tables that Load decoded onto a copy of
	// the router: For returns it as it is.
	complete bool
}

// For returns the settings of table. Load decodes each entry onto a copy
// of r, so an entry it built is complete and comes back as it is (a
// setting the table sets to "" stays ""). An entry built in code holds only
// the settings it changes: its non-zero settings go on top of r, and a
// table with another preset takes that preset's column names for the
// columns it does not set.
func (r RouterConfig) For(table string) RouterConfig {
	o, ok := r.Tables[table]
	if !ok {
		return r
	}
	if o.complete {
		o.Tables = nil
		return o
	}
	out := r
	out.Tables = nil
	if o.Preset != "" && o.Preset != r.Preset {
		// a different preset renames the columns the table does not set
		out.EventIDColumn, out.AggregateTypeColumn, out.AggregateIDColumn, out.EventTypeColumn, out.PayloadColumn = "", "", "", "", ""
		if out.TracingColumn == presetTracingColumn[r.Preset] {
			out.TracingColumn = ""
		}
	}
	ov, dst := reflect.ValueOf(o), reflect.ValueOf(&out).Elem()
	for i := range ov.NumField() {
		if sf := dst.Type().Field(i); sf.Name != "Tables" && sf.IsExported() && !ov.Field(i).IsZero() {
			dst.Field(i).Set(ov.Field(i))
		}
	}
	out.applyPreset()
	return out
}

// MarshalYAML writes each entry of Tables complete (as For returns it),
// so that a router whose entries were built in code, holding only the
// settings they change, loads again as the same settings.
func (r RouterConfig) MarshalYAML() (any, error) {
	type plain RouterConfig // without this method
	p := plain(r)
	if len(r.Tables) > 0 {
		p.Tables = make(map[string]RouterConfig, len(r.Tables))
		for t := range r.Tables {
			p.Tables[t] = r.For(t)
		}
	}
	return p, nil
}

// AdditionalField is one more column in the record.
type AdditionalField struct {
	Column    string    `yaml:"column"`
	Placement Placement `yaml:"placement"` // header | envelope | partition
	Alias     string    `yaml:"alias"`
}

// Router settings with a fixed set of values; each value's constant below.
type (
	Preset            string // router.preset
	ValueFormat       string // router.value_format
	CloudEventsMode   string // router.cloudevents_mode
	NullPayload       string // router.null_payload
	AdditionalMissing string // router.additional_missing
	OnError           string // router.on_error
	InvalidOp         string // router.invalid_op
	Placement         string // router.additional_fields[].placement
)

// Values of the router settings.
const (
	PresetOutbox   Preset = "outbox"
	PresetDebezium Preset = "debezium"

	FormatPayload  ValueFormat = "payload"
	FormatEnvelope ValueFormat = "envelope"
	// FormatCloudEvents is CloudEvents 1.0 over the Kafka protocol binding.
	FormatCloudEvents ValueFormat = "cloudevents"

	CloudEventsStructured CloudEventsMode = "structured"
	CloudEventsBinary     CloudEventsMode = "binary"

	NullPayloadTombstone NullPayload = "tombstone"
	NullPayloadError     NullPayload = "error"

	AdditionalMissingError AdditionalMissing = "error"
	AdditionalMissingSkip  AdditionalMissing = "skip"

	OnErrorFail       OnError = "fail"
	OnErrorDeadLetter OnError = "dead-letter"

	InvalidOpWarn  InvalidOp = "warn"
	InvalidOpError InvalidOp = "error"
	InvalidOpFatal InvalidOp = "fatal"

	PlaceHeader    Placement = "header"
	PlaceEnvelope  Placement = "envelope"
	PlacePartition Placement = "partition"
)

var presets = map[Preset][5]string{ // event id, aggregate type, aggregate id, event type, payload
	"outbox":   {"event_id", "aggregate_type", "aggregate_id", "event_type", "payload"},
	"debezium": {"id", "aggregatetype", "aggregateid", "type", "payload"},
}

// presetTracingColumn is router.tracing_column's default by preset:
// Debezium's tracing.span.context.field default; none for outbox.
var presetTracingColumn = map[Preset]string{"debezium": "tracingspancontext"}

// applyPreset fills unset router columns from the preset.
func (r *RouterConfig) applyPreset() {
	p, ok := presets[r.Preset]
	if !ok {
		return // Validate reports it
	}
	if r.TracingColumn == "" {
		r.TracingColumn = presetTracingColumn[r.Preset]
	}
	for i, f := range []*string{&r.EventIDColumn, &r.AggregateTypeColumn, &r.AggregateIDColumn, &r.EventTypeColumn, &r.PayloadColumn} {
		if *f == "" {
			*f = p[i]
		}
	}
}

// validate returns the router's problems, each starting with its key.
func (r RouterConfig) validate() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if _, ok := presets[r.Preset]; !ok {
		bad("preset: %q: write outbox or debezium", r.Preset)
	}
	oneOf := func(key, v string, allowed ...string) {
		if !slices.Contains(allowed, v) {
			bad("%s: %q: write %s", key, v, orList(allowed))
		}
	}
	oneOf("value_format", string(r.ValueFormat), string(FormatPayload), string(FormatEnvelope), string(FormatCloudEvents))
	oneOf("cloudevents_mode", string(r.CloudEventsMode), string(CloudEventsStructured), string(CloudEventsBinary))
	if r.ValueFormat == FormatCloudEvents && r.EventTypeColumn == "" {
		bad("event_type_column: empty: value_format cloudevents needs it (the required type attribute)")
	}
	if r.CloudEventsSource != "" {
		if err := checkURIReference(r.CloudEventsSource); err != nil {
			bad("cloudevents_source: %q: %v", r.CloudEventsSource, err)
		}
	}
	if r.TracingColumn != "" {
		for i, f := range r.AdditionalFields {
			if name := cmp.Or(f.Alias, f.Column); f.Placement == PlaceHeader && (name == "traceparent" || name == "tracestate") {
				bad("additional_fields[%d]: header %s would duplicate the trace header of tracing_column %s: remove one", i, name, r.TracingColumn)
			}
		}
	}
	oneOf("null_payload", string(r.NullPayload), string(NullPayloadTombstone), string(NullPayloadError))
	oneOf("additional_missing", string(r.AdditionalMissing), string(AdditionalMissingError), string(AdditionalMissingSkip))
	oneOf("on_error", string(r.OnError), string(OnErrorFail), string(OnErrorDeadLetter))
	oneOf("invalid_op", string(r.InvalidOp), string(InvalidOpWarn), string(InvalidOpError), string(InvalidOpFatal))
	for i, f := range r.AdditionalFields {
		if f.Column == "" {
			bad("additional_fields[%d].column: empty: write the column to copy", i)
		}
		switch f.Placement {
		case "header", "partition":
		case "envelope":
			if r.ValueFormat != "envelope" {
				bad("additional_fields[%d].placement: envelope needs value_format envelope", i)
			}
		default:
			bad("additional_fields[%d].placement: %q: write header, envelope or partition", i, f.Placement)
		}
	}
	if r.TopicRegex != "" {
		if _, err := regexp.Compile(r.TopicRegex); err != nil {
			bad("topic_regex: %q is not a valid regular expression (Go RE2 syntax): %v", r.TopicRegex, strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		}
		if r.TopicReplacement == "" {
			bad("topic_regex: needs topic_replacement, such as \"events.$1\"")
		}
	}
	if r.TopicPrefix != "" {
		if err := checkTopicChars(r.TopicPrefix, 248); err != nil {
			bad("topic_prefix: %v", err)
		}
	}
	if r.DeadLetterTopic != "" { // empty: outbox-relay.dead-letter.<name>
		if err := checkTopic(r.DeadLetterTopic); err != nil {
			bad("dead_letter_topic: %v", err)
		}
	}
	for _, col := range [][2]string{
		{"event_id_column", r.EventIDColumn}, {"aggregate_type_column", r.AggregateTypeColumn},
		{"aggregate_id_column", r.AggregateIDColumn}, {"payload_column", r.PayloadColumn},
	} {
		if col[1] == "" {
			bad("%s: empty: write the column name", col[0])
		}
	}
	return errs
}

// CloudEventsSourceFor is the CloudEvents source attribute of table's
// records: cloudevents_source, else /outbox-relay/<pipeline>/<db.table>.
func (r RouterConfig) CloudEventsSourceFor(pipeline, table string) string {
	if r.CloudEventsSource != "" {
		return r.CloudEventsSource
	}
	return "/outbox-relay/" + url.PathEscape(pipeline) + "/" + url.PathEscape(table)
}

// checkURIReference accepts a non-empty RFC 3986 URI-reference, as the
// CloudEvents source attribute must be.
func checkURIReference(s string) error {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`"<>\^`+"`{|}", c) >= 0 {
			return fmt.Errorf("character %q is not allowed in a URI-reference: percent-encode it", c)
		}
	}
	if _, err := url.Parse(s); err != nil {
		return fmt.Errorf("not a URI-reference: %v", strings.TrimPrefix(err.Error(), "parse "+strconv.Quote(s)+": "))
	}
	return nil
}

func orList(v []string) string {
	if len(v) == 1 {
		return v[0]
	}
	return strings.Join(v[:len(v)-1], ", ") + " or " + v[len(v)-1]
}
