// Package router turns one outbox row into one Kafka record, in the style of
// the Debezium Outbox Event Router: topic per aggregate type, key = aggregate
// id, value = payload bytes exactly as stored, header "id" = event id.
//
// Values are carried as they are stored: the id, type and additional
// header values and the key keep every byte of their column, control
// characters (CR, LF, ESC, NUL) included. Kafka headers and keys are bytes,
// and a consumer that deduplicates on the id header must see the row's
// event id exactly; refusing such a row would stop the relay (or
// dead-letter the event) for a value MySQL accepted. A consumer that
// prints or logs these values must escape them, as outbox-relay's own
// commands do. Text of a latin1 column (Row.Latin1) becomes UTF-8 where it
// becomes text (key, topic, headers, a JSON value); a payload that is the
// record's value keeps its bytes.
//
// It is pure: no I/O, no clocks, no globals. Route either returns a record or
// an error wrapping ErrBadRow that names the offending column; it never drops
// a row silently.
package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/text/encoding/charmap"
)

// ErrBadRow is wrapped by every error Route returns: the row cannot become a
// record under this configuration. Callers branch on it to stop (or, later,
// dead-letter) without advancing the checkpoint.
var ErrBadRow = errors.New("bad outbox row")

// Value formats.
const (
	FormatPayload  = "payload"  // the payload bytes exactly as stored (default)
	FormatEnvelope = "envelope" // a JSON object with the event's fields and the payload embedded as JSON
	// FormatCloudEvents: a CloudEvents 1.0 event, Kafka protocol binding
	// (CloudEventsMode structured or binary); see cloudevents.go.
	FormatCloudEvents = "cloudevents"
)

// Placements of an additional column.
const (
	PlaceHeader    = "header"
	PlaceEnvelope  = "envelope"
	PlacePartition = "partition" // the column's integer value is the partition
)

// Field is an additional column copied into the record. Placed in a
// header, a NULL value gives no header (an empty string gives an empty
// one); in the envelope it is null; as the partition it is a bad row.
type Field struct {
	Column    string
	Placement string // header | envelope
	Alias     string // name in the record; default the column name
}

// Config names the outbox columns and says how records look.
type Config struct {
	EventIDColumn       string
	AggregateTypeColumn string
	AggregateIDColumn   string
	EventTypeColumn     string // optional: becomes header "type" when set and present
	PayloadColumn       string
	TimestampColumn     string // optional: the record timestamp (default: commit time)
	SchemaVersionColumn string // optional: envelope schemaVersion
	TopicPrefix         string
	// TopicRegex and TopicReplacement, when TopicReplacement is set, name the
	// topic from the aggregate type as Debezium's route.topic.regex and
	// route.topic.replacement do: ${routedByValue} (the default regex's group)
	// or $1 in the replacement. Otherwise the topic is TopicPrefix + type.
	TopicRegex       *regexp.Regexp
	TopicReplacement string
	Format           string // payload | envelope
	Additional       []Field
	// SkipMissingAdditional leaves out an additional column the row lacks
	// instead of making the row bad.
	SkipMissingAdditional bool
	// NullPayloadError makes a NULL payload a bad row instead of a tombstone.
	NullPayloadError bool
	// TracingColumn, when set, holds the row's trace context (a W3C
	// traceparent, or Debezium's serialized span context): it becomes the
	// record's traceparent and tracestate headers. A row without the
	// column, or with NULL or "", gets none; an invalid value gets none and
	// Record.TraceInvalid says why.
	TracingColumn string
	// CloudEventsMode (structured, the default, or binary) and
	// CloudEventsSource (the source attribute, a URI-reference) apply to
	// Format cloudevents.
	CloudEventsMode   string
	CloudEventsSource string
	// Reserved are the topics no record may go to (the relay's own and
	// Kafka's): a row routed to one is a bad row. See reserved.go.
	Reserved Reserved
}

// Header is one record header; an alias so records pass to the Kafka client
// without copying.
type Header = kgo.RecordHeader

// Record is what the relay produces for one row.
type Record struct {
	Topic     string
	Key       []byte
	Value     []byte // nil for a NULL payload
	Headers   []Header
	Timestamp time.Time
	EventID   string // for error messages and logs
	// Partition is the record's partition when HasPartition (placement
	// partition); otherwise the key decides.
	Partition    int32
	HasPartition bool
	// TraceInvalid is why the tracing column's value was passed over (the
	// record has no trace headers); "" when it was valid or empty. The
	// record is still good: callers count and log it.
	TraceInvalid string
}

