package inbox

import (
	"context"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/internal/recordheaders"
)

// tracerName is the instrumentation scope of the consumer's spans.
const tracerName = "github.com/outbox-relay/outbox-relay/inbox"

// startSpan starts the span of handling r: a consumer span, child of the
// trace context in r's traceparent/tracestate headers (W3C Trace Context,
// as outbox-relay's router.tracing_column writes them), named
// "process <topic>" as OpenTelemetry's messaging conventions name it.
// Without those headers it is a child of ctx's span, if any. The handler
// gets the span in its ctx.
func (s *Store) startSpan(ctx context.Context, r *kgo.Record, id string) (context.Context, trace.Span) {
	tp := s.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ctx = propagation.TraceContext{}.Extract(ctx, recordheaders.Carrier{R: r})
	return tp.Tracer(tracerName).Start(ctx, "process "+r.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "kafka"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", r.Topic),
			attribute.String("messaging.destination.partition.id", strconv.Itoa(int(r.Partition))),
			attribute.Int64("messaging.kafka.offset", r.Offset),
			attribute.String("messaging.message.id", id),
			attribute.String("messaging.consumer.group.name", s.Name),
		))
}

// endSpan records the outcome of handling and ends the span.
func endSpan(span trace.Span, o Outcome, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetAttributes(attribute.String("outbox_relay.inbox.outcome", o.String()))
	}
	span.End()
}
