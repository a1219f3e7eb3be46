// Package spans is the relay's own OpenTelemetry spans: one per outbox row
// published, a child of the trace context the row carried
// (router.tracing_column), exported over OTLP (tracing.otlp_endpoint).
//
// Contract:
//   - Off (a nil *Tracer, the default) it costs the callers a nil check per
//     row and nothing else.
//   - Start is called by the relay loop's goroutine once a row has become a
//     record. It starts the span, returns it (a Span the relay keeps beside
//     the record, never in it: not in its Context) and writes the span's
//     context into the record's traceparent/tracestate headers, so that the
//     consumer's span is the relay span's child.
//   - Span.End is called, from any goroutine, once the record is published
//     (exactly-once: its Kafka transaction committed; at-least-once:
//     acknowledged) or will not be (its transaction aborted); the zero
//     Span (not traced) ignores it.
//   - Spans are exported in batches by the SDK's goroutine, owned by the
//     Tracer and joined by Shutdown within its context; an export to a
//     collector that does not answer runs on past it until the SDK's
//     export timeout (OTEL_BSP_EXPORT_TIMEOUT, 30 s). A collector that is
//     slow or down never holds the relay back: spans beyond the queue are
//     dropped.
package spans

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/recordheaders"
)

// scope is the instrumentation scope of the relay's spans.
const scope = "github.com/outbox-relay/outbox-relay"

// Tracer starts and ends the relay's spans. The nil *Tracer is valid: off.
type Tracer struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	prop   propagation.TraceContext
}

// Options are what New needs besides the configuration.
type Options struct {
	Pipeline string // the relay's name (resource attribute)
	Version  string // service.version
	// Exporter replaces the OTLP exporter (tests, the demo); nil: the one
	// tracing.otlp_endpoint and tracing.otlp_protocol name.
	Exporter sdktrace.SpanExporter
	// OnError takes what the SDK fails to do (an export the receiver
	// refused or never answered): New makes it OpenTelemetry's error
	// handler, which is process-wide and otherwise prints plain text to
	// stderr, beside the relay's own log lines. Nil: left as it is.
	OnError func(error)
}

// New returns the Tracer cfg asks for: nil when tracing.otlp_endpoint is
// empty and opts.Exporter is nil. It starts the SDK's export goroutine;
// Shutdown joins it (within its context: see the package doc).
func New(ctx context.Context, cfg config.Tracing, opts Options) (*Tracer, error) {
	exp := opts.Exporter
	if exp == nil {
		if cfg.OTLPEndpoint == "" {
			return nil, nil
		}
		var err error
		if exp, err = otlpExporter(ctx, cfg); err != nil {
			return nil, err
		}
	}
	if opts.OnError != nil {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(opts.OnError))
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "outbox-relay"),
		attribute.String("service.version", opts.Version),
		attribute.String("outbox_relay.pipeline", opts.Pipeline),
	)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithBatcher(exp), // drops spans when its queue is full: never blocks End
	)
	return &Tracer{tp: tp, tracer: tp.Tracer(scope)}, nil
}

// otlpExporter is the OTLP exporter of cfg (validated: an http or https
// URL, a known protocol). Nothing connects before the first export.
func otlpExporter(ctx context.Context, cfg config.Tracing) (sdktrace.SpanExporter, error) {
	u, err := url.Parse(cfg.OTLPEndpoint)
	if err != nil {
		return nil, fmt.Errorf("parse tracing.otlp_endpoint: %w", err)
	}
	switch cfg.OTLPProtocol {
	case config.OTLPGRPC:
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpointURL(u.String()))
		if err != nil {
			return nil, fmt.Errorf("create otlp grpc exporter: %w", err)
		}
		return exp, nil
	default:
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces" // as OTEL_EXPORTER_OTLP_ENDPOINT: a base URL
		}
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(u.String()))
		if err != nil {
			return nil, fmt.Errorf("create otlp http exporter: %w", err)
		}
		return exp, nil
	}
}

// Shutdown exports the spans ended so far and stops the export goroutine;
// it returns by ctx's deadline, while an export a collector does not answer
// may run on until the SDK's export timeout.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down span exporter: %w", err)
	}
	return nil
}

// Row is what a span says of the row it publishes.
type Row struct {
	EventID    string
	Table      string    // schema.table
	CommitTime time.Time // the source transaction's commit (binlog) time
}

// Span is the relay's span of publishing one record, and the row's commit
// time it reports the delay from. The zero Span is none (tracing off, or
// not sampled): its methods do nothing. The relay keeps it beside the
// record it belongs to, never in the record.
type Span struct {
	span   trace.Span
	commit time.Time
}

// Traced reports whether s is a span (Start sampled its row).
func (s Span) Traced() bool { return s.span != nil }

// Start starts the span of publishing rec, a child of the trace context in
// rec's traceparent/tracestate headers (none: a new trace), and writes the
// span's own context into those headers when it is sampled. A span that is
// not sampled leaves rec as it was and returns the zero Span.
func (t *Tracer) Start(rec *kgo.Record, row Row) Span {
	if t == nil {
		return Span{}
	}
	parent := t.prop.Extract(context.Background(), recordheaders.Carrier{R: rec})
	ctx, span := t.tracer.Start(parent, "publish "+rec.Topic,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "publish"),
			attribute.String("messaging.destination.name", rec.Topic),
			attribute.String("messaging.message.id", row.EventID),
			attribute.String("messaging.kafka.message.key", string(rec.Key)),
			attribute.String("outbox_relay.source.table", row.Table),
		))
	if !span.IsRecording() {
		return Span{}
	}
	t.prop.Inject(ctx, recordheaders.Carrier{R: rec})
	return Span{span: span, commit: row.CommitTime}
}

// Untrace undoes Start on rec, whose first n headers are those it had
// before: Start appended the others (the traceparent of a row that had
// none). The record goes out as it came, without the relay's span, which
// the caller drops (the zero Span): it is never ended nor exported. The
// relay calls it when those headers would take the record over its
// topic's max.message.bytes.
func Untrace(rec *kgo.Record, n int) {
	if len(rec.Headers) <= n {
		return
	}
	clear(rec.Headers[n:])
	rec.Headers = rec.Headers[:n]
}

// ErrNotPublished is what End records on a span whose record's Kafka
// transaction was aborted: the row is published again by a later attempt,
// under a span of its own.
var ErrNotPublished = errors.New("kafka transaction aborted: the row is published again from the committed checkpoint")

// End ends s, the span of rec: published when err is nil, with rec's
// partition, offset and the delay from the source commit; failed with err
// otherwise. The zero Span is ignored.
func (s Span) End(rec *kgo.Record, err error) {
	if s.span == nil {
		return
	}
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
		s.span.End()
		return
	}
	now := time.Now()
	attrs := []attribute.KeyValue{
		attribute.String("messaging.destination.partition.id", strconv.Itoa(int(rec.Partition))),
		attribute.Int64("messaging.kafka.offset", rec.Offset),
	}
	if !s.commit.IsZero() {
		attrs = append(attrs, attribute.Int64("outbox_relay.commit_to_publish_ms", now.Sub(s.commit).Milliseconds()))
	}
	s.span.SetAttributes(attrs...)
	s.span.End(trace.WithTimestamp(now))
}
