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
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/otlpreceiver"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// tracedPipeline is a pipeline whose outbox has the tracing column
// (router.tracing_column) and an inbox table, a writer that fills the
// column from its ctx, and the spans of the alarm service and the notifier
// (in memory).
type tracedPipeline struct {
	t     *testing.T
	k     *itest.Kafka
	s     *itest.Schema
	cfg   config.Config
	db    *sql.DB
	w     *outbox.Writer
	tp    *sdktrace.TracerProvider
	spans *tracetest.SpanRecorder
	relay *itest.InProcess
}

// newTracedPipeline starts it; tweak (may be nil) adjusts the relay's
// configuration.
func newTracedPipeline(t *testing.T, tweak func(*config.Config)) *tracedPipeline {
	k, s, cfg := env.Pipeline(t)
	p := &tracedPipeline{t: t, k: k, s: s, cfg: cfg, db: openDB(t, s.Name), spans: tracetest.NewSpanRecorder()}
	if _, err := p.db.Exec("ALTER TABLE outbox ADD COLUMN tracingspancontext VARCHAR(1024) NULL"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.db.Exec(inbox.DDL(inbox.DefaultTable)); err != nil {
		t.Fatal(err)
	}
	p.cfg.Router.TracingColumn = "tracingspancontext"
	if tweak != nil {
		tweak(&p.cfg)
	}
	p.relay = itest.RunRelay(t, p.cfg)
	p.relay.WaitReady(t)
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.spans))
	t.Cleanup(func() { _ = p.tp.Shutdown(context.Background()) })
	cols := outbox.DefaultColumns
	cols.TracingSpanContext = "tracingspancontext"
	w, err := outbox.New(s.Table(), outbox.WithColumns(cols))
	if err != nil {
		t.Fatal(err)
	}
	p.w = w
	return p
}

var alarm = outbox.Event{AggregateType: "alarm", AggregateID: "device-1", Type: "AlarmCreated", Payload: []byte(`{"temp": 91}`)}

// write writes ev with outbox.Write in a transaction of its own and
// returns its event id.
func (p *tracedPipeline) write(ctx context.Context, ev outbox.Event) string {
	p.t.Helper()
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		p.t.Fatal(err)
	}
	ids, err := p.w.Write(ctx, tx, ev)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		p.t.Fatal(err)
	}
	return ids[0]
}

// raise writes the alarm in the alarm service's span, under an incoming
// request's context that carries a tracestate, and returns its event id
// and the span's context.
func (p *tracedPipeline) raise() (string, trace.SpanContext) {
	p.t.Helper()
	state, err := trace.ParseTraceState("rojo=00f067aa0ba902b7")
	if err != nil {
		p.t.Fatal(err)
	}
	incoming := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID: trace.SpanID{0, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, TraceFlags: trace.FlagsSampled, TraceState: state, Remote: true})
	ctx, span := p.tp.Tracer("alarm-service").Start(trace.ContextWithRemoteSpanContext(context.Background(), incoming), "raise alarm")
	id := p.write(ctx, alarm)
	span.End()
	return id, span.SpanContext()
}

// records waits for n committed records and returns them by event id.
func (p *tracedPipeline) records(n int) map[string]itest.Record {
	p.t.Helper()
	var recs map[string]itest.Record
	itest.Eventually(p.t, time.Minute, func() error {
		recs = map[string]itest.Record{}
		for _, r := range itest.Consume(p.t, p.k.Brokers, p.cfg.Router.TopicPrefix) {
			recs[r.ID] = r
		}
		if len(recs) < n {
			return fmt.Errorf("%d of %d records", len(recs), n)
		}
		return nil
	})
	return recs
}

