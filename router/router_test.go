package router

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var cols = []string{"id", "event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "created_at"}

func defaults() Config {
	return Config{EventIDColumn: "event_id", AggregateTypeColumn: "aggregate_type", AggregateIDColumn: "aggregate_id",
		EventTypeColumn: "event_type", PayloadColumn: "payload", TopicPrefix: "outbox.event."}
}

func TestRoute(t *testing.T) {
	at := time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)
	tests := []struct {
		name    string
		values  []any
		topic   string
		key     string
		value   string
		nilVal  bool
		id      string
		typ     string
		wantErr string
	}{
		{name: "strings", values: []any{int64(1), "e-1", "alarm", "dev-7", "AlarmCreated", `{"t":90}`, "x"},
			topic: "outbox.event.alarm", key: "dev-7", value: `{"t":90}`, id: "e-1", typ: "AlarmCreated"},
		{name: "payload bytes kept exactly", values: []any{int64(1), "e-2", "alarm", "dev-7", "X", []byte("{ \"a\" :1 }"), nil},
			topic: "outbox.event.alarm", key: "dev-7", value: "{ \"a\" :1 }", id: "e-2", typ: "X"},
		{name: "numeric ids", values: []any{int64(1), int64(42), "order", uint64(18446744073709551615), "X", "{}", nil},
			topic: "outbox.event.order", key: "18446744073709551615", value: "{}", id: "42", typ: "X"},
		{name: "null payload", values: []any{int64(1), "e-3", "alarm", "d", "X", nil, nil},
			topic: "outbox.event.alarm", key: "d", nilVal: true, id: "e-3", typ: "X"},
		{name: "null event type gives no header", values: []any{int64(1), "e-4", "alarm", "d", nil, "{}", nil},
			topic: "outbox.event.alarm", key: "d", value: "{}", id: "e-4"},
		{name: "null key", values: []any{int64(1), "e-5", "alarm", nil, "X", "{}", nil}, wantErr: `"aggregate_id" is NULL`},
		{name: "empty key", values: []any{int64(1), "e-6", "alarm", "", "X", "{}", nil}, wantErr: `"aggregate_id" is empty`},
		{name: "null event id", values: []any{int64(1), nil, "alarm", "d", "X", "{}", nil}, wantErr: `"event_id" is NULL`},
		{name: "empty aggregate type", values: []any{int64(1), "e-7", "", "d", "X", "{}", nil}, wantErr: `"aggregate_type" is empty`},
		{name: "topic Kafka refuses", values: []any{int64(1), "e-8", "al arm/x", "d", "X", "{}", nil}, wantErr: "Kafka allows"},
		{name: "missing payload column", values: []any{int64(1), "e-9", "alarm", "d", "X"}, wantErr: `"payload" is missing`},
		{name: "unsupported payload type", values: []any{int64(1), "e-10", "alarm", "d", "X", 3.5, nil}, wantErr: "unsupported payload type"},
		{name: "event type not text", values: []any{int64(1), "e-12", "alarm", "d", 2.5, "{}", nil}, wantErr: `"event_type" has unsupported type`},
		{name: "event type not UTF-8", values: []any{int64(1), "e-13", "alarm", "d", []byte{0xff, 'X'}, "{}", nil}, wantErr: `"event_type" is not valid UTF-8`},
		{name: "invalid utf-8 key", values: []any{int64(1), "e-11", "alarm", "\xff", "X", "{}", nil}, wantErr: "not valid UTF-8 (a latin1 column's text is converted when the binlog names its character set: binlog_row_metadata MINIMAL or FULL)"},
	}
	r, err := New(defaults())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cols[:len(tt.values)]
			rec, err := r.Route(Row{Columns: c, Values: tt.values, CommitTime: at})
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want ErrBadRow containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rec.Topic != tt.topic || string(rec.Key) != tt.key || !rec.Timestamp.Equal(at) || rec.EventID != tt.id {
				t.Fatalf("got topic %q key %q ts %v id %q", rec.Topic, rec.Key, rec.Timestamp, rec.EventID)
			}
			if tt.nilVal != (rec.Value == nil) || (!tt.nilVal && string(rec.Value) != tt.value) {
				t.Fatalf("value %q (nil %v), want %q (nil %v)", rec.Value, rec.Value == nil, tt.value, tt.nilVal)
			}
			hdr := map[string]string{}
			for _, h := range rec.Headers {
				hdr[h.Key] = string(h.Value)
			}
			if hdr["id"] != tt.id || hdr["type"] != tt.typ || (tt.typ == "" && len(rec.Headers) != 1) {
				t.Fatalf("headers %v, want id %q type %q", hdr, tt.id, tt.typ)
			}
		})
	}
}

