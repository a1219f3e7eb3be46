//go:build integration

package kititest

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// TestTraceContextFromOutboxWriteToInboxSpan: the span context of the
// ctx given to outbox.Write reaches the record as its traceparent and
// tracestate headers (router.tracing_column), and the inbox handles that
// record in a span that is a child of the writer's span. A row written
// without a span gets no trace headers; a row whose column holds an
// invalid context is published without them and counted.
func TestTraceContextFromOutboxWriteToInboxSpan(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	db := openDB(t, s.Name)
	if _, err := db.Exec("ALTER TABLE outbox ADD COLUMN tracingspancontext VARCHAR(1024) NULL"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(inbox.DDL(inbox.DefaultTable)); err != nil {
		t.Fatal(err)
	}
	cfg.Router.TracingColumn = "tracingspancontext"
	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	cols := outbox.DefaultColumns
	cols.TracingSpanContext = "tracingspancontext"
	w, err := outbox.New(s.Table(), outbox.WithColumns(cols))
	if err != nil {
		t.Fatal(err)
	}
	write := func(ctx context.Context, ev outbox.Event) string {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := w.Write(ctx, tx, ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return ids[0]
	}
	alarm := outbox.Event{AggregateType: "alarm", AggregateID: "device-1", Type: "AlarmCreated", Payload: []byte(`{"temp": 91}`)}

	// The alarm service's span, under an incoming request's context that
	// carries a tracestate.
	state, err := trace.ParseTraceState("rojo=00f067aa0ba902b7")
	if err != nil {
		t.Fatal(err)
	}
	incoming := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID: trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true})
	spanCtx, span := tp.Tracer("alarm-service").Start(trace.ContextWithRemoteSpanContext(ctx, incoming), "raise alarm")
	traced := write(spanCtx, alarm)
	span.End()
	sc := span.SpanContext()
	wantParent := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())

	untraced := write(ctx, alarm)
	if _, err := db.Exec("INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, tracingspancontext) VALUES ('bad-trace', 'alarm', 'device-1', 'AlarmCreated', '{}', 'traceparent=00-00000000000000000000000000000000-00f067aa0ba902b7-01')"); err != nil {
		t.Fatal(err)
	}

	var recs map[string]itest.Record
	itest.Eventually(t, time.Minute, func() error {
		recs = map[string]itest.Record{}
		for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
			recs[r.ID] = r
		}
		if len(recs) < 3 {
			return fmt.Errorf("%d of 3 records", len(recs))
		}
		return nil
	})
	rec := recs[traced]
	if rec.Headers["traceparent"] != wantParent || rec.Headers["tracestate"] != "rojo=00f067aa0ba902b7" {
		t.Fatalf("traced record: traceparent %q tracestate %q, want %q and the request's tracestate", rec.Headers["traceparent"], rec.Headers["tracestate"], wantParent)
	}
	for _, id := range []string{untraced, "bad-trace"} {
		if _, ok := recs[id].Headers["traceparent"]; ok {
			t.Errorf("record %s has a traceparent %q, want none", id, recs[id].Headers["traceparent"])
		}
	}
	if n := testutil.ToFloat64(relay.Metrics.TracingInvalid.WithLabelValues(s.Table())); n != 1 {
		t.Errorf("outbox_relay_tracing_context_invalid_total %v, want 1", n)
	}

	// The notifier's inbox continues the trace.
	store := &inbox.Store{DB: db, Name: "notifier", TracerProvider: tp}
	kr := &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: []byte(rec.Key), Value: rec.Value}
	for k, v := range rec.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	var inHandler trace.SpanContext
	if _, err := store.Handle(ctx, kr, func(ctx context.Context, _ *sql.Tx, _ *kgo.Record) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var process sdktrace.ReadOnlySpan
	for _, sp := range spans.Ended() {
		if strings.HasPrefix(sp.Name(), "process ") {
			process = sp
		}
	}
	if process == nil {
		t.Fatalf("no consumer span among %d ended spans", len(spans.Ended()))
	}
	if process.Parent().SpanID() != sc.SpanID() || process.SpanContext().TraceID() != sc.TraceID() || process.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("consumer span %s: parent %s trace %s kind %v, want a child of the writer's span %s in trace %s",
			process.Name(), process.Parent().SpanID(), process.SpanContext().TraceID(), process.SpanKind(), sc.SpanID(), sc.TraceID())
	}
	if inHandler.SpanID() != process.SpanContext().SpanID() {
		t.Fatalf("the handler's ctx carries span %s, want the consumer span %s", inHandler.SpanID(), process.SpanContext().SpanID())
	}
}