// handle has the notifier's inbox handle rec and returns its consumer
// span, and the span the handler's ctx carried.
func (p *tracedPipeline) handle(rec itest.Record) (sdktrace.ReadOnlySpan, trace.SpanContext) {
	p.t.Helper()
	store := &inbox.Store{DB: p.db, Name: "notifier", TracerProvider: p.tp}
	kr := &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: []byte(rec.Key), Value: rec.Value}
	for k, v := range rec.Headers {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	var inHandler trace.SpanContext
	if _, err := store.Handle(context.Background(), kr, func(ctx context.Context, _ *sql.Tx, _ *kgo.Record) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	}); err != nil {
		p.t.Fatal(err)
	}
	for _, sp := range p.spans.Ended() {
		if strings.HasPrefix(sp.Name(), "process ") {
			return sp, inHandler
		}
	}
	p.t.Fatalf("no consumer span among %d ended spans", len(p.spans.Ended()))
	return nil, inHandler
}

// TestTraceContextFromOutboxWriteToInboxSpan: the span context of the
// ctx given to outbox.Write reaches the record as its traceparent and
// tracestate headers (router.tracing_column), and the inbox handles that
// record in a span that is a child of the writer's span. A row written
// without a span gets no trace headers; a row whose column holds an
// invalid context is published without them and counted.
func TestTraceContextFromOutboxWriteToInboxSpan(t *testing.T) {
	p := newTracedPipeline(t, nil)
	traced, sc := p.raise()
	wantParent := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
	untraced := p.write(context.Background(), alarm)
	if _, err := p.db.Exec("INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, tracingspancontext) VALUES ('bad-trace', 'alarm', 'device-1', 'AlarmCreated', '{}', 'traceparent=00-00000000000000000000000000000000-00f067aa0ba902b7-01')"); err != nil {
		t.Fatal(err)
	}
	recs := p.records(3)
	rec := recs[traced]
	if rec.Headers["traceparent"] != wantParent || rec.Headers["tracestate"] != "rojo=00f067aa0ba902b7" {
		t.Fatalf("traced record: traceparent %q tracestate %q, want %q and the request's tracestate", rec.Headers["traceparent"], rec.Headers["tracestate"], wantParent)
	}
	for _, id := range []string{untraced, "bad-trace"} {
		if _, ok := recs[id].Headers["traceparent"]; ok {
			t.Errorf("record %s has a traceparent %q, want none", id, recs[id].Headers["traceparent"])
		}
	}
	if n := testutil.ToFloat64(p.relay.Metrics.TracingInvalid.WithLabelValues(p.s.Table())); n != 1 {
		t.Errorf("outbox_relay_tracing_context_invalid_total %v, want 1", n)
	}

	// The notifier's inbox continues the trace.
	process, inHandler := p.handle(rec)
	if process.Parent().SpanID() != sc.SpanID() || process.SpanContext().TraceID() != sc.TraceID() || process.SpanKind() != trace.SpanKindConsumer {
		t.Fatalf("consumer span %s: parent %s trace %s kind %v, want a child of the writer's span %s in trace %s",
			process.Name(), process.Parent().SpanID(), process.SpanContext().TraceID(), process.SpanKind(), sc.SpanID(), sc.TraceID())
	}
	if inHandler.SpanID() != process.SpanContext().SpanID() {
		t.Fatalf("the handler's ctx carries span %s, want the consumer span %s", inHandler.SpanID(), process.SpanContext().SpanID())
	}
}

