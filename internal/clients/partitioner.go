package clients

import (
	"github.com/twmb/franz-go/pkg/kgo"
)

// Placement is decided by whoever builds a record, never by the producer:
// every record a relay or command producer sends carries the partition its
// builder chose in Record.Partition (the router's placement partition, or
// KeyPartition of its key by the count the builder places keys by), and
// the producer's partitioner only honours it. Nothing about a record's
// placement travels anywhere else (its Context least of all: the relay's
// spans and franz-go both set it).

// KeyPartition is the partition the Java client places key in among n
// partitions: toPositive(murmur2(key)) % n (Kafka's Utils.murmur2, seed
// 0x9747b28c). Every record the relay builds has a key.
func KeyPartition(key []byte, n int32) int32 {
	if n <= 0 {
		return 0
	}
	return int32(murmur2(key)&0x7fffffff) % n
}

// murmur2 is Kafka's 32-bit MurmurHash2 (org.apache.kafka.common.utils.Utils.murmur2).
func murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(data))
	for len(data) >= 4 {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// Partitioner is the partitioner of every producer that sends records
// whose builder placed them (see above): it keeps each record's Partition.
// A partition the topic does not have (as the client knows it) fails the
// record.
func Partitioner() kgo.Partitioner { return ObservedPartitioner(nil) }

// Observer is told, per record, how many partitions the producer knows
// its topic to have: Observe(topic) is called once per topic, and the
// function it returns with that count for each record.
type Observer interface {
	Observe(topic string) func(known int)
}

// ObservedPartitioner is Partitioner with o told the count the producer
// knows for each record (nil: Partitioner); the relay compares it with the
// count it places keys by.
func ObservedPartitioner(o Observer) kgo.Partitioner { return placed{o} }

type placed struct{ o Observer }

func (p placed) ForTopic(topic string) kgo.TopicPartitioner {
	t := placedTopic{}
	if p.o != nil {
		t.observe = p.o.Observe(topic)
	}
	return t
}

type placedTopic struct{ observe func(int) }

func (placedTopic) RequiresConsistency(*kgo.Record) bool { return true }

func (t placedTopic) Partition(r *kgo.Record, n int) int {
	if t.observe != nil {
		t.observe(n)
	}
	return int(r.Partition)
}