func TestColumnOrderDoesNotMatter(t *testing.T) {
	r, _ := New(defaults())
	rec, err := r.Route(Row{Columns: []string{"payload", "aggregate_id", "event_id", "aggregate_type"},
		Values: []any{"{}", "k", "e", "t"}})
	if err != nil || rec.Topic != "outbox.event.t" || string(rec.Key) != "k" {
		t.Fatalf("got %+v, %v", rec, err)
	}
}

func TestValidTopic(t *testing.T) {
	for name, ok := range map[string]bool{"a": true, "outbox.event.alarm_1-x": true, "": false, ".": false, "..": false,
		strings.Repeat("a", 249): true, strings.Repeat("a", 250): false, "a b": false, "a/b": false, "é": false} {
		if got := ValidTopic(name) == nil; got != ok {
			t.Errorf("ValidTopic(%q) = %v, want %v", name, got, ok)
		}
	}
}

func TestNewRequiresColumns(t *testing.T) {
	c := defaults()
	c.PayloadColumn = ""
	if _, err := New(c); err == nil {
		t.Fatal("want an error for a missing payload column")
	}
}

func FuzzRoute(f *testing.F) {
	f.Add("e", "alarm", "dev", "T", []byte("{}"), uint8(0), uint8(0), "2026-01-02 03:04:05")
	f.Add("", "", "", "", []byte(nil), uint8(255), uint8(255), "")
	f.Fuzz(func(t *testing.T, id, typ, agg, evType string, payload []byte, nulls, knobs uint8, ts string) {
		// knobs picks a configuration: value format, null payload policy,
		// topic replacement, additional fields and their placement, latin1.
		c := defaults()
		if knobs&1 != 0 {
			c.Format = FormatEnvelope
		}
		c.NullPayloadError = knobs&2 != 0
		if knobs&4 != 0 {
			c.TopicReplacement = "x.${routedByValue}.$1"
		}
		if knobs&8 != 0 {
			c.TimestampColumn = "created_at"
		}
		if knobs&16 != 0 {
			place := PlaceHeader
			if knobs&1 != 0 && knobs&32 != 0 {
				place = PlaceEnvelope
			} else if knobs&32 != 0 {
				place = PlacePartition
			}
			c.Additional = []Field{{Column: "event_type", Placement: place, Alias: "t"}}
			c.SkipMissingAdditional = knobs&64 != 0
		}
		r, err := New(c)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		values := []any{int64(1), id, typ, agg, evType, payload, ts}
		for i := range values {
			if nulls&(1<<i) != 0 {
				values[i] = nil
			}
		}
		row := Row{Columns: cols, Values: values}
		if knobs&128 != 0 {
			row.Latin1 = []bool{false, true, true, true, true, true, false}
		}
		rec, err := r.Route(row)
		if err != nil {
			if !errors.Is(err, ErrBadRow) {
				t.Fatalf("error %v does not wrap ErrBadRow", err)
			}
			return
		}
		if ValidTopic(rec.Topic) != nil || len(rec.Key) == 0 || rec.EventID == "" {
			t.Fatalf("accepted a record Kafka or consumers cannot use: %+v", rec)
		}
		if c.Format == FormatEnvelope && rec.Value != nil && !json.Valid(rec.Value) {
			t.Fatalf("envelope is not JSON: %s", rec.Value)
		}
	})
}

