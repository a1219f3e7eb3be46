package relay

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/source"
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

func TestFatalErrors(t *testing.T) {
	for _, err := range []error{
		classify(kerr.ProducerFenced), classify(fmt.Errorf("x: %w", kerr.InvalidProducerEpoch)),
		fmt.Errorf("route: %w", router.ErrBadRow), binlog.ErrPurged, source.ErrServerConfig, ErrFlavorMismatch,
		classify(fmt.Errorf("produce: %w", kerr.MessageTooLarge)), classify(kerr.TopicAuthorizationFailed),
	} {
		if !fatal(err) {
			t.Errorf("%v should be fatal", err)
		}
	}
	for _, err := range []error{source.ErrUnreachable, ErrKafkaUnreachable, errors.New("broken pipe"),
		fmt.Errorf("%w: eof", errSourceStream), kerr.NotLeaderForPartition} {
		if fatal(err) {
			t.Errorf("%v should be retried", err)
		}
	}
	if !errors.Is(classify(fmt.Errorf("end: %w", kerr.InvalidTxnState)), ErrFenced) {
		t.Error("INVALID_TXN_STATE (kfake's answer to a fenced commit) is not ErrFenced")
	}
	if !errors.Is(classify(kerr.ProducerFenced), ErrFenced) {
		t.Error("classify does not wrap ErrFenced")
	}
}

func TestPartitionerKeepsExplicitPartitions(t *testing.T) {
	p := Partitioner().ForTopic("t")
	rec := &kgo.Record{Key: []byte("hello"), Partition: 2, Context: explicitPartitionCtx}
	if got := p.Partition(rec, 3); got != 2 || !p.RequiresConsistency(rec) {
		t.Fatalf("explicit partition: got %d", got)
	}
	if got := p.Partition(&kgo.Record{Key: []byte("hello"), Partition: 2}, 3); got != 0 {
		t.Fatalf("a record without the marker is placed by its key: got %d, want 0", got)
	}
}
