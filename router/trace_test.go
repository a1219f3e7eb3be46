package router

import (
	"strings"
	"testing"
	"time"
)

const (
	tp       = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ts       = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
	traceCol = "tracingspancontext"
)

func traceRow(v any) Row {
	return Row{Columns: []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", traceCol},
		Values: []any{"e-1", "alarm", "dev-7", "AlarmCreated", `{"t":90}`, v}, CommitTime: time.Unix(1, 0)}
}

// TestTracingColumnBecomesTraceHeaders: each accepted form of the tracing
// column gives the record's traceparent/tracestate headers; an invalid
// value gives none and a reason, never an error.
func TestTracingColumnBecomesTraceHeaders(t *testing.T) {
	tests := []struct {
		name          string
		value         any
		parent, state string
		invalid       string // part of TraceInvalid; "" for a valid or empty value
	}{
		{name: "w3c traceparent", value: tp, parent: tp},
		{name: "w3c traceparent bytes", value: []byte(tp), parent: tp},
		{name: "w3c traceparent and tracestate line", value: tp + "\n" + ts, parent: tp, state: ts},
		{name: "surrounding white space", value: "  " + tp + "\r\n", parent: tp},
		{name: "debezium properties", value: "#Mon Dec 01 10:00:00 UTC 2026\ntraceparent=" + tp + "\n", parent: tp},
		{name: "debezium properties with tracestate escaped", value: "#c\r\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61rcWkgMzE\r\ntraceparent=" + tp + "\r\n", parent: tp, state: ts},
		{name: "properties colon and spaces", value: "traceparent : " + tp + "\n! comment\ntracestate:" + ts, parent: tp, state: ts},
		{name: "properties continuation line", value: "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-\\\n    00f067aa0ba902b7-01", parent: tp},
		{name: "later version keeps its first fields", value: "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", parent: tp},
		{name: "null", value: nil},
		{name: "empty", value: ""},
		{name: "blank", value: " \n "},
		{name: "version ff", value: "ff" + tp[2:], invalid: "version"},
		{name: "version not hex", value: "0x" + tp[2:], invalid: "no traceparent"},
		{name: "version 00 too long", value: tp + "-extra", invalid: "version 00 has 55"},
		{name: "too short", value: tp[:54], invalid: "want 55"},
		{name: "all-zero trace id", value: "00-00000000000000000000000000000000-00f067aa0ba902b7-01", invalid: "trace id is all zeros"},
		{name: "all-zero parent id", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", invalid: "parent id is all zeros"},
		{name: "upper-case hex", value: strings.ToUpper(tp), invalid: "not lower-case hex"},
		{name: "non-hex trace id", value: "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01", invalid: "trace id"},
		{name: "non-hex flags", value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", invalid: "flags"},
		{name: "wrong separators", value: "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", invalid: "no traceparent"},
		{name: "properties without traceparent", value: "tracestate=" + ts, invalid: "no traceparent"},
		{name: "properties with bad traceparent", value: "traceparent=00-abc", invalid: "want 55"},
		{name: "garbage", value: "hello", invalid: "no traceparent"},
		{name: "not text", value: int64(7), invalid: "unsupported type"},
		{name: "bad tracestate keeps traceparent", value: tp + "\nRojo=1", parent: tp, invalid: "tracestate"},
		{name: "tracestate with 33 members", value: tp + "\n" + strings.Repeat("a=1,", 33), parent: tp, invalid: "at most 32"},
	}
	cfg := defaults()
	cfg.TracingColumn = traceCol
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := r.Route(traceRow(tt.value))
			if err != nil {
				t.Fatalf("route: %v (an invalid trace context must never make a bad row)", err)
			}
			h := headerMap(rec)
			if h["traceparent"] != tt.parent || h["tracestate"] != tt.state {
				t.Errorf("headers traceparent %q tracestate %q, want %q %q", h["traceparent"], h["tracestate"], tt.parent, tt.state)
			}
			if _, ok := h["traceparent"]; !ok && tt.parent != "" || ok && tt.parent == "" {
				t.Errorf("traceparent header present %v, want %v", ok, tt.parent != "")
			}
			if tt.invalid == "" && rec.TraceInvalid != "" || !strings.Contains(rec.TraceInvalid, tt.invalid) {
				t.Errorf("TraceInvalid %q, want it to contain %q", rec.TraceInvalid, tt.invalid)
			}
			if h["id"] != "e-1" || string(rec.Value) != `{"t":90}` {
				t.Errorf("the rest of the record changed: id %q value %q", h["id"], rec.Value)
			}
		})
	}
}

// TestTracingColumnAbsentFromRow: a table without the column (the
// debezium preset names it by default) gives no headers and no warning.
func TestTracingColumnAbsentFromRow(t *testing.T) {
	cfg := defaults()
	cfg.TracingColumn = traceCol
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	row := traceRow(nil)
	row.Columns, row.Values = row.Columns[:5], row.Values[:5]
	rec, err := r.Route(row)
	if err != nil || rec.TraceInvalid != "" || len(rec.Headers) != 2 {
		t.Fatalf("err %v, TraceInvalid %q, headers %v", err, rec.TraceInvalid, rec.Headers)
	}
}

// TestTracingColumnOffLeavesColumnAlone: without tracing_column a
// traceparent-looking column adds nothing.
func TestTracingColumnOffLeavesColumnAlone(t *testing.T) {
	r, err := New(defaults())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := r.Route(traceRow(tp))
	if err != nil || len(rec.Headers) != 2 || rec.TraceInvalid != "" {
		t.Fatalf("err %v, headers %v, TraceInvalid %q", err, rec.Headers, rec.TraceInvalid)
	}
}

func TestParseProperties(t *testing.T) {
	got := parseProperties("# comment\n! other\n\n  a = 1\nb:2\nc 3\nd\\ e=4\\u0041\\t\nf=x\\\n   y\na=dup\n")
	want := map[string]string{"a": "1", "b": "2", "c": "3", "d e": "4A\t", "f": "xy"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q = %q, want %q", k, got[k], v)
		}
	}
}

func headerMap(rec Record) map[string]string {
	h := map[string]string{}
	for _, x := range rec.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// FuzzTraceHeaders: whatever the column holds, a traceparent header that
// comes out is a valid version 00 traceparent, and a tracestate only with
// it.
func FuzzTraceHeaders(f *testing.F) {
	for _, s := range []string{tp, tp + "\n" + ts, "traceparent=" + tp + "\ntracestate=" + ts, "#x\ntraceparent:\\\n" + tp, "ff-", "\\u00", "traceparent=\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		parent, state, err := traceHeaders(v)
		if parent == "" {
			if state != "" {
				t.Fatalf("tracestate %q without a traceparent", state)
			}
			return
		}
		if again, err2 := validTraceparent(parent); err2 != nil || again != parent || parent[:2] != "00" {
			t.Fatalf("%q gave traceparent %q that is not a valid version 00 value: %v", v, parent, err2)
		}
		if state != "" && validTracestate(state) != nil {
			t.Fatalf("%q gave an invalid tracestate %q", v, state)
		}
		_ = err
	})
}