// Row is one inserted outbox row: column names and values, in table order,
// plus the commit time of its source transaction.
type Row struct {
	Columns    []string
	Values     []any
	CommitTime time.Time
	// Latin1 marks columns stored in latin1 (MySQL's latin1 is cp1252):
	// their text is converted to UTF-8 where it becomes text (the key, the
	// topic, headers, envelope fields, a payload embedded in a JSON value);
	// a payload that is the record's value keeps its bytes. Nil means none.
	Latin1 []bool
	// Undecoded says why the source's reader could not decode a value of
	// the row (a JSON document nested too deep, say); "" when it decoded
	// every value. Such a row is a bad row, whichever column it was.
	Undecoded string
}

// Router routes rows. Its result depends on the row and its Config alone
// (it remembers the topic of the last aggregate type, a cache that changes
// no result); safe for concurrent use.
type Router struct {
	cfg Config
	// last is the topic of the aggregate type routed last, valid and not
	// reserved (rows of one aggregate type come in runs): its name is not
	// built and checked again for each row. A cache: Route's result is the
	// same with or without it; safe for concurrent use.
	last atomic.Pointer[topicOf]
}

// New returns a Router; cfg columns must be non-empty except EventTypeColumn.
func New(cfg Config) (*Router, error) {
	if cfg.EventIDColumn == "" || cfg.AggregateTypeColumn == "" || cfg.AggregateIDColumn == "" || cfg.PayloadColumn == "" {
		return nil, errors.New("new router: event id, aggregate type, aggregate id and payload columns are required")
	}
	switch cfg.Format {
	case "":
		cfg.Format = FormatPayload
	case FormatPayload, FormatEnvelope:
	case FormatCloudEvents:
		switch cfg.CloudEventsMode {
		case "":
			cfg.CloudEventsMode = ModeStructured
		case ModeStructured, ModeBinary:
		default:
			return nil, fmt.Errorf("new router: cloudevents mode %q: want structured or binary", cfg.CloudEventsMode)
		}
		if cfg.CloudEventsSource == "" {
			return nil, errors.New("new router: value format cloudevents needs a source")
		}
		if cfg.EventTypeColumn == "" {
			return nil, errors.New("new router: value format cloudevents needs an event type column (the type attribute)")
		}
	default:
		return nil, fmt.Errorf("new router: value format %q: want payload, envelope or cloudevents", cfg.Format)
	}
	for _, f := range cfg.Additional {
		if f.Column == "" {
			return nil, errors.New("new router: an additional field has no column")
		}
		if f.Placement != PlaceHeader && f.Placement != PlaceEnvelope && f.Placement != PlacePartition {
			return nil, fmt.Errorf("new router: additional field %s: placement %q: want header, envelope or partition", f.Column, f.Placement)
		}
		if f.Placement == PlaceEnvelope && cfg.Format != FormatEnvelope {
			return nil, fmt.Errorf("new router: additional field %s is placed in the envelope, but the value format is %s", f.Column, cfg.Format)
		}
	}
	if cfg.TopicReplacement != "" && cfg.TopicRegex == nil {
		cfg.TopicRegex = defaultTopicRegex
	}
	return &Router{cfg: cfg}, nil
}

var defaultTopicRegex = regexp.MustCompile(`^(?P<routedByValue>.*)$`)

