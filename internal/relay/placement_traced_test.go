package relay

import (
	"context"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/spans"
	"github.com/outbox-relay/outbox-relay/schema"
)

// tracedPlacement is a pipeline of 60 rows of 60 aggregates on a topic of
// 6 partitions, each row naming a partition in its shard column (i % 6);
// with placed, the router places records by that column
// (router.additional_fields placement partition); with traced, the
// relay's spans are on (exported to memory).
func tracedPlacement(t *testing.T, placed, traced bool) (*harness, *keptSpans) {
	t.Helper()
	s := newScript("mariadb")
	for i := range 60 {
		s.tx(s.insert("order", "order-"+strconv.Itoa(i), 1))
	}
	cols := append(append([]string{}, outboxColumns...), "shard")
	table := &binlog.Table{Schema: "app", Name: "outbox", Columns: cols}
	layout := schema.Tables{"app.outbox": cols}
	for i := range s.events {
		ev := &s.events[i]
		switch ev.Kind {
		case binlog.KindRows:
			ev.Table = table
			for j, row := range ev.Rows {
				n, _ := strconv.Atoi(row[0].(string)[1:]) // event id e<n>, from 1
				ev.Rows[j] = append(row, int64((n-1)%6))
			}
		case binlog.KindCommit:
			ev.Schema = layout
		}
	}
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.TopicPartitions = 6
		if placed {
			c.Router.AdditionalFields = []config.AdditionalField{{Column: "shard", Placement: "partition"}}
		}
	})
	if !traced {
		return h, nil
	}
	exp := &keptSpans{tracetest.NewInMemoryExporter()}
	tr, err := spans.New(context.Background(), config.Tracing{SampleRatio: 1}, spans.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	h.relay.spans = tr
	return h, exp
}

// keptSpans keeps the spans exported after the tracer shuts down (which
// exports what it holds).
type keptSpans struct{ *tracetest.InMemoryExporter }

func (keptSpans) Shutdown(context.Context) error { return nil }

// byEventID runs the pipeline through and returns its records by event id.
func (h *harness) byEventID() map[string]*kgo.Record {
	h.t.Helper()
	h.start().finish()
	got := map[string]*kgo.Record{}
	for _, r := range h.consume() {
		got[header(r, "id")] = r
	}
	if len(got) != 60 {
		h.t.Fatalf("%d records, want 60", len(got))
	}
	return got
}

// With the relay's spans on (tracing.otlp_endpoint), every row whose
// partition comes from a column lands in the partition it names. The
// failure guarded against: the explicit-partition mark was the record's
// Context, compared by identity, and starting the span replaced it: 46 of
// 60 such records landed in their key's partition instead.
func TestTracedRowsLandInThePartitionTheirColumnNames(t *testing.T) {
	h, exp := tracedPlacement(t, true, true)
	recs := h.byEventID()
	wrong := 0
	for id, r := range recs {
		n, _ := strconv.Atoi(id[1:])
		if want := int32((n - 1) % 6); r.Partition != want {
			wrong++
			t.Errorf("%s (key %s) in partition %d, its row names %d", id, r.Key, r.Partition, want)
		}
		if header(r, "traceparent") == "" {
			t.Errorf("%s went out without the relay span's traceparent", id)
		}
	}
	if wrong > 0 {
		t.Fatalf("%d of 60 traced records not in the partition their row names", wrong)
	}
	// Each span says the partition its record landed in.
	if err := h.relay.spans.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ended := exp.GetSpans()
	if len(ended) != 60 {
		t.Fatalf("%d spans ended, want 60", len(ended))
	}
	for _, sp := range ended {
		var id, part string
		for _, a := range sp.Attributes {
			switch a.Key {
			case "messaging.message.id":
				id = a.Value.AsString()
			case "messaging.destination.partition.id":
				part = a.Value.AsString()
			}
		}
		if r := recs[id]; r == nil || part != strconv.Itoa(int(r.Partition)) {
			t.Errorf("span of %s says partition %q", id, part)
		}
	}
}

// A traced row without a partition column lands where the untraced one
// does: in its key's partition as the Java client places it (murmur2).
func TestTracedRowsWithoutAPartitionColumnLandWhereUntracedOnesDo(t *testing.T) {
	untraced, _ := tracedPlacement(t, false, false)
	traced, _ := tracedPlacement(t, false, true)
	plain, spanned := untraced.byEventID(), traced.byEventID()
	spread := map[int32]bool{}
	for id, r := range plain {
		if want := clients.KeyPartition(r.Key, 6); r.Partition != want {
			t.Errorf("untraced %s (key %s) in partition %d, its key's is %d", id, r.Key, r.Partition, want)
		}
		if s := spanned[id]; s.Partition != r.Partition {
			t.Errorf("traced %s (key %s) in partition %d, untraced in %d", id, r.Key, s.Partition, r.Partition)
		}
		spread[r.Partition] = true
	}
	if len(spread) != 6 {
		t.Fatalf("60 keys over partitions %v: want all 6 used", spread)
	}
}