// An additional column placed in a header: its value as the header's, an
// empty string as an empty header, NULL as no header at all (as the type
// header), so a consumer tells NULL from an empty string by the header's
// absence. In the envelope a NULL is null.
func TestAdditionalHeaderNullGivesNoHeader(t *testing.T) {
	columns := []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "tenant", "site"}
	for _, tc := range []struct {
		name         string
		tenant, site any
		format       string
		headers      []string // key=value after id and type
		envelopeSite string   // the envelope's "siteId", as JSON
	}{
		{name: "values", tenant: "acme", site: []byte("plant-7"), headers: []string{"tenant=acme", "siteId=plant-7"}},
		{name: "empty strings", tenant: "", site: []byte{}, headers: []string{"tenant=", "siteId="}},
		{name: "NULLs", tenant: nil, site: nil, headers: nil},
		{name: "NULL and empty", tenant: nil, site: "", headers: []string{"siteId="}},
		{name: "an integer", tenant: int64(42), site: nil, headers: []string{"tenant=42"}},
		{name: "envelope NULL", tenant: nil, site: nil, format: FormatEnvelope, envelopeSite: "null"},
		{name: "envelope empty", tenant: "", site: "", format: FormatEnvelope, headers: []string{"tenant="}, envelopeSite: `""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := defaults()
			sitePlace := PlaceHeader
			if tc.format != "" {
				c.Format, sitePlace = tc.format, PlaceEnvelope
			}
			c.Additional = []Field{{Column: "tenant", Placement: PlaceHeader}, {Column: "site", Placement: sitePlace, Alias: "siteId"}}
			r, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := r.Route(Row{Columns: columns, Values: []any{"e-1", "alarm", "dev-7", "Created", []byte(`{}`), tc.tenant, tc.site}})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range rec.Headers[2:] {
				got = append(got, h.Key+"="+string(h.Value))
			}
			if rec.Headers[0].Key != "id" || rec.Headers[1].Key != "type" || !slices.Equal(got, tc.headers) {
				t.Fatalf("headers %q after id and type, want %q", got, tc.headers)
			}
			if tc.format == FormatEnvelope && !strings.Contains(string(rec.Value), `"siteId":`+tc.envelopeSite+`,`) {
				t.Fatalf("envelope %s, want siteId %s", rec.Value, tc.envelopeSite)
			}
		})
	}
}

func TestEnvelopeAndAdditionalFields(t *testing.T) {
	c := defaults()
	c.Format = FormatEnvelope
	c.SchemaVersionColumn = "schema_version"
	c.TimestampColumn = "created_at"
	c.Additional = []Field{{Column: "tenant", Placement: PlaceHeader}, {Column: "site", Placement: PlaceEnvelope, Alias: "siteId"}}
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	columns := []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "created_at", "schema_version", "tenant", "site"}
	rec, err := r.Route(Row{Columns: columns, Values: []any{"e-1", "alarm", "dev-7", "AlarmCreated",
		[]byte(`{"t": 90, "unit":"C"}`), "2026-11-30 01:02:03.456", int64(2), "acme", "plant-7"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"eventId":"e-1","eventType":"AlarmCreated","aggregateType":"alarm","aggregateId":"dev-7",` +
		`"occurredAt":"2026-11-30T01:02:03.456Z","schemaVersion":2,"siteId":"plant-7","payload":{"t": 90, "unit":"C"}}`
	if string(rec.Value) != want {
		t.Fatalf("envelope\n got %s\nwant %s", rec.Value, want)
	}
	if !rec.Timestamp.Equal(time.Date(2026, 11, 30, 1, 2, 3, 456e6, time.UTC)) {
		t.Fatalf("timestamp %v, want the created_at column", rec.Timestamp)
	}
	if len(rec.Headers) != 3 || rec.Headers[2].Key != "tenant" || string(rec.Headers[2].Value) != "acme" {
		t.Fatalf("headers %+v, want id, type, tenant", rec.Headers)
	}
	// A payload that is not JSON cannot be embedded: a bad row, not an escaped string.
	_, err = r.Route(Row{Columns: columns, Values: []any{"e-2", "alarm", "d", "X", "not json", "2026-11-30 01:02:03", 1, "a", "b"}})
	if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), "not valid JSON") {
		t.Fatalf("error %v, want a bad row for a non-JSON payload", err)
	}
	// A missing additional column is a bad row.
	_, err = r.Route(Row{Columns: columns[:8], Values: []any{"e-3", "alarm", "d", "X", "{}", "2026-11-30 01:02:03", 1, "a"}})
	if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), `"site" is missing`) {
		t.Fatalf("error %v, want a bad row naming the missing column", err)
	}
}

func TestNullPayloadPolicy(t *testing.T) {
	c := defaults()
	c.NullPayloadError = true
	r, _ := New(c)
	_, err := r.Route(Row{Columns: cols, Values: []any{int64(1), "e", "alarm", "d", "X", nil, nil}})
	if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), `"payload" is NULL`) {
		t.Fatalf("error %v, want a bad row for a NULL payload", err)
	}
}

func TestNewRejectsBadFormats(t *testing.T) {
	for _, c := range []Config{
		func() Config { c := defaults(); c.Format = "xml"; return c }(),
		func() Config {
			c := defaults()
			c.Additional = []Field{{Column: "a", Placement: "key"}}
			return c
		}(),
		func() Config {
			c := defaults()
			c.Additional = []Field{{Column: "a", Placement: PlaceEnvelope}}
			return c
		}(),
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) accepted a bad configuration", c)
		}
	}
}

