package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

func remoteContext(t *testing.T, state string) context.Context {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState(state)
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

// TestSpanContextInDebeziumForm: the caller's span context is written as
// Properties lines (Debezium's serialized span context), NULL without one.
func TestSpanContextInDebeziumForm(t *testing.T) {
	if v := spanContext(context.Background()); v != nil {
		t.Fatalf("no span: %q, want NULL", v)
	}
	got := spanContext(remoteContext(t, ""))
	if got != "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\n" {
		t.Fatalf("got %q", got)
	}
	got = spanContext(remoteContext(t, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"))
	if got != "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61rcWkgMzE\n" {
		t.Fatalf("got %q", got)
	}
}

// TestWriteFillsTracingColumn: with Columns.TracingSpanContext the INSERT
// has the column, every row the same context.
func TestWriteFillsTracingColumn(t *testing.T) {
	c := DebeziumColumns
	c.TracingSpanContext = "tracingspancontext"
	w, err := New("outbox", WithColumns(c))
	if err != nil {
		t.Fatal(err)
	}
	evs := []Event{{ID: "a", AggregateType: "t", AggregateID: "1", Type: "x", Payload: []byte(`{}`)},
		{ID: "b", AggregateType: "t", AggregateID: "2", Type: "x", Payload: []byte(`{}`)}}
	span := spanContext(remoteContext(t, ""))
	q, args, err := w.insert(w.columns(nil), nil, evs, time.Now(), span)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(q, "(`id`, `aggregatetype`, `aggregateid`, `type`, `payload`, `tracingspancontext`)") || len(args) != 12 || args[5] != span || args[11] != span {
		t.Fatalf("query %s args %q", q, args)
	}
	ddl, err := CreateTable(MariaDB, TableSpec{Table: "outbox", Columns: c, Debezium: true})
	if err != nil || !strings.Contains(ddl, "`tracingspancontext` VARCHAR(1024) NULL") {
		t.Fatalf("create table: %v\n%s", err, ddl)
	}
}