// Route builds the record for row.
func (r *Router) Route(row Row) (Record, error) {
	c := &r.cfg
	eventID, err := r.text(row, index(row, c.EventIDColumn), c.EventIDColumn, true)
	if err != nil {
		return Record{}, err
	}
	rec := Record{EventID: eventID, Timestamp: row.CommitTime}
	if row.Undecoded != "" {
		return rec, fmt.Errorf("%w: %s", ErrBadRow, row.Undecoded)
	}
	aggType, err := r.text(row, index(row, c.AggregateTypeColumn), c.AggregateTypeColumn, true)
	if err != nil {
		return rec, err
	}
	aggID, err := r.text(row, index(row, c.AggregateIDColumn), c.AggregateIDColumn, true)
	if err != nil {
		return rec, err
	}
	payIdx := index(row, c.PayloadColumn)
	if payIdx < 0 {
		return rec, fmt.Errorf("%w: column %q is missing", ErrBadRow, c.PayloadColumn)
	}
	payload, err := asBytes(row.Values[payIdx])
	if err != nil {
		return rec, fmt.Errorf("%w: column %q: %v", ErrBadRow, c.PayloadColumn, err)
	}
	if payload == nil && c.NullPayloadError {
		return rec, fmt.Errorf("%w: column %q is NULL", ErrBadRow, c.PayloadColumn)
	}
	if rec.Topic, err = r.topic(aggType); err != nil {
		return rec, err
	}
	var eventType string
	if c.EventTypeColumn != "" {
		if i := index(row, c.EventTypeColumn); i >= 0 {
			if eventType, err = r.text(row, i, c.EventTypeColumn, false); err != nil {
				return rec, err
			}
		}
	}
	if c.TimestampColumn != "" {
		ts, err := timestamp(row, index(row, c.TimestampColumn), c.TimestampColumn)
		if err != nil {
			return rec, err
		}
		rec.Timestamp = ts
	}
	if c.Format == FormatCloudEvents && eventType == "" {
		return rec, fmt.Errorf("%w: column %q is missing, NULL or empty: a CloudEvent's type attribute is required", ErrBadRow, c.EventTypeColumn)
	}
	headers := 2 + len(c.Additional)
	var traceParent, traceState string
	if c.TracingColumn != "" {
		if traceParent, traceState, err = r.trace(row); err != nil {
			rec.TraceInvalid = err.Error()
		}
		headers += 2
	}
	if c.Format == FormatCloudEvents {
		headers += 7
	}
	rec.Headers = make([]Header, 1, headers)
	// The id header, the type header and the key in one allocation, each
	// capped to its own bytes.
	b := make([]byte, 0, len(eventID)+len(eventType)+len(aggID))
	b = append(append(append(b, eventID...), eventType...), aggID...)
	idBytes, typeBytes := b[:len(eventID):len(eventID)], b[len(eventID):len(eventID)+len(eventType):len(eventID)+len(eventType)]
	keyBytes := b[len(eventID)+len(eventType):]
	rec.Headers[0] = Header{Key: "id", Value: idBytes}
	if eventType != "" {
		rec.Headers = append(rec.Headers, Header{Key: "type", Value: typeBytes})
	}
	if traceParent != "" {
		rec.Headers = append(rec.Headers, Header{Key: "traceparent", Value: []byte(traceParent)})
		if traceState != "" {
			rec.Headers = append(rec.Headers, Header{Key: "tracestate", Value: []byte(traceState)})
		}
	}
	var envelopeExtra []envelopeField
	for _, f := range c.Additional {
		name := f.Alias
		if name == "" {
			name = f.Column
		}
		i := index(row, f.Column)
		if i < 0 {
			if c.SkipMissingAdditional {
				continue
			}
			return rec, fmt.Errorf("%w: additional column %q is missing", ErrBadRow, f.Column)
		}
		if f.Placement == PlacePartition {
			p, err := r.text(row, i, f.Column, true)
			if err != nil {
				return rec, err
			}
			n, err := strconv.ParseInt(p, 10, 32)
			if err != nil || n < 0 {
				return rec, fmt.Errorf("%w: column %q: partition %q is not a non-negative integer", ErrBadRow, f.Column, clip(p))
			}
			rec.Partition, rec.HasPartition = int32(n), true
			continue
		}
		if f.Placement == PlaceEnvelope {
			envelopeExtra = append(envelopeExtra, envelopeField{name, row.Values[i]})
			continue
		}
		if row.Values[i] == nil {
			continue // NULL: no header, as for the type header; '' is an empty one
		}
		v, err := r.text(row, i, f.Column, false)
		if err != nil {
			return rec, err
		}
		rec.Headers = append(rec.Headers, Header{Key: name, Value: []byte(v)})
	}
	rec.Key = keyBytes
	rec.Value = payload
	if c.Format == FormatEnvelope && payload != nil {
		text, err := jsonText(payload, latin1(row, payIdx))
		if err != nil {
			return rec, fmt.Errorf("%w: column %q: %v: the envelope embeds it as JSON", ErrBadRow, c.PayloadColumn, err)
		}
		var version any
		if c.SchemaVersionColumn != "" {
			if i := index(row, c.SchemaVersionColumn); i >= 0 {
				version = row.Values[i]
			}
		}
		rec.Value, err = envelope(eventID, eventType, aggType, aggID, rec.Timestamp, version, text, envelopeExtra)
		if err != nil {
			return rec, fmt.Errorf("%w: column %q: %v", ErrBadRow, c.PayloadColumn, err)
		}
	}
	if c.Format == FormatCloudEvents {
		a := newCEAttrs(eventID, c.CloudEventsSource, eventType, aggID, rec.Timestamp)
		if c.CloudEventsMode == ModeStructured && payload != nil {
			text, _ := jsonText(payload, latin1(row, payIdx)) // not JSON: the stored bytes go base64
			rec.Value = a.structured(text, payload)
			rec.Headers = append(rec.Headers, Header{Key: "content-type", Value: []byte(ContentTypeCloudEventsJSON)})
		} else {
			rec.Headers = a.headers(rec.Headers, payload)
		}
	}
	return rec, nil
}

