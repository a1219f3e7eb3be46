package router

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func ceRow(payload any, typ any) Row {
	return Row{Columns: []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload"},
		Values:     []any{"e-1", "alarm", "dev-7", typ, payload},
		CommitTime: time.Date(2026, 12, 5, 18, 30, 1, 123456000, time.FixedZone("x", 3600))}
}

// TestCloudEventsStructured: the value is a CloudEvents JSON event with
// every attribute, JSON data embedded as JSON and other bytes as
// data_base64; content-type names the structured format.
func TestCloudEventsStructured(t *testing.T) {
	tests := []struct {
		name     string
		payload  any
		wantType string // datacontenttype
		data     string // JSON of "data", or "" when data_base64
		base64   string
	}{
		{name: "json object", payload: `{"t":90,"s":"a<b"}`, wantType: "application/json", data: `{"t":90,"s":"a<b"}`},
		{name: "json as stored bytes", payload: []byte(`[1, 2 ,3]`), wantType: "application/json", data: `[1, 2 ,3]`},
		{name: "json string", payload: `"hi"`, wantType: "application/json", data: `"hi"`},
		{name: "not json", payload: []byte("plain \x00\xff"), wantType: "application/octet-stream", base64: base64.StdEncoding.EncodeToString([]byte("plain \x00\xff"))},
	}
	cfg := defaults()
	cfg.Format, cfg.CloudEventsSource = FormatCloudEvents, "/outbox-relay/alarms/app.outbox"
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := r.Route(ceRow(tt.payload, "AlarmCreated"))
			if err != nil {
				t.Fatal(err)
			}
			var ev map[string]json.RawMessage
			if err := json.Unmarshal(rec.Value, &ev); err != nil {
				t.Fatalf("value %s: %v", rec.Value, err)
			}
			str := func(k string) string {
				var s string
				if err := json.Unmarshal(ev[k], &s); err != nil {
					t.Errorf("attribute %s = %s: %v", k, ev[k], err)
				}
				return s
			}
			for k, want := range map[string]string{"specversion": "1.0", "id": "e-1", "source": "/outbox-relay/alarms/app.outbox",
				"type": "AlarmCreated", "subject": "dev-7", "time": "2026-12-05T17:30:01.123456Z", "datacontenttype": tt.wantType} {
				if got := str(k); got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			if tt.data != "" {
				if string(ev["data"]) != tt.data || ev["data_base64"] != nil {
					t.Errorf("data %s data_base64 %s, want data %s", ev["data"], ev["data_base64"], tt.data)
				}
			} else if str("data_base64") != tt.base64 || ev["data"] != nil {
				t.Errorf("data_base64 %s data %s, want %s", ev["data_base64"], ev["data"], tt.base64)
			}
			if len(ev) != 8 {
				t.Errorf("%d members, want 8: %s", len(ev), rec.Value)
			}
			h := headerMap(rec)
			if h["content-type"] != "application/cloudevents+json; charset=UTF-8" || h["id"] != "e-1" || h["type"] != "AlarmCreated" || len(rec.Headers) != 3 {
				t.Errorf("headers %v", h)
			}
			if string(rec.Key) != "dev-7" || rec.Topic != "outbox.event.alarm" {
				t.Errorf("key %q topic %q", rec.Key, rec.Topic)
			}
		})
	}
}

// TestCloudEventsBinary: the value is the payload as stored; the
// attributes are ce_* headers and datacontenttype is content-type.
func TestCloudEventsBinary(t *testing.T) {
	cfg := defaults()
	cfg.Format, cfg.CloudEventsMode, cfg.CloudEventsSource = FormatCloudEvents, ModeBinary, "urn:alarms"
	cfg.TracingColumn = "trace"
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, payload, contentType string
	}{
		{"json", `{ "t" : 90 }`, "application/json"},
		{"bytes", "\x01\x02", "application/octet-stream"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			row := ceRow([]byte(tt.payload), "AlarmCreated")
			row.Columns, row.Values = append(row.Columns, "trace"), append(row.Values, tp)
			rec, err := r.Route(row)
			if err != nil {
				t.Fatal(err)
			}
			if string(rec.Value) != tt.payload {
				t.Errorf("value %q, want the payload %q", rec.Value, tt.payload)
			}
			want := map[string]string{"id": "e-1", "type": "AlarmCreated", "traceparent": tp,
				"ce_specversion": "1.0", "ce_id": "e-1", "ce_source": "urn:alarms", "ce_type": "AlarmCreated",
				"ce_subject": "dev-7", "ce_time": "2026-12-05T17:30:01.123456Z", "content-type": tt.contentType}
			h := headerMap(rec)
			if len(h) != len(want) || len(rec.Headers) != len(want) {
				t.Errorf("headers %v, want %v", h, want)
			}
			for k, v := range want {
				if h[k] != v {
					t.Errorf("header %s = %q, want %q", k, h[k], v)
				}
			}
		})
	}
}

// TestCloudEventsNullPayloadStaysTombstone: a NULL payload is a record
// with a null value in both modes, its attributes in ce_* headers and no
// content-type (an event without data).
func TestCloudEventsNullPayloadStaysTombstone(t *testing.T) {
	for _, mode := range []string{ModeStructured, ModeBinary} {
		cfg := defaults()
		cfg.Format, cfg.CloudEventsMode, cfg.CloudEventsSource = FormatCloudEvents, mode, "/s"
		r, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := r.Route(ceRow(nil, "AlarmDeleted"))
		if err != nil {
			t.Fatal(err)
		}
		h := headerMap(rec)
		if rec.Value != nil || h["ce_id"] != "e-1" || h["ce_type"] != "AlarmDeleted" || h["ce_specversion"] != "1.0" {
			t.Errorf("%s: value %q headers %v", mode, rec.Value, h)
		}
		if _, ok := h["content-type"]; ok {
			t.Errorf("%s: content-type on an event without data: %v", mode, h)
		}
	}
}

// TestCloudEventsNeedType: type is a required attribute: a row without an
// event type is bad; a router without an event type column is refused.
func TestCloudEventsNeedType(t *testing.T) {
	cfg := defaults()
	cfg.Format, cfg.CloudEventsSource = FormatCloudEvents, "/s"
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []any{nil, ""} {
		if _, err := r.Route(ceRow(`{}`, typ)); !errors.Is(err, ErrBadRow) || !strings.Contains(err.Error(), "type attribute is required") {
			t.Errorf("type %v: error %v, want a bad row", typ, err)
		}
	}
	row := ceRow(`{}`, "X")
	row.Columns, row.Values = row.Columns[:4], append(row.Values[:3:3], row.Values[4])
	row.Columns[3] = "payload"
	if _, err := r.Route(row); !errors.Is(err, ErrBadRow) {
		t.Errorf("row without the event type column: error %v, want a bad row", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no event type column": func(c *Config) { c.EventTypeColumn = "" },
		"no source":            func(c *Config) { c.CloudEventsSource = "" },
		"bad mode":             func(c *Config) { c.CloudEventsMode = "batched" },
	} {
		c := cfg
		mutate(&c)
		if _, err := New(c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
