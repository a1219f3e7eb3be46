package clients

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Partitioner places records as the Java client does: murmur2 of the key,
// made positive, modulo the partition count; a record marked with
// PlaceExplicitly keeps its Partition (placement partition).
func Partitioner() kgo.Partitioner { return explicitOrKey{kgo.StickyKeyPartitioner(nil)} }

type explicitPartition struct{}

// explicitPartitionCtx marks records whose Partition the router chose.
var explicitPartitionCtx = context.WithValue(context.Background(), explicitPartition{}, true)

// PlaceExplicitly makes the partitioners of this package keep rec's
// Partition (set by the router: placement partition) instead of hashing
// its key.
func PlaceExplicitly(rec *kgo.Record) { rec.Context = explicitPartitionCtx }

// PlacedExplicitly reports whether rec keeps its Partition (PlaceExplicitly).
func PlacedExplicitly(rec *kgo.Record) bool { return rec.Context == explicitPartitionCtx }

type explicitOrKey struct{ key kgo.Partitioner }

func (p explicitOrKey) ForTopic(t string) kgo.TopicPartitioner {
	return explicitTopic{p.key.ForTopic(t)}
}

type explicitTopic struct{ kgo.TopicPartitioner }

func (p explicitTopic) RequiresConsistency(r *kgo.Record) bool {
	return r.Context == explicitPartitionCtx || p.TopicPartitioner.RequiresConsistency(r)
}

func (p explicitTopic) Partition(r *kgo.Record, n int) int {
	if r.Context == explicitPartitionCtx {
		return int(r.Partition)
	}
	return p.TopicPartitioner.Partition(r, n)
}

// Placement says, per topic, by which partition count keyed records are
// placed: PlaceBy(topic) is called once per topic, and the function it
// returns with the count franz-go knows for each keyed record.
type Placement interface {
	PlaceBy(topic string) func(known int) int
}

// PlacedPartitioner is Partitioner with keyed records placed by p's
// counts (explicitly placed and keyless records as Partitioner places them).
func PlacedPartitioner(p Placement) kgo.Partitioner {
	return placedPartitioner{explicitOrKey{kgo.StickyKeyPartitioner(nil)}, p}
}

type placedPartitioner struct {
	explicitOrKey
	p Placement
}

func (pp placedPartitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return placedTopic{explicitTopic: pp.explicitOrKey.ForTopic(topic).(explicitTopic), by: pp.p.PlaceBy(topic)}
}

// placedTopic places a topic's keyed records by its Placement's count.
type placedTopic struct {
	explicitTopic
	by func(known int) int
}

func (t placedTopic) Partition(r *kgo.Record, n int) int {
	if r.Context == explicitPartitionCtx || r.Key == nil {
		return t.explicitTopic.Partition(r, n)
	}
	return t.explicitTopic.Partition(r, t.by(n))
}

// PartitionerFor is Partitioner with the keys of each topic in counts (a
// checkpoint's Partitions) placed by its count, as the relay places them:
// records a command publishes again (replay, dead-letter replay) land in
// their aggregate's partition after partitions were added. A topic with
// fewer partitions than its count fails the record.
func PartitionerFor(counts map[string]int32) kgo.Partitioner {
	return PlacedPartitioner(recorded(counts))
}

// recorded places by fixed counts; a topic without one by the count known.
type recorded map[string]int32

func (r recorded) PlaceBy(topic string) func(int) int {
	c := int(r[topic])
	return func(known int) int {
		if c == 0 {
			return known
		}
		return c
	}
}
