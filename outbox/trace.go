package outbox

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// spanContext renders the trace context of ctx for the tracing column:
// the W3C propagator's traceparent and tracestate as java.util.Properties
// lines, the form Debezium's tracing.span.context.field reads (and
// outbox-relay's router.tracing_column); nil (NULL) when ctx carries no
// valid span context.
func spanContext(ctx context.Context) any {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	parent := carrier.Get("traceparent")
	if parent == "" {
		return nil
	}
	var b strings.Builder
	b.WriteString("traceparent=")
	b.WriteString(escapeProperty(parent))
	b.WriteByte('\n')
	if state := carrier.Get("tracestate"); state != "" {
		b.WriteString("tracestate=")
		b.WriteString(escapeProperty(state))
		b.WriteByte('\n')
	}
	return b.String()
}

// escapeProperty escapes a Properties value as Properties.store does for
// the characters a W3C value can hold: backslash, and '=' ':' '#' '!'.
func escapeProperty(v string) string {
	if !strings.ContainsAny(v, `\=:#!`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\', '=', ':', '#', '!':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