// trace reads the tracing column: a missing column, NULL or "" is no
// context; a value of another type or one that is not a valid context is
// an error (the caller passes it over).
func (r *Router) trace(row Row) (parent, state string, err error) {
	i := index(row, r.cfg.TracingColumn)
	if i < 0 {
		return "", "", nil
	}
	var v string
	switch t := row.Values[i].(type) {
	case nil:
		return "", "", nil
	case string:
		v = t
	case []byte:
		v = string(t)
	default:
		return "", "", fmt.Errorf("column %q has unsupported type %T", r.cfg.TracingColumn, t)
	}
	return traceHeaders(v)
}

// index is the place of column name in row, -1 when absent. Column names
// compare as MySQL and MariaDB compare them, without regard to letter case:
// ALTER TABLE ... MODIFY COLUMN AGGREGATE_TYPE renames aggregate_type to
// the new spelling, and the column is the same.
func index(row Row, name string) int {
	i := slices.Index(row.Columns, name)
	if i < 0 {
		i = slices.IndexFunc(row.Columns, func(c string) bool { return strings.EqualFold(c, name) })
	}
	if i >= len(row.Values) {
		return -1
	}
	return i
}

// timestamp reads a DATETIME/TIMESTAMP column: go-mysql renders it as text
// ("2006-01-02 15:04:05.999999"), taken as UTC.
func timestamp(row Row, idx int, name string) (time.Time, error) {
	if idx < 0 {
		return time.Time{}, fmt.Errorf("%w: column %q is missing", ErrBadRow, name)
	}
	switch v := row.Values[idx].(type) {
	case time.Time:
		return v, nil
	case string:
		t, err := time.Parse("2006-01-02 15:04:05.999999999", v)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: column %q: %q is not a timestamp", ErrBadRow, name, clip(v))
		}
		return t, nil
	case nil:
		return time.Time{}, fmt.Errorf("%w: column %q is NULL", ErrBadRow, name)
	default:
		return time.Time{}, fmt.Errorf("%w: column %q has unsupported type %T", ErrBadRow, name, v)
	}
}

type envelopeField struct {
	name  string
	value any
}

// jsonText is a payload as JSON text, which is UTF-8 (RFC 8259): a latin1
// column's text converted, the bytes of any other as they are. An error
// says why it is not JSON text.
func jsonText(payload []byte, isLatin1 bool) ([]byte, error) {
	if isLatin1 {
		var err error
		if payload, err = fromLatin1(payload); err != nil {
			return nil, err
		}
	}
	if !utf8.Valid(payload) {
		return nil, errors.New("payload is not UTF-8 text" + latin1Hint)
	}
	if !json.Valid(payload) {
		return nil, errors.New("payload is not valid JSON")
	}
	return payload, nil
}

