package relay

import (
	"bytes"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/router"
)

// TestInvalidTraceContextCountedAndLoggedOncePerMinute: every row whose
// tracing column is passed over is counted; the warning is logged once
// per table and minute, not once per row.
func TestInvalidTraceContextCountedAndLoggedOncePerMinute(t *testing.T) {
	var logs bytes.Buffer
	r := &routing{log: zerolog.New(&logs), metrics: metrics.New("test")}
	a, b := &route{table: "app.outbox"}, &route{table: "app.other"}
	rec := router.Record{EventID: "e-1", TraceInvalid: `traceparent "x": 1 characters, want 55`}
	for range 3 {
		r.traceInvalid(a, rec)
	}
	r.traceInvalid(b, rec)
	if n := testutil.ToFloat64(r.metrics.TracingInvalid.WithLabelValues("app.outbox")); n != 3 {
		t.Errorf("app.outbox counted %v, want 3", n)
	}
	if n := testutil.ToFloat64(r.metrics.TracingInvalid.WithLabelValues("app.other")); n != 1 {
		t.Errorf("app.other counted %v, want 1", n)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"table":"app.outbox"`) || !strings.Contains(lines[0], `"event_id":"e-1"`) ||
		!strings.Contains(lines[0], "want 55") || !strings.Contains(lines[1], `"table":"app.other"`) {
		t.Fatalf("log lines:\n%s\nwant one per table", logs.String())
	}
	a.traceLogged.Add(-int64(traceLogEvery)) // a minute later
	r.traceInvalid(a, rec)
	if n := strings.Count(logs.String(), "\n"); n != 3 {
		t.Fatalf("%d log lines after a minute, want 3:\n%s", n, logs.String())
	}
}