func TestTopicRegexReplacement(t *testing.T) {
	c := defaults()
	c.TopicReplacement = "events.${routedByValue}.v1"
	r, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Route(Row{Columns: cols, Values: []any{int64(1), "e", "Order", "o-1", "X", "{}", nil}})
	if err != nil || rec.Topic != "events.Order.v1" {
		t.Fatalf("topic %q, %v; want events.Order.v1", rec.Topic, err)
	}
	c.TopicRegex = regexp.MustCompile(`^(?<domain>[a-z]+)_(.*)$`)
	c.TopicReplacement = "${domain}.$2"
	r, _ = New(c)
	rec, err = r.Route(Row{Columns: cols, Values: []any{int64(1), "e", "billing_invoice", "i-1", "X", "{}", nil}})
	if err != nil || rec.Topic != "billing.invoice" {
		t.Fatalf("topic %q, %v; want billing.invoice", rec.Topic, err)
	}
}

func TestPartitionPlacementAndMissingAdditional(t *testing.T) {
	c := defaults()
	c.Additional = []Field{{Column: "shard", Placement: PlacePartition}, {Column: "tenant", Placement: PlaceHeader}}
	r, _ := New(c)
	columns := []string{"event_id", "aggregate_type", "aggregate_id", "payload", "shard"}
	_, err := r.Route(Row{Columns: columns, Values: []any{"e", "a", "k", "{}", int64(2)}})
	if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), `"tenant" is missing`) {
		t.Fatalf("error %v, want a bad row for the missing additional column", err)
	}
	c.SkipMissingAdditional = true
	r, _ = New(c)
	rec, err := r.Route(Row{Columns: columns, Values: []any{"e", "a", "k", "{}", int64(2)}})
	if err != nil || !rec.HasPartition || rec.Partition != 2 || len(rec.Headers) != 1 {
		t.Fatalf("record %+v, %v; want partition 2 and no tenant header", rec, err)
	}
	_, err = r.Route(Row{Columns: columns, Values: []any{"e", "a", "k", "{}", "-1"}})
	if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), "partition") {
		t.Fatalf("error %v, want a bad row for a negative partition", err)
	}
}

// A latin1 payload column's bytes are the record's value exactly as stored
// (value format payload, CloudEvents binary: content-type octet-stream
// for bytes that are not UTF-8); where the payload is embedded in a JSON
// value (envelope, CloudEvents structured), which is UTF-8 text, its text
// is converted, as the key's and the other text columns' are. Bytes that
// are not UTF-8 in a column that is not latin1 are a bad row for the
// envelope and data_base64 (as stored) in a structured CloudEvent.
func TestLatin1PayloadKeepsItsBytes(t *testing.T) {
	stored := []byte("{\"p\":\"\x805 Z\xfcrich\"}") // {"p":"€5 Zürich"} in cp1252
	const text = `{"p":"€5 Zürich"}`
	for _, tc := range []struct {
		format, mode string
		latin1       bool
		value        string // the record's value; "" when checked by has
		has          []string
		err          string
	}{
		{format: FormatPayload, latin1: true, value: string(stored)},
		{format: FormatPayload, value: string(stored)},
		{format: FormatEnvelope, latin1: true, has: []string{`"payload":` + text + `}`}},
		{format: FormatEnvelope, err: "payload is not UTF-8 text (a latin1 column's text is converted when the binlog names " +
			"its character set: binlog_row_metadata MINIMAL or FULL): the envelope embeds it as JSON"},
		{format: FormatCloudEvents, mode: ModeBinary, latin1: true, value: string(stored), has: []string{"content-type=application/octet-stream"}},
		{format: FormatCloudEvents, mode: ModeStructured, latin1: true, has: []string{`"datacontenttype":"application/json","data":` + text + `}`}},
		{format: FormatCloudEvents, mode: ModeStructured, has: []string{`"datacontenttype":"application/octet-stream","data_base64":"` +
			base64.StdEncoding.EncodeToString(stored) + `"`}},
	} {
		t.Run(fmt.Sprintf("%s/%s/latin1=%v", tc.format, tc.mode, tc.latin1), func(t *testing.T) {
			c := defaults()
			c.Format, c.CloudEventsMode, c.CloudEventsSource = tc.format, tc.mode, "urn:x"
			r, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			row := Row{Columns: cols, Values: []any{int64(1), "e", "alarm", []byte("Z\xfcrich"), "X", stored, nil}}
			if tc.latin1 {
				row.Latin1 = []bool{false, false, false, true, false, true, false}
			} else {
				row.Values[3] = "Zürich"
			}
			rec, err := r.Route(row)
			if tc.err != "" {
				if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want a bad row saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(rec.Key) != "Zürich" {
				t.Fatalf("key %q, want UTF-8", rec.Key)
			}
			if tc.value != "" && string(rec.Value) != tc.value {
				t.Fatalf("value %q, want the stored bytes %q", rec.Value, tc.value)
			}
			all := string(rec.Value)
			for _, h := range rec.Headers {
				all += "\n" + h.Key + "=" + string(h.Value)
			}
			for _, want := range tc.has {
				if !strings.Contains(all, want) {
					t.Fatalf("record %q lacks %q", all, want)
				}
			}
		})
	}
}

// TestControlCharactersPassUnchanged: CR, LF, ESC and NUL in the event id,
// event type and aggregate id reach the id and type headers and the key
// byte for byte (see the package doc: Kafka headers are bytes).
func TestControlCharactersPassUnchanged(t *testing.T) {
	r, err := New(defaults())
	if err != nil {
		t.Fatal(err)
	}
	id, typ, key := "e-1\r\n\x1b[2Kforged", "Type\nX-Injected: 1", "dev\x00\x1b]0;t\x07"
	rec, err := r.Route(Row{Columns: cols, Values: []any{int64(1), id, "alarm", key, typ, "{}", nil}})
	if err != nil {
		t.Fatal(err)
	}
	if string(rec.Key) != key || len(rec.Headers) < 2 || rec.Headers[0].Key != "id" || string(rec.Headers[0].Value) != id ||
		rec.Headers[1].Key != "type" || string(rec.Headers[1].Value) != typ {
		t.Fatalf("record %+v does not carry the row's bytes unchanged", rec)
	}
}

func intRow(v any) Row {
	return Row{
		Columns:    []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "n", "ver", "part"},
		Values:     []any{v, "alarm", v, v, []byte(`{}`), v, v, v},
		CommitTime: time.Unix(1700000000, 0),
	}
}

