package router

import (
	"errors"
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
		{name: "invalid utf-8 key", values: []any{int64(1), "e-11", "alarm", "\xff", "X", "{}", nil}, wantErr: "not valid UTF-8"},
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
	f.Add("e", "alarm", "dev", "T", []byte("{}"), uint8(0))
	f.Add("", "", "", "", []byte(nil), uint8(255))
	r, _ := New(defaults())
	f.Fuzz(func(t *testing.T, id, typ, agg, evType string, payload []byte, nulls uint8) {
		values := []any{int64(1), id, typ, agg, evType, payload, nil}
		for i := range values {
			if nulls&(1<<i) != 0 {
				values[i] = nil
			}
		}
		rec, err := r.Route(Row{Columns: cols, Values: values})
		if err != nil {
			if !errors.Is(err, ErrBadRow) {
				t.Fatalf("error %v does not wrap ErrBadRow", err)
			}
			return
		}
		if ValidTopic(rec.Topic) != nil || len(rec.Key) == 0 || rec.EventID == "" {
			t.Fatalf("accepted a record Kafka or consumers cannot use: %+v", rec)
		}
	})
}
