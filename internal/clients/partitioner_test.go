package clients

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Expected partitions computed with the Java client's formula
// (Utils.toPositive(Utils.murmur2(key)) % n), independently of franz-go.
func TestPartitionerIsJavaMurmur2(t *testing.T) {
	for _, tt := range []struct {
		key  string
		n    int
		want int
	}{
		{"device-0", 3, 1}, {"device-1", 3, 1}, {"device-2", 3, 1}, {"dev-7", 3, 2}, {"hello", 3, 0},
	} {
		p := Partitioner().ForTopic("t")
		if got := p.Partition(&kgo.Record{Key: []byte(tt.key)}, tt.n); got != tt.want {
			t.Errorf("key %q over %d partitions: %d, want %d", tt.key, tt.n, got, tt.want)
		}
	}
}

func TestPartitionerKeepsExplicitPartitions(t *testing.T) {
	p := Partitioner().ForTopic("t")
	rec := &kgo.Record{Key: []byte("hello"), Partition: 2}
	PlaceExplicitly(rec)
	if got := p.Partition(rec, 3); got != 2 || !p.RequiresConsistency(rec) {
		t.Fatalf("explicit partition: got %d", got)
	}
	if got := p.Partition(&kgo.Record{Key: []byte("hello"), Partition: 2}, 3); got != 0 {
		t.Fatalf("a record without the marker is placed by its key: got %d, want 0", got)
	}
}

// PartitionerFor places a keyed record by the count its topic recorded
// (partitions added since do not move an aggregate), a topic without one
// by the count franz-go knows; explicit and keyless records as Partitioner.
func TestPartitionerForPlacesByRecordedCounts(t *testing.T) {
	p := PartitionerFor(map[string]int32{"t": 3})
	rec := &kgo.Record{Key: []byte("dev-7")} // murmur2: 2 of 3 (TestPartitionerIsJavaMurmur2)
	if got := p.ForTopic("t").Partition(rec, 6); got != 2 {
		t.Fatalf("recorded 3, known 6: partition %d, want 2 (by the recorded count)", got)
	}
	if got, want := p.ForTopic("other").Partition(rec, 6), Partitioner().ForTopic("other").Partition(rec, 6); got != want {
		t.Fatalf("a topic without a recorded count: partition %d, want %d (by the known count)", got, want)
	}
	explicit := &kgo.Record{Key: []byte("dev-7"), Partition: 5}
	PlaceExplicitly(explicit)
	if got := p.ForTopic("t").Partition(explicit, 6); got != 5 {
		t.Fatalf("explicit partition: %d, want 5", got)
	}
}