// envelope renders the article's event structure (section 23) with the
// payload (JSON text, see jsonText) embedded as JSON, never as an escaped
// string.
func envelope(id, typ, aggType, aggID string, at time.Time, version any, payload []byte, extra []envelopeField) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(len(payload) + 192)
	field := func(name string, v any) error {
		enc, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("envelope field %s: %w", name, err)
		}
		if b.Len() > 1 {
			b.WriteByte(',')
		}
		nb, _ := json.Marshal(name)
		b.Write(nb)
		b.WriteByte(':')
		b.Write(enc)
		return nil
	}
	b.WriteByte('{')
	for _, f := range []envelopeField{{"eventId", id}, {"eventType", typ}, {"aggregateType", aggType},
		{"aggregateId", aggID}, {"occurredAt", at.UTC().Format(time.RFC3339Nano)}} {
		if err := field(f.name, f.value); err != nil {
			return nil, err
		}
	}
	if version != nil {
		if bv, ok := version.([]byte); ok {
			version = string(bv)
		}
		if err := field("schemaVersion", version); err != nil {
			return nil, err
		}
	}
	for _, f := range extra {
		v := f.value
		if bv, ok := v.([]byte); ok {
			v = string(bv)
		}
		if err := field(f.name, v); err != nil {
			return nil, err
		}
	}
	b.WriteString(`,"payload":`)
	b.Write(payload)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// text renders column idx as text; required columns must be present and
// neither NULL nor empty.
func (r *Router) text(row Row, idx int, name string, required bool) (string, error) {
	if idx < 0 || idx >= len(row.Values) {
		return "", fmt.Errorf("%w: column %q is missing", ErrBadRow, name)
	}
	v := row.Values[idx]
	var s string
	switch t := v.(type) {
	case nil:
		if required {
			return "", fmt.Errorf("%w: column %q is NULL", ErrBadRow, name)
		}
		return "", nil
	case string:
		s = t
	case []byte:
		s = string(t)
	case int64:
		s = strconv.FormatInt(t, 10)
	case int32:
		s = strconv.FormatInt(int64(t), 10)
	case int16:
		s = strconv.FormatInt(int64(t), 10)
	case int8:
		s = strconv.FormatInt(int64(t), 10)
	case uint64:
		s = strconv.FormatUint(t, 10)
	case uint32:
		s = strconv.FormatUint(uint64(t), 10)
	case uint16:
		s = strconv.FormatUint(uint64(t), 10)
	case uint8:
		s = strconv.FormatUint(uint64(t), 10)
	default:
		return "", fmt.Errorf("%w: column %q has unsupported type %T", ErrBadRow, name, v)
	}
	if required && s == "" {
		return "", fmt.Errorf("%w: column %q is empty", ErrBadRow, name)
	}
	if latin1(row, idx) {
		b, err := fromLatin1([]byte(s))
		if err != nil {
			return "", fmt.Errorf("%w: column %q: %v", ErrBadRow, name, err)
		}
		s = string(b)
	}
	if !utf8.ValidString(s) {
		return "", fmt.Errorf("%w: column %q is not valid UTF-8%s", ErrBadRow, name, latin1Hint)
	}
	return s, nil
}

func latin1(row Row, idx int) bool { return idx < len(row.Latin1) && row.Latin1[idx] }

// latin1Hint ends the error about text that is not UTF-8: the likely cause.
const latin1Hint = " (a latin1 column's text is converted when the binlog names its character set: binlog_row_metadata MINIMAL or FULL)"

// fromLatin1 converts MySQL latin1 (cp1252) text to UTF-8.
func fromLatin1(b []byte) ([]byte, error) {
	if b == nil {
		return nil, nil
	}
	out, err := charmap.Windows1252.NewDecoder().Bytes(b)
	if err != nil {
		return nil, fmt.Errorf("convert latin1 to UTF-8: %v", err)
	}
	return out, nil
}

// asBytes returns the payload exactly as stored; NULL is nil.
func asBytes(v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return nil, nil
	case []byte:
		return t, nil
	case string:
		return []byte(t), nil
	default:
		return nil, fmt.Errorf("unsupported payload type %T", v)
	}
}

// ValidTopic reports whether Kafka accepts name as a topic name: 1 to 249
// characters of ASCII letters, digits, '.', '_' and '-', and not "." or "..".
func ValidTopic(name string) error {
	if name == "" {
		return errors.New("topic name is empty")
	}
	if len(name) > 249 {
		return fmt.Errorf("topic name %q (%d characters) is longer than 249 characters", clip(name), len(name))
	}
	if name == "." || name == ".." {
		return fmt.Errorf("topic name %q is not allowed", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("topic name %q has character %q; Kafka allows letters, digits, '.', '_' and '-'", clip(name), c)
		}
	}
	return nil
}
