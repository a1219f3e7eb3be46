package relay

import (
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/router"
)

// Records the broker refuses for what they are.
//
// A topic refuses a record for its own content: larger than the topic's
// max.message.bytes, or (message.timestamp.type CreateTime) a timestamp
// further ahead of the broker's clock than message.timestamp.after.max.ms
// (Apache Kafka 4: 1 h by default) or further behind than
// message.timestamp.before.max.ms. Inside a Kafka transaction one refused
// record fails the whole transaction, the valid records before it with it,
// and every restart would meet it again. So the relay learns these settings
// with the topic (DescribeConfigs, sink.ensureTopic) and checks each record
// before producing it: a record the topic would refuse is a bad row (named
// with table, event id, GTID and topic, and subject to router.on_error),
// and the rows before it are published. A refusal the checks did not
// foresee (a setting changed while the relay ran, the broker's clock off
// from the relay's) ends the attempt once: the next one reads the topics'
// settings again (sizeRefused); the same refusal again stops the relay with
// ErrRecordRefused (exit 65), naming the topic, partition and the event ids
// of the refused batch.

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

// stampBounds are a topic's timestamp settings: with CreateTime, the broker
// refuses a record whose timestamp is more than after ahead of its clock or
// more than before behind it (0: no bound). LogAppendTime topics take any.
type stampBounds struct {
	logAppend     bool
	before, after time.Duration
	// difference: message.timestamp.difference.max.ms (Kafka before 4.0;
	// deprecated since 3.6): a bound where before or after sets none.
	difference time.Duration
}

// take reads one topic config entry into b.
func (b *stampBounds) take(key, value string) {
	ms := func() time.Duration {
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil || v <= 0 || v >= int64(1<<62)/int64(time.Millisecond) {
			return 0 // unbounded (Long.MAX_VALUE by default)
		}
		return time.Duration(v) * time.Millisecond
	}
	switch key {
	case "message.timestamp.type":
		b.logAppend = value == "LogAppendTime"
	case "message.timestamp.before.max.ms":
		b.before = ms()
	case "message.timestamp.after.max.ms":
		b.after = ms()
	case "message.timestamp.difference.max.ms":
		b.difference = ms()
	}
}

// bounds are the effective before and after bounds (0: none).
func (b stampBounds) bounds() (before, after time.Duration) {
	before, after = b.before, b.after
	if before == 0 {
		before = b.difference
	}
	if after == 0 {
		after = b.difference
	}
	return before, after
}

// bounded reports whether the topic refuses any timestamp.
func (b stampBounds) bounded() bool {
	return !b.logAppend && (b.before > 0 || b.after > 0 || b.difference > 0)
}

// refuses says why the topic would refuse a record stamped ts at now, or "".
func (b stampBounds) refuses(ts, now time.Time) string {
	before, after := b.bounds()
	if b.logAppend || ts.IsZero() || before == 0 && after == 0 {
		return "" // the broker stamps it; a zero one is stamped by the client
	}
	if d := ts.Sub(now); after > 0 && d > after {
		return fmt.Sprintf("timestamp %s is %s ahead of the relay's clock, the topic takes at most %s ahead (message.timestamp.after.max.ms)",
			ts.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), after)
	}
	if d := now.Sub(ts); before > 0 && d > before {
		return fmt.Sprintf("timestamp %s is %s behind the relay's clock, the topic takes at most %s behind (message.timestamp.before.max.ms)",
			ts.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), before)
	}
	return ""
}

// checkStamp is a bad row when topic (as last read) would refuse rec's
// timestamp.
func checkStamp(rec *kgo.Record, info topicInfo) error {
	if !info.stamps.bounded() {
		return nil
	}
	if why := info.stamps.refuses(rec.Timestamp, time.Now()); why != "" {
		return fmt.Errorf("%w: topic %s would refuse the record: %s; fix the source's clock or router.timestamp_column, or the topic's setting (docs/outbox-table.md \"Record timestamps\")",
			router.ErrBadRow, rec.Topic, why)
	}
	return nil
}

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