// Every role of an integer column gives the same record for int32(7) and
// uint32(7): key, id header, type header, header field, envelope field,
// schemaVersion, partition.
func TestSignedAndUnsignedRouteAlike(t *testing.T) {
	for _, format := range []string{FormatPayload, FormatEnvelope} {
		cfg := Config{EventIDColumn: "event_id", AggregateTypeColumn: "aggregate_type", AggregateIDColumn: "aggregate_id",
			EventTypeColumn: "event_type", PayloadColumn: "payload", SchemaVersionColumn: "ver", TopicPrefix: "p.", Format: format,
			Additional: []Field{{Column: "n", Placement: PlaceHeader}, {Column: "part", Placement: PlacePartition}}}
		if format == FormatEnvelope {
			cfg.Additional = append(cfg.Additional, Field{Column: "n", Placement: PlaceEnvelope, Alias: "nn"})
		}
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range signedUnsignedPairs {
			a, errA := r.Route(intRow(p[0]))
			b, errB := r.Route(intRow(p[1]))
			if fmt.Sprint(errA) != fmt.Sprint(errB) || fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
				t.Errorf("%s %T vs %T:\n %+v %v\n %+v %v", format, p[0], p[1], a, errA, b, errB)
			}
		}
	}
}

// signedUnsignedPairs: a value in a signed and in an unsigned Go type (the
// reader gives UNSIGNED columns unsigned types whatever the binlog's
// metadata; the router must render both alike anyway).
var signedUnsignedPairs = [][2]any{
	{int8(7), uint8(7)}, {int16(7), uint16(7)}, {int32(7), uint32(7)}, {int64(7), uint64(7)},
	{int32(0), uint32(0)}, {int32(2147483647), uint32(2147483647)},
}

