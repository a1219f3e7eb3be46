package router

import (
	"testing"
	"time"
)

// BenchmarkRoute: the default record, and what the tracing column and
// CloudEvents add to it.
func BenchmarkRoute(b *testing.B) {
	payload := []byte(`{"alarm":"overheat","device":"dev-7","temperature":90.5,"unit":"C","site":"plant-3"}`)
	row := Row{Columns: []string{"event_id", "aggregate_type", "aggregate_id", "event_type", "payload", traceCol},
		Values: []any{"0193a0d4-7c1e-7b2a-9f3e-2d1c0b9a8f7e", "alarm", "dev-7", "AlarmCreated", payload, tp}, CommitTime: time.Unix(1764950000, 0)}
	for _, bc := range []struct {
		name string
		cfg  func(*Config)
	}{
		{"payload", func(*Config) {}},
		{"tracing", func(c *Config) { c.TracingColumn = traceCol }},
		{"cloudevents-structured", func(c *Config) { c.Format, c.CloudEventsSource = FormatCloudEvents, "/outbox-relay/alarms/app.outbox" }},
		{"cloudevents-binary", func(c *Config) {
			c.Format, c.CloudEventsMode, c.CloudEventsSource = FormatCloudEvents, ModeBinary, "/outbox-relay/alarms/app.outbox"
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			cfg := defaults()
			bc.cfg(&cfg)
			r, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Route(row); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
