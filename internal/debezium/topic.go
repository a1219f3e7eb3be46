package debezium

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
)

// DefaultOffsetsTopic is the offset.storage.topic of Kafka Connect's
// distributed example configuration (connect-distributed.properties); a
// cluster names its own (Strimzi's examples: connect-cluster-offsets).
const DefaultOffsetsTopic = "connect-offsets"

// maxTopicRecords bounds the records read from an offsets topic: compacted,
// it holds few per key; uncompacted for a long time, it holds one per
// offset commit (every offset.flush.interval.ms per task).
const maxTopicRecords = 5_000_000

// ReadTopic reads Kafka Connect's offsets topic (read_committed, every
// partition from its start to its end) and returns the newest record of
// each key, as Connect's KafkaOffsetBackingStore does: a null value is a
// deleted offset. k's brokers are the topic's. wait bounds the wait for
// transactions open on it (exactly-once source workers write offsets in
// transactions).
func ReadTopic(ctx context.Context, k clients.Kafka, timeout time.Duration, topic string, wait time.Duration) ([]Entry, error) {
	from, ends, err := clients.Range(ctx, k.Admin(), timeout, []string{topic}, time.Time{}, wait, nil)
	if err != nil {
		return nil, fmt.Errorf("read offsets topic %s: %w", topic, err)
	}
	if len(ends[topic]) == 0 {
		return nil, fmt.Errorf("read offsets topic %s: %w: the topic does not exist (Kafka Connect's offset.storage.topic: give it with --offsets-topic, "+
			"its brokers with --offsets-brokers)", topic, ErrNoOffset)
	}
	newest := map[string][]byte{}
	var order []string
	n, big := 0, ""
	err = clients.ReadRange(ctx, k, ends, from, func(r *kgo.Record) {
		n++
		if n > maxTopicRecords || len(r.Key) > maxKeyBytes || len(r.Value) > maxValueBytes {
			if big == "" {
				big = fmt.Sprintf("record at %s[%d] offset %d", r.Topic, r.Partition, r.Offset)
			}
			return
		}
		key := string(r.Key)
		if _, ok := newest[key]; !ok {
			order = append(order, key)
		}
		newest[key] = r.Value // nil: a tombstone
	})
	if err != nil {
		return nil, fmt.Errorf("read offsets topic %s: %w", topic, err)
	}
	if big != "" {
		return nil, fmt.Errorf("read offsets topic %s: %s: more than %d records, or a key over %d KB or a value over %d MB: not Kafka Connect's offsets",
			topic, big, maxTopicRecords, maxKeyBytes>>10, maxValueBytes>>20)
	}
	out := make([]Entry, 0, len(order))
	for _, key := range order {
		out = append(out, Entry{Key: []byte(key), Value: newest[key]})
	}
	return out, nil
}

// TopicWhere names the offsets topic and its brokers for messages.
func TopicWhere(topic string, brokers []string) string {
	return fmt.Sprintf("topic %s on %s", topic, strings.Join(brokers, ","))
}
