package relay

import (
	"time"

	"github.com/outbox-relay/outbox-relay/router"
)

// traceLogEvery is how often an invalid trace context is logged per table.
const traceLogEvery = time.Minute

// traceInvalid counts a row whose router.tracing_column value is not a
// valid trace context (its record goes out without trace headers: a
// warning, never a stop) and logs it at most once per traceLogEvery per
// table, with the count to look at for the rest.
func (s *routing) traceInvalid(rt *route, rec router.Record) {
	s.metrics.TracingInvalid.WithLabelValues(rt.table).Inc()
	now := time.Now().UnixNano()
	last := rt.traceLogged.Load()
	if last != 0 && now-last < int64(traceLogEvery) || !rt.traceLogged.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn().Str("table", rt.table).Str("event_id", rec.EventID).Str("reason", rec.TraceInvalid).
		Msg("router.tracing_column is not a valid trace context: record published without traceparent/tracestate headers " +
			"(logged once a minute per table; outbox_relay_tracing_context_invalid_total counts them all)")
}