// A column renamed to another letter case (ALTER TABLE ... MODIFY COLUMN
// AGGREGATE_TYPE ...: the server keeps the new spelling, and the binlog's
// column names and the tracked layout carry it) is the same column, as it
// is to the server: every role finds it, and the record is the one the
// lower-case names give.
func TestRouteFindsColumnsWhateverTheirLetterCase(t *testing.T) {
	cfg := Config{EventIDColumn: "event_id", AggregateTypeColumn: "aggregate_type", AggregateIDColumn: "aggregate_id",
		EventTypeColumn: "event_type", PayloadColumn: "payload", SchemaVersionColumn: "ver", TimestampColumn: "created_at",
		TracingColumn: "trace", TopicPrefix: "p.", Format: FormatEnvelope,
		Additional: []Field{{Column: "tenant", Placement: PlaceHeader}, {Column: "part", Placement: PlacePartition},
			{Column: "tenant", Placement: PlaceEnvelope, Alias: "t"}}}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lower := []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", "ver", "created_at", "trace", "tenant", "part"}
	values := []any{"e-1", "alarm", "dev-7", "Created", []byte(`{"a":1}`), int64(2), "2026-11-30 01:02:03",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "acme", int64(3)}
	want, err := r.Route(Row{Columns: lower, Values: values})
	if err != nil {
		t.Fatal(err)
	}
	for _, spell := range []func(string) string{strings.ToUpper, func(s string) string { return strings.ToUpper(s[:1]) + s[1:] }} {
		cased := make([]string, len(lower))
		for i, c := range lower {
			cased[i] = spell(c)
		}
		got, err := r.Route(Row{Columns: cased, Values: values})
		if err != nil {
			t.Fatalf("columns %v: %v", cased, err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Fatalf("columns %v:\n %+v\nwant\n %+v", cased, got, want)
		}
	}
}

// One Router routes rows of changing aggregate types, each to its own
// topic, and still refuses a reserved or invalid topic after a valid one
// and a valid one after a refused one (Route remembers the topic of the
// aggregate type it routed last).
func TestRouteTopicFollowsEachRowsAggregateType(t *testing.T) {
	cfg := defaults()
	cfg.Reserved = NewReserved("outbox.event.ckpt")
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct{ agg, topic, err string }{
		{"alarm", "outbox.event.alarm", ""}, {"alarm", "outbox.event.alarm", ""}, {"order", "outbox.event.order", ""},
		{"ckpt", "", "one of the relay's own topics"}, {"alarm", "outbox.event.alarm", ""}, {"al arm", "", "Kafka allows"},
		{"al arm", "", "Kafka allows"}, {"order", "outbox.event.order", ""}, {"ckpt", "", "one of the relay's own topics"},
	} {
		rec, err := r.Route(Row{Columns: cols, Values: []any{int64(i), fmt.Sprint("e-", i), tc.agg, "d", "X", "{}", nil}})
		switch {
		case tc.err != "":
			if !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("row %d (%s): error %v, want one saying %q", i, tc.agg, err, tc.err)
			}
		case err != nil || rec.Topic != tc.topic:
			t.Fatalf("row %d (%s): topic %q, error %v; want %q", i, tc.agg, rec.Topic, err, tc.topic)
		}
	}
}

// One Router routes a run of rows whose aggregate types change as a fresh
// Router routes each (it remembers the last type's topic): the same topic,
// or the same error, whatever came before, with a prefix or a replacement,
// with latin1 columns, with types a check refuses (reserved, invalid).
func FuzzRouteRemembersNoTopicAFreshRouterWouldNotGive(f *testing.F) {
	f.Add("alarm", "order", "ckpt", uint8(0))
	f.Add("a b", "a b", "alarm", uint8(1))
	f.Add("\xe9", "é", "\xe9", uint8(2))
	f.Add("x", "", "__consumer_offsets", uint8(3))
	f.Fuzz(func(t *testing.T, a, b, c string, knobs uint8) {
		cfg := defaults()
		cfg.Reserved = NewReserved("outbox.event.ckpt")
		if knobs&1 != 0 {
			cfg.TopicReplacement = "x.${routedByValue}"
		}
		if knobs&2 != 0 {
			cfg.TopicPrefix = ""
		}
		route := func(r *Router, typ string) (string, string) {
			row := Row{Columns: cols, Values: []any{int64(1), "e", typ, "k", "T", []byte("{}"), nil}}
			if knobs&4 != 0 {
				row.Latin1 = []bool{false, false, true, false, false, false, false}
			}
			rec, err := r.Route(row)
			if err != nil {
				return "", err.Error()
			}
			return rec.Topic, ""
		}
		one, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, typ := range []string{a, b, a, c, c, b, a} {
			fresh, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			gotTopic, gotErr := route(one, typ)
			wantTopic, wantErr := route(fresh, typ)
			if gotTopic != wantTopic || gotErr != wantErr {
				t.Fatalf("row %d, type %q: topic %q, error %q after the rows before it; a fresh router: %q, %q",
					i, typ, gotTopic, gotErr, wantTopic, wantErr)
			}
		}
	})
}
