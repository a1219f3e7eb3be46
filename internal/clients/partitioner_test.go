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
