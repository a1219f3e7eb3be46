package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/spans"
	"github.com/outbox-relay/outbox-relay/router"
)

// The route step: a row routed to a record and checked against its topic
// (recordcheck.go; the topic as the catalog knows it, catalog.go), its
// placement and its span, or a bad row's dead letter. It knows the routes,
// the catalog it asks and the tracer; nothing of the loop that calls it
// nor of the delivery its records go to (but the record's type,
// kafkarecord.go).

// routing is the route step of one attempt, used on the loop's goroutine.
type routing struct {
	routes  map[tableKey]*route
	topics  *catalog
	spans   *spans.Tracer // nil: tracing off
	metrics *metrics.Metrics
	log     zerolog.Logger
	// slab: records not handed out yet (newRecord).
	slab []kgo.Record
}

// slabRecords is how many records of small rows are allocated at once, and
// slabBytes how large a row's key and value may be to take one of them: a
// slab stays in memory while any record of it is, with what its records
// point to (at most slabRecords x slabBytes of rows already published).
const (
	slabRecords = 128
	slabBytes   = 4 << 10
)

// newRecord is an empty record for a row of size bytes of key and value:
// one of a slab when the row is small (one allocation for many records),
// else its own.
func (s *routing) newRecord(size int) *kgo.Record {
	if size > slabBytes {
		return new(kgo.Record)
	}
	if len(s.slab) == 0 {
		s.slab = make([]kgo.Record, slabRecords)
	}
	r := &s.slab[0]
	s.slab = s.slab[1:]
	return r
}

// outgoing is a record ready to produce and what it counts as.
type outgoing struct {
	kafka   outRecord
	outcome string // published | dead_letter
	EventID string
}

// routeOf is the route of the captured table of a rows event.
func (s *routing) routeOf(ev *binlog.Event) (*route, error) {
	rt := s.routes[tableKey{ev.Table.Schema, ev.Table.Name}]
	if rt == nil {
		return nil, fmt.Errorf("rows of %s, which is not a captured table", ev.Table)
	}
	return rt, nil
}

// record routes row and checks it against its topic: a bad row, or a record
// Kafka would refuse, is an error wrapping router.ErrBadRow.
func (s *routing) record(ctx context.Context, rt *route, row router.Row) (outgoing, error) {
	rec, err := rt.router.Route(row)
	out := outgoing{EventID: rec.EventID, outcome: "published"}
	if err != nil {
		return out, err
	}
	if rec.TraceInvalid != "" {
		s.traceInvalid(rt, rec)
	}
	info, err := s.topics.ensure(ctx, rec.Topic)
	if err != nil {
		return out, err
	}
	out.kafka.Record = s.newRecord(len(rec.Key) + len(rec.Value))
	*out.kafka.Record = kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: rec.Timestamp}
	if rec.HasPartition {
		if rec.Partition >= info.partitions {
			return out, fmt.Errorf("%w: partition %d, topic %s has %d", router.ErrBadRow, rec.Partition, rec.Topic, info.partitions)
		}
		out.kafka.Partition = rec.Partition
	} else {
		out.kafka.Partition = clients.KeyPartition(rec.Key, info.placeBy)
	}
	if n := recordSize(out.kafka.Record); n > info.maxBytes {
		// Too large for the topic as last read: read it again first. A
		// raised limit ends the attempt: the next one's client batches by
		// it (franz-go keeps a partition's limit once it has met it).
		was := info.maxBytes
		info, again, err := s.topics.reread(ctx, rec.Topic)
		if err != nil {
			return out, err
		}
		if !again || n > info.maxBytes {
			return out, fmt.Errorf("%w: record of %d bytes, topic %s takes at most %d (max.message.bytes, or the client's batch limit)", router.ErrBadRow, n, rec.Topic, info.maxBytes)
		}
		return out, fmt.Errorf("topic %s: max.message.bytes is now %d (was %d): start again with it", rec.Topic, info.maxBytes, was)
	}
	if err := checkStamp(out.kafka.Record, info); err != nil {
		return out, err
	}
	if s.spans != nil {
		n := len(out.kafka.Headers)
		out.kafka.span = s.spans.Start(out.kafka.Record, spans.Row{EventID: rec.EventID, Table: rt.table, CommitTime: row.CommitTime})
		if recordSize(out.kafka.Record) > info.maxBytes {
			// The span's traceparent, added to a row that had none, takes a
			// record at its topic's limit over it: the row goes out as it
			// came, without the relay's span.
			spans.Untrace(out.kafka.Record, n)
			out.kafka.span = spans.Span{}
		}
	}
	return out, nil
}

