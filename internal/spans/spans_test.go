package spans

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

const (
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	parent  = "00f067aa0ba902b7"
)

// tracer is a Tracer exporting into memory, with sample ratio ratio.
func tracer(t *testing.T, ratio float64) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := New(context.Background(), config.Tracing{SampleRatio: ratio}, Options{Pipeline: "alarms", Version: "test", Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	return tr, exp
}

// ended shuts tr down and returns the spans it exported.
func ended(t *testing.T, tr *Tracer, exp *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans() // before Shutdown, which resets the in-memory exporter
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	return spans
}

func record(headers ...string) *kgo.Record {
	r := &kgo.Record{Topic: "outbox.event.alarm", Key: []byte("device-7")}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return r
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// Off, rows and records are left exactly as they are.
func TestNilTracerLeavesRecordsAlone(t *testing.T) {
	var tr *Tracer
	r := record("id", "e-1", "traceparent", "00-"+traceID+"-"+parent+"-01")
	span := tr.Start(r, Row{EventID: "e-1"})
	span.End(r, nil)
	if span.Traced() || r.Context != nil || len(r.Headers) != 2 || header(r, "traceparent") != "00-"+traceID+"-"+parent+"-01" {
		t.Fatalf("record changed with tracing off: context %v, headers %v", r.Context, r.Headers)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A row's sampled context: the relay's span is its child, in the same
// trace, with the row's tracestate; the record's headers then carry the
// relay span's context, so that the consumer's span is the relay span's
// child. Published: the partition, offset and commit-to-publish delay.
func TestSpanIsTheRowContextsChildAndTheRecordsParent(t *testing.T) {
	tr, exp := tracer(t, 1)
	r := record("id", "e-1", "traceparent", "00-"+traceID+"-"+parent+"-01", "tracestate", "vendor=x")
	commit := time.Now().Add(-1500 * time.Millisecond)
	span := tr.Start(r, Row{EventID: "e-1", Table: "app.outbox", CommitTime: commit})
	if r.Context != nil {
		t.Fatal("Start set the record's Context: its span is the caller's to keep")
	}
	r.Partition, r.Offset = 2, 41
	span.End(r, nil)
	got := ended(t, tr, exp)
	if len(got) != 1 {
		t.Fatalf("%d spans exported, want 1", len(got))
	}
	s := got[0]
	if s.SpanContext.TraceID().String() != traceID || s.Parent.SpanID().String() != parent || !s.Parent.IsRemote() {
		t.Fatalf("span in trace %s with parent %s, want trace %s parent %s", s.SpanContext.TraceID(), s.Parent.SpanID(), traceID, parent)
	}
	if s.SpanKind != trace.SpanKindProducer || s.Name != "publish outbox.event.alarm" {
		t.Errorf("span %q of kind %v, want a producer span \"publish outbox.event.alarm\"", s.Name, s.SpanKind)
	}
	if want := "00-" + traceID + "-" + s.SpanContext.SpanID().String() + "-01"; header(r, "traceparent") != want {
		t.Errorf("record traceparent %q, want the relay span's %q", header(r, "traceparent"), want)
	}
	if header(r, "tracestate") != "vendor=x" || len(r.Headers) != 3 {
		t.Errorf("record headers %v: want id, traceparent and the row's tracestate once each", r.Headers)
	}
	a := attrs(s)
	for k, want := range map[attribute.Key]string{
		"messaging.message.id": "e-1", "messaging.destination.name": "outbox.event.alarm",
		"messaging.destination.partition.id": "2", "messaging.kafka.message.key": "device-7", "outbox_relay.source.table": "app.outbox",
	} {
		if a[k].AsString() != want {
			t.Errorf("attribute %s = %q, want %q", k, a[k].AsString(), want)
		}
	}
	if a["messaging.kafka.offset"].AsInt64() != 41 {
		t.Errorf("offset attribute %v, want 41", a["messaging.kafka.offset"])
	}
	if d := a["outbox_relay.commit_to_publish_ms"].AsInt64(); d < 1500 || d > 60_000 {
		t.Errorf("commit_to_publish_ms %d, want at least the 1500 ms since the commit", d)
	}
	if s.Status.Code == codes.Error {
		t.Errorf("published span has status %v", s.Status)
	}
}

// Sampling: a row's context decides for its span (not sampled: no span,
// headers as they were); a row without one is sampled by the ratio.
func TestSpanSamplingFollowsTheRowAndTheRatio(t *testing.T) {
	tr, exp := tracer(t, 1)
	unsampled := record("traceparent", "00-"+traceID+"-"+parent+"-00")
	unsampledSpan := tr.Start(unsampled, Row{EventID: "e-1"})
	unsampledSpan.End(unsampled, nil)
	root := record("id", "e-2")
	tr.Start(root, Row{EventID: "e-2"}).End(root, nil)
	got := ended(t, tr, exp)
	if header(unsampled, "traceparent") != "00-"+traceID+"-"+parent+"-00" || unsampledSpan.Traced() {
		t.Errorf("a row whose context is not sampled was changed: %v", unsampled.Headers)
	}
	if len(got) != 1 || got[0].Parent.IsValid() {
		t.Fatalf("spans %d, want 1 root span for the row without a context", len(got))
	}
	if header(root, "traceparent") == "" {
		t.Errorf("the root span's context is not in the record's headers: %v", root.Headers)
	}

	none, exp := tracer(t, 0)
	r := record("id", "e-3")
	none.Start(r, Row{EventID: "e-3"}).End(r, nil)
	if got := ended(t, none, exp); len(got) != 0 || len(r.Headers) != 1 {
		t.Fatalf("sample_ratio 0: %d spans, headers %v; want none and the record unchanged", len(got), r.Headers)
	}
}

// An aborted transaction ends its spans as failed (the row is published
// again under a new span); the traced record keeps no Context of its own,
// so franz-go gives it the produce context, whose end fails the record.
func TestSpanOfAnAbortedRecordFailsAndTheRecordKeepsNoContext(t *testing.T) {
	tr, exp := tracer(t, 1)
	r := record("id", "e-1")
	span := tr.Start(r, Row{EventID: "e-1"})
	if !span.Traced() {
		t.Fatal("a sampled row's span is none")
	}
	if r.Context != nil {
		t.Fatal("Start set the record's Context: franz-go would not give it the produce context")
	}
	span.End(r, ErrNotPublished)
	got := ended(t, tr, exp)
	if len(got) != 1 || got[0].Status.Code != codes.Error {
		t.Fatalf("spans %+v, want one with status error", got)
	}
	if got[0].Status.Description != ErrNotPublished.Error() {
		t.Errorf("status %q, want %q", got[0].Status.Description, ErrNotPublished)
	}
}

// Shutdown returns within its context even when the exporter does not
// answer (the SDK's export goroutine then runs on until its export
// timeout: this package has no goroutine-leak check for that reason).
func TestShutdownIsBoundedByItsContext(t *testing.T) {
	tr, err := New(context.Background(), config.Tracing{SampleRatio: 1}, Options{Exporter: hungExporter{}})
	if err != nil {
		t.Fatal(err)
	}
	r := record()
	tr.Start(r, Row{}).End(r, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_ = tr.Shutdown(ctx)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Shutdown took %v with a 200 ms context", took)
	}
}

// What the SDK fails to do (an export the receiver refused) reaches the
// relay's log through Options.OnError, not OpenTelemetry's default handler,
// which prints plain text to stderr between the relay's JSON lines, once per
// failed export while the receiver is down.
func TestExportErrorsGoToOnError(t *testing.T) {
	prev := otel.GetErrorHandler()
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	var mu sync.Mutex
	var got []error
	tr, err := New(context.Background(), config.Tracing{SampleRatio: 1}, Options{Exporter: refusingExporter{},
		OnError: func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	r := record()
	tr.Start(r, Row{}).End(r, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tr.Shutdown(ctx)
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || !errors.Is(got[0], errRefused) {
		t.Fatalf("OnError got %v, want the export's error", got)
	}
}

var errRefused = errors.New("receiver refused the spans (test)")

// refusingExporter fails every export.
type refusingExporter struct{}

func (refusingExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	return errRefused
}
func (refusingExporter) Shutdown(context.Context) error { return nil }

// hungExporter never answers until its context ends.
type hungExporter struct{}

func (hungExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	<-ctx.Done()
	return ctx.Err()
}
func (hungExporter) Shutdown(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

// The cost per row of Start and End: off (the nil Tracer, the default),
// and on with every span sampled and exported to nowhere.
func BenchmarkStartEnd(b *testing.B) {
	row := Row{EventID: "e-1", Table: "app.outbox", CommitTime: time.Now()}
	run := func(b *testing.B, tr *Tracer) {
		tp := []byte("00-" + traceID + "-" + parent + "-01")
		r := &kgo.Record{Topic: "outbox.event.alarm", Key: []byte("device-7"),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("e-1")}, {Key: "traceparent", Value: tp}}}
		b.ReportAllocs()
		for b.Loop() {
			r.Headers[1].Value = tp
			tr.Start(r, row).End(r, nil)
		}
	}
	b.Run("off", func(b *testing.B) { run(b, nil) })
	b.Run("on", func(b *testing.B) {
		tr, err := New(context.Background(), config.Tracing{SampleRatio: 1}, Options{Exporter: tracetest.NewNoopExporter()})
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = tr.Shutdown(context.Background()) }()
		run(b, tr)
	})
}
