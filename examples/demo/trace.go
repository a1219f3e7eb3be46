package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outbox-relay/outbox-relay/internal/otlpreceiver"
)

// The demo's trace: the alarm service, the relay and the notifier each
// send their spans over OTLP/HTTP to one receiver inside the demo (in
// production, an OpenTelemetry Collector); the demo then prints one alarm's
// trace across the three.

// tracerProvider exports service's spans to the OTLP/HTTP receiver at url,
// promptly (a demo: every 100 ms).
func tracerProvider(ctx context.Context, url, service string) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(url+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("create otlp exporter: %w", err)
	}
	return sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(100*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))),
	), nil
}

// shutdown sends tp's last spans, within 5 s.
func shutdown(tp *sdktrace.TracerProvider) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tp.Shutdown(ctx)
}

// alarmTrace is one alarm's spans: the alarm service's, the relay's child
// of it, the notifier's child of the relay's.
type alarmTrace struct{ app, relay, notifier otlpreceiver.Span }

// findTrace returns an alarm's complete trace among spans, if any.
func findTrace(spans []otlpreceiver.Span) (alarmTrace, bool) {
	byParent := map[string][]otlpreceiver.Span{}
	for _, s := range spans {
		byParent[s.ParentSpanID] = append(byParent[s.ParentSpanID], s)
	}
	for _, app := range spans {
		if app.Service != "alarm-service" {
			continue
		}
		for _, relay := range byParent[app.SpanID] {
			if relay.Service != "outbox-relay" {
				continue
			}
			for _, n := range byParent[relay.SpanID] {
				if n.Service == "notifier" && n.TraceID == app.TraceID {
					return alarmTrace{app, relay, n}, true
				}
			}
		}
	}
	return alarmTrace{}, false
}

// showTrace waits (30 s at most) for an alarm's complete trace at rcv and
// prints it.
func showTrace(ctx context.Context, rcv *otlpreceiver.Receiver) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if tr, ok := findTrace(rcv.Spans()); ok {
			fmt.Printf("== one alarm's trace (%s), from the spans the three services sent over OTLP:\n", tr.app.TraceID)
			for _, s := range []otlpreceiver.Span{tr.app, tr.relay, tr.notifier} {
				parent := "root"
				if s.ParentSpanID != "" {
					parent = "child of " + s.ParentSpanID
				}
				fmt.Printf("   %-14s %-28s span %s (%s) %s\n", s.Service, s.Name, s.SpanID, parent, s.End.Sub(s.Start).Round(time.Microsecond))
			}
			fmt.Printf("   relay span: %s\n", relayAttrs(tr.relay))
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no alarm's trace from alarm service through relay to notifier within 30s (%d spans received)", len(rcv.Spans()))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// relayAttrs lists the relay span's attributes that say what it published.
func relayAttrs(s otlpreceiver.Span) string {
	keys := make([]string, 0, len(s.Attributes))
	for k := range s.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for _, k := range keys {
		switch k {
		case "messaging.message.id", "messaging.destination.partition.id", "messaging.kafka.offset", "outbox_relay.commit_to_publish_ms":
			out += fmt.Sprintf("%s=%s ", k, s.Attributes[k])
		}
	}
	return out
}