// deadLetter builds the record that carries a bad row to the dead-letter
// topic: the row's columns as a JSON object, headers naming the error, the
// source table and GTID.
func (s *routing) deadLetter(ctx context.Context, rt *route, ev *binlog.Event, row router.Row, eventID string, cause error) (outgoing, error) {
	info, err := s.topics.ensure(ctx, rt.deadLetter)
	if err != nil {
		return outgoing{}, err
	}
	// A row whose values alone are larger than the topic takes is never
	// encoded: its JSON would be dropped below, after costing its size
	// again in memory (a 60 MB row, several times that).
	var value []byte
	if rowBytes(row) <= info.maxBytes {
		cols := make(map[string]any, len(row.Columns))
		for i, c := range row.Columns {
			if i < len(row.Values) {
				v := row.Values[i]
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				cols[c] = v
			}
		}
		if value, err = json.Marshal(cols); err != nil {
			// cause wraps router.ErrBadRow: the relay stops before the row.
			return outgoing{}, fmt.Errorf("encode dead-letter row: %w; %w", err, cause)
		}
	}
	key := []byte(eventID)
	rec := &kgo.Record{Topic: rt.deadLetter, Partition: clients.KeyPartition(key, info.placeBy), Key: key, Value: value, Timestamp: row.CommitTime, Headers: []kgo.RecordHeader{
		{Key: "error", Value: []byte(cause.Error())},
		{Key: "source.table", Value: []byte(rt.table)},
		{Key: "source.gtid", Value: []byte(ev.GTID)},
		{Key: "id", Value: []byte(eventID)},
	}}
	if info.stamps.refuses(rec.Timestamp, time.Now()) != "" {
		// The row's own timestamp is what was wrong with it (or the
		// dead-letter topic would refuse it too): the dead letter is
		// stamped now; its header keeps the row's.
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "source.timestamp", Value: []byte(rec.Timestamp.UTC().Format(time.RFC3339Nano))})
		rec.Timestamp = time.Now()
	}
	if value == nil || recordSize(rec) > info.maxBytes {
		// The row stays in the outbox table; the headers say where.
		rec.Value = nil
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "truncated", Value: []byte("true")})
		if n := recordSize(rec); n > info.maxBytes {
			// Not even its headers fit: the relay stops before the row.
			return outgoing{}, fmt.Errorf("dead-letter topic %s takes at most %d bytes, the row's truncated record is %d: %w", rt.deadLetter, info.maxBytes, n, cause)
		}
	}
	s.log.Warn().Err(cause).Str("dead_letter_topic", rt.deadLetter).Msg("bad row sent to the dead-letter topic")
	return outgoing{kafka: outRecord{Record: rec}, outcome: "dead_letter", EventID: eventID}, nil
}

// rowBytes is the size of row's text and byte values.
func rowBytes(row router.Row) int {
	n := 0
	for _, v := range row.Values {
		switch v := v.(type) {
		case []byte:
			n += len(v)
		case string:
			n += len(v)
		}
	}
	return n
}

// tableKey names a captured table without allocating.
type tableKey struct{ schema, name string }

// route is how the rows of one outbox table are published.
type route struct {
	router     *router.Router
	deadLetter string // topic; "" when on_error is fail
	invalidOp  string // warn | error | fatal
	table      string
	// traceLogged is when an invalid trace context was last logged (unix
	// nanoseconds): see traceInvalid.
	traceLogged atomic.Int64
}
