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
	ctx = propagation.TraceContext{}.Extract(ctx, headerCarrier{r})
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

// headerCarrier reads a record's headers for the W3C propagator.
type headerCarrier struct{ r *kgo.Record }

func (c headerCarrier) Get(key string) string {
	for _, h := range c.r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	c.r.Headers = append(c.r.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(c.r.Headers))
	for i, h := range c.r.Headers {
		keys[i] = h.Key
	}
	return keys
}
