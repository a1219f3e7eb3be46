package clients

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Expected partitions computed with the Java client's formula
// (Utils.toPositive(Utils.murmur2(key)) % n), independently of franz-go.
func TestKeyPartitionIsJavaMurmur2(t *testing.T) {
	for _, tt := range []struct {
		key  string
		n    int32
		want int32
	}{
		{"device-0", 3, 1}, {"device-1", 3, 1}, {"device-2", 3, 1}, {"dev-7", 3, 2}, {"hello", 3, 0},
	} {
		if got := KeyPartition([]byte(tt.key), tt.n); got != tt.want {
			t.Errorf("key %q over %d partitions: %d, want %d", tt.key, tt.n, got, tt.want)
		}
	}
}

// KeyPartition places every key where franz-go's default partitioner
// (murmur2, as the Java client) does, for keys of every length (the hash's
// tail of 0 to 3 bytes) and several partition counts: the relay's own
// placement keeps every aggregate where earlier releases put it.
func TestKeyPartitionAsFranzGoKeyPartitioner(t *testing.T) {
	franz := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 2000 {
		key := []byte(fmt.Sprintf("aggregate-%d-%s", i, "xyz"[:i%4]))
		for _, n := range []int32{1, 3, 6, 7, 64} {
			if got, want := KeyPartition(key, n), int32(franz.Partition(&kgo.Record{Key: key}, int(n))); got != want {
				t.Fatalf("key %q over %d partitions: %d, franz-go %d", key, n, got, want)
			}
		}
	}
	if got, want := KeyPartition([]byte{}, 6), int32(franz.Partition(&kgo.Record{Key: []byte{}}, 6)); got != want {
		t.Fatalf("empty key: %d, franz-go %d", got, want)
	}
}

// The producer keeps every record's Partition, whatever its key, and tells
// the observer the count it knows for each record.
func TestPartitionerKeepsEveryRecordsPartition(t *testing.T) {
	p := Partitioner().ForTopic("t")
	rec := &kgo.Record{Key: []byte("hello"), Partition: 2} // murmur2: 0 of 3
	if got := p.Partition(rec, 3); got != 2 || !p.RequiresConsistency(rec) {
		t.Fatalf("partition %d, want 2 (the record's own)", got)
	}
	seen := map[string][]int{}
	o := ObservedPartitioner(observer(func(topic string, n int) { seen[topic] = append(seen[topic], n) }))
	if got := o.ForTopic("u").Partition(&kgo.Record{Key: []byte("hello"), Partition: 5}, 6); got != 5 {
		t.Fatalf("observed partitioner: partition %d, want 5", got)
	}
	if fmt.Sprint(seen) != "map[u:[6]]" {
		t.Fatalf("observed %v, want topic u with 6 partitions", seen)
	}
}

type observer func(topic string, n int)

func (o observer) Observe(topic string) func(int) { return func(n int) { o(topic, n) } }
