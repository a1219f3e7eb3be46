package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/spans"
	"github.com/outbox-relay/outbox-relay/router"
)

// The loop's records: a row routed to a record and checked against its
// topic (recordcheck.go), a bad row's dead letter, and the outbox rows
// updated or deleted instead of inserted.

// outgoing is a record ready to produce and what it counts as.
type outgoing struct {
	kafka   outRecord
	outcome string // published | dead_letter
	EventID string
}

// outRecord is a record the relay produces, with the span it publishes it
// under (the zero spans.Span: none), kept beside the record, never in it.
// Its place is the record's own Partition, chosen by the loop: the
// router's (placement partition), or its key's by the count the topic's
// keys are placed by (placement.go); the producer keeps it
// (clients.Partitioner).
type outRecord struct {
	*kgo.Record
	span spans.Span
}

type topicOutcome struct{ topic, outcome string }

// record routes row and checks it against its topic: a bad row, or a record
// Kafka would refuse, is an error wrapping router.ErrBadRow.
func (l *loop) record(ctx context.Context, rt *route, row router.Row) (outgoing, error) {
	rec, err := rt.router.Route(row)
	out := outgoing{EventID: rec.EventID, outcome: "published"}
	if err != nil {
		return out, err
	}
	if rec.TraceInvalid != "" {
		l.r.traceInvalid(rt, rec)
	}
	info, err := l.sink.ensureTopic(ctx, rec.Topic)
	if err != nil {
		return out, err
	}
	out.kafka.Record = &kgo.Record{Topic: rec.Topic, Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: rec.Timestamp}
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
		info, again, err := l.sink.rereadTopic(ctx, rec.Topic)
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
	if l.r.spans != nil {
		n := len(out.kafka.Headers)
		out.kafka.span = l.r.spans.Start(out.kafka.Record, spans.Row{EventID: rec.EventID, Table: rt.table, CommitTime: row.CommitTime})
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
func (l *loop) deadLetter(ctx context.Context, rt *route, ev *binlog.Event, row router.Row, eventID string, cause error) (outgoing, error) {
	info, err := l.sink.ensureTopic(ctx, rt.deadLetter)
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
	l.r.log.Warn().Err(cause).Str("dead_letter_topic", rt.deadLetter).Msg("bad row sent to the dead-letter topic")
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

// invalidOp handles UPDATE and DELETE on an outbox table. DELETEs in a
// transaction that inserted at least as many outbox rows before them are the
// delete-after-insert pattern (the row was published by its INSERT) and are
// only counted.
func (l *loop) invalidOp(rt *route, ev *binlog.Event) error {
	n := int64(ev.RowCount()) // a partial JSON update, its images not decoded: one per event
	if ev.Op == binlog.OpDelete {
		expected := min(n, l.curRows-l.curDeleted)
		l.curDeleted += expected
		if expected > 0 {
			l.r.metrics.InvalidOps.WithLabelValues(rt.table, "delete_after_insert").Add(float64(expected))
		}
		if n -= expected; n == 0 {
			return nil
		}
	}
	l.r.metrics.InvalidOps.WithLabelValues(rt.table, ev.Op.String()).Add(float64(n))
	msg := "outbox rows must only be inserted: skipped"
	switch rt.invalidOp {
	case "fatal":
		return fmt.Errorf("%w: %s of %d rows of %s at %s (router.invalid_op fatal)", ErrInvalidOp, ev.Op, n, ev.Table, ev.GTID)
	case "error":
		l.r.log.Error().Str("table", rt.table).Str("op", ev.Op.String()).Str("gtid", ev.GTID).Int64("rows", n).Msg(msg)
	default:
		l.r.log.Warn().Str("table", rt.table).Str("op", ev.Op.String()).Str("gtid", ev.GTID).Int64("rows", n).Msg(msg)
	}
	return nil
}
