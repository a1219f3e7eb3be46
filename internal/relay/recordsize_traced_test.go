package relay

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/spans"
)

// A row without a trace context whose record is at its topic's limit is
// published also with the relay's spans on (as it came, without the span).
// The failure guarded against: loop.record checks the record's size, then
// spans.Start adds the span's traceparent header (68 bytes) to a row that
// had none: a record the check let through is over max.message.bytes,
// franz-go (or the broker) refuses it inside the Kafka transaction and the
// relay stops on every restart, for a row that is published with tracing
// off.
func TestRecordSizeRowAtLimitWithoutContextPublishedWithSpansOn(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1)) // e1
	s.tx(s.insert("order", "1", 1)) // e2: the same record size as e1
	for i := range s.events {       // 2 KB payloads: above franz-go's 512-byte floor
		for _, row := range s.events[i].Rows {
			row[4] = []byte(`{"pad":"` + strings.Repeat("p", 2000) + `"}`)
		}
	}
	h := newHarness(t, s, nil)
	a := h.start()
	a.feed(s.through(1))
	if err := a.term(); err != nil {
		t.Fatal(err)
	}
	recs := h.consume()
	if len(recs) != 1 {
		t.Fatalf("%d records after the first transaction", len(recs))
	}
	n := recordSize(recs[0])
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	v := itoa(n)
	rs, err := kadm.NewClient(cl).AlterTopicConfigs(context.Background(),
		[]kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &v}}, recs[0].Topic)
	cl.Close()
	if err == nil {
		_, err = rs.On(recs[0].Topic, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tr, err := spans.New(context.Background(), config.Tracing{SampleRatio: 1}, spans.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	h.relay.spans = tr
	b := h.start()
	b.feedAll()
	if err := b.term(); err != nil {
		t.Fatalf("spans on, a row without a trace context of recordSize %d on a topic with max.message.bytes %d: %v (fatal: %v)", n, n, err, errclass.Fatal(err))
	}
	recs = h.consume()
	if len(recs) != 2 {
		t.Fatalf("%d records published, want 2", len(recs))
	}
	if tp := header(recs[1], "traceparent"); tp != "" || recordSize(recs[1]) != n {
		t.Errorf("the row at the limit went out with traceparent %q, %d bytes; want it as it came (%d bytes)", tp, recordSize(recs[1]), n)
	}
}
