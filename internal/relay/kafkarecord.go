package relay

import (
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/spans"
)

// The records the delivery takes: each with its span and what it counts
// as, their size as franz-go counts it against its batch limit, and the
// note of the records Kafka refused for their content. The route step
// builds them; the delivery produces them.

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

// pendingRecord is a routed record of the source transaction being read.
type pendingRecord struct {
	rec outRecord
	to  topicOutcome
}

// recordSize is rec's size as the only record of a record batch, counted as
// franz-go counts it against its batch limit (ProducerBatchMaxBytes) before
// it knows the broker's produce version, its largest count: the batch header
// with the 4-byte length franz-go adds (65 bytes; Kafka itself counts 61),
// one byte for the length prefix of flexible versions, and the record's
// fields with their varint lengths.
func recordSize(rec *kgo.Record) int {
	l := 1 + 1 + 1 + // attributes, timestamp delta 0, offset delta 0
		kbin.VarintLen(int32(len(rec.Key))) + len(rec.Key) +
		kbin.VarintLen(int32(len(rec.Value))) + len(rec.Value) +
		kbin.VarintLen(int32(len(rec.Headers)))
	for _, h := range rec.Headers {
		l += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + kbin.VarintLen(int32(len(h.Value))) + len(h.Value)
	}
	return recordBatchOverhead + 1 + kbin.VarintLen(int32(l)) + l
}

// recordBatchOverhead is the size of a record batch without records as
// franz-go counts it (Kafka's record batch v2 header and the record count).
const recordBatchOverhead = 65

// refusedBatch names the records of a batch Kafka refused: topic,
// partition and the event ids (header id) of those that reported it, for
// the error that stops the relay.
type refusedBatch struct {
	topic     string
	partition int32
	ids       []string
	more      int
}

// note adds rec (failed with a record refusal) to b.
func (b *refusedBatch) note(rec *kgo.Record) {
	if b.topic == "" {
		b.topic, b.partition = rec.Topic, rec.Partition
	} else if rec.Topic != b.topic || rec.Partition != b.partition {
		return
	}
	if len(b.ids) >= 5 {
		b.more++
		return
	}
	for _, h := range rec.Headers {
		if h.Key == "id" {
			b.ids = append(b.ids, strconv.Quote(string(h.Value)))
			return
		}
	}
}

func (b *refusedBatch) String() string {
	if b == nil || b.topic == "" {
		return ""
	}
	s := fmt.Sprintf(" (topic %s partition %d", b.topic, b.partition)
	if len(b.ids) > 0 {
		s += fmt.Sprintf(", the refused batch holds event_id %v", b.ids)
		if b.more > 0 {
			s += fmt.Sprintf(" and %d more", b.more)
		}
	}
	return s + ")"
}