// With tracing.otlp_endpoint set, over OTLP/HTTP and OTLP/gRPC, in both
// deliveries (the span ends at the commit, or at the acknowledgement): the
// relay's span of the traced row reaches the receiver as a child of the
// writer's span, with the row's event id, topic, partition, offset and
// commit-to-publish delay; the record carries the relay span's context, so
// the notifier's span is the relay span's child: one trace, alarm service
// -> relay -> notifier. A row without a context gets a root span of its
// own (sample_ratio 1) and a record whose traceparent names it.
func TestRelaySpanLinksTheWriterToTheConsumer(t *testing.T) {
	rcv, err := otlpreceiver.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rcv.Close)
	for _, tc := range []struct {
		proto    config.OTLPProtocol
		delivery config.Delivery
	}{{config.OTLPHTTP, config.ExactlyOnce}, {config.OTLPGRPC, config.ExactlyOnce}, {config.OTLPHTTP, config.AtLeastOnce}} {
		t.Run(string(tc.proto)+"/"+string(tc.delivery), func(t *testing.T) {
			p := newTracedPipeline(t, func(c *config.Config) {
				c.Kafka.Delivery = tc.delivery
				c.Tracing.OTLPProtocol, c.Tracing.OTLPEndpoint = tc.proto, rcv.HTTPURL
				if tc.proto == config.OTLPGRPC {
					c.Tracing.OTLPEndpoint = rcv.GRPCURL
				}
			})
			traced, sc := p.raise()
			untraced := p.write(context.Background(), alarm)
			recs := p.records(2)
			rec := recs[traced]
			var relaySpan, rootSpan otlpreceiver.Span
			itest.Eventually(t, time.Minute, func() error {
				relaySpan, rootSpan = otlpreceiver.Span{}, otlpreceiver.Span{}
				for _, s := range rcv.Spans() {
					switch s.Attributes["messaging.message.id"] {
					case traced:
						relaySpan = s
					case untraced:
						rootSpan = s
					}
				}
				if relaySpan.SpanID == "" || rootSpan.SpanID == "" {
					return fmt.Errorf("the relay's spans of %s and %s not received yet (%d spans)", traced, untraced, len(rcv.Spans()))
				}
				return nil
			})
			if relaySpan.TraceID != sc.TraceID().String() || relaySpan.ParentSpanID != sc.SpanID().String() {
				t.Fatalf("relay span in trace %s with parent %s, want a child of the writer's span %s in trace %s",
					relaySpan.TraceID, relaySpan.ParentSpanID, sc.SpanID(), sc.TraceID())
			}
			if relaySpan.Service != "outbox-relay" || relaySpan.Kind != 4 || relaySpan.Error != "" {
				t.Errorf("relay span: service %q kind %d error %q, want a producer span of service outbox-relay", relaySpan.Service, relaySpan.Kind, relaySpan.Error)
			}
			want := map[string]string{
				"messaging.destination.name":         rec.Topic,
				"messaging.destination.partition.id": fmt.Sprint(rec.Partition),
				"messaging.kafka.offset":             fmt.Sprint(rec.Offset),
				"messaging.kafka.message.key":        "device-1",
				"outbox_relay.source.table":          p.s.Table(),
			}
			for k, v := range want {
				if relaySpan.Attributes[k] != v {
					t.Errorf("relay span attribute %s = %q, want %q", k, relaySpan.Attributes[k], v)
				}
			}
			if _, ok := relaySpan.Attributes["outbox_relay.commit_to_publish_ms"]; !ok {
				t.Errorf("relay span has no commit_to_publish_ms: %v", relaySpan.Attributes)
			}
			if wantParent := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), relaySpan.SpanID); rec.Headers["traceparent"] != wantParent || rec.Headers["tracestate"] != "rojo=00f067aa0ba902b7" {
				t.Fatalf("record traceparent %q tracestate %q, want the relay span's %q and the request's tracestate", rec.Headers["traceparent"], rec.Headers["tracestate"], wantParent)
			}
			if rootSpan.ParentSpanID != "" || !strings.Contains(recs[untraced].Headers["traceparent"], rootSpan.SpanID) {
				t.Errorf("row without a context: span parent %q, record traceparent %q; want a root span named by the record", rootSpan.ParentSpanID, recs[untraced].Headers["traceparent"])
			}
			process, _ := p.handle(rec)
			if process.Parent().SpanID().String() != relaySpan.SpanID || process.SpanContext().TraceID() != sc.TraceID() {
				t.Fatalf("consumer span: parent %s trace %s, want a child of the relay span %s in trace %s",
					process.Parent().SpanID(), process.SpanContext().TraceID(), relaySpan.SpanID, sc.TraceID())
			}
		})
	}
}
