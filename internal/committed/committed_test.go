package committed

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

const topic = "events"

func cluster(t *testing.T) (*kfake.Cluster, []kgo.Opt, *kadm.Client, NewClient) {
	t.Helper()
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return c, opts, kadm.NewClient(cl), func(extra ...kgo.Opt) (*kgo.Client, error) { return kgo.NewClient(append(extra, opts...)...) }
}

// transact produces recs in one transaction of id and ends it with commit.
func transact(t *testing.T, opts []kgo.Opt, id string, commit *kgo.TransactionEndTry, recs ...*kgo.Record) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID(id), kgo.TransactionTimeout(time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if commit != nil {
		if err := cl.EndTransaction(ctx, *commit); err != nil {
			t.Fatal(err)
		}
	}
	return cl
}

func rec(p int32, key string) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Value: []byte("v-" + key),
		Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(key)}}}
}

// Committed records in several partitions are proved; the last of each is
// the one read back.
func TestProveCommittedRecordsInEveryPartition(t *testing.T) {
	_, opts, adm, newClient := cluster(t)
	recs := []*kgo.Record{rec(0, "a"), rec(1, "b"), rec(2, "c"), rec(1, "d")}
	try := kgo.TryCommit
	transact(t, opts, "w", &try, recs...)
	if err := Prove(context.Background(), adm, newClient, recs); err != nil {
		t.Fatal(err)
	}
	if last := Last(recs); last[topic][1] != recs[3] || len(last[topic]) != 3 {
		t.Fatalf("last per partition: %v", last)
	}
}

// Aborted records are visible (below the last stable offset) but not
// there: Prove says not committed, naming the partitions.
func TestProveRefusesAbortedRecords(t *testing.T) {
	_, opts, adm, newClient := cluster(t)
	recs := []*kgo.Record{rec(0, "a"), rec(2, "c")}
	try := kgo.TryAbort
	transact(t, opts, "w", &try, recs...)
	err := Prove(context.Background(), adm, newClient, recs)
	if !errors.Is(err, ErrNotCommitted) || !strings.Contains(err.Error(), topic+"[0]@0") || !strings.Contains(err.Error(), topic+"[2]@0") {
		t.Fatalf("prove aborted records: %v, want ErrNotCommitted naming %s[0] and %s[2]", err, topic, topic)
	}
}

// A record read back different from the one written (another at its
// offset) is not proved.
func TestReadBackRefusesAnotherRecordAtTheOffset(t *testing.T) {
	_, opts, adm, newClient := cluster(t)
	try := kgo.TryCommit
	written := rec(1, "b")
	transact(t, opts, "w", &try, written)
	other := *written
	other.Value = []byte("something else")
	if err := Prove(context.Background(), adm, newClient, []*kgo.Record{&other}); !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("prove a record that is not the one at its offset: %v, want ErrNotCommitted", err)
	}
}

// A partition held back by an open transaction is named when the wait
// ends; the others are not.
func TestAwaitVisibleNamesThePartitionsHeldBack(t *testing.T) {
	_, opts, adm, newClient := cluster(t)
	try := kgo.TryCommit
	transact(t, opts, "open", nil, rec(2, "x"))
	recs := []*kgo.Record{rec(0, "a"), rec(2, "c")}
	transact(t, opts, "w", &try, recs...)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := Prove(ctx, adm, newClient, recs)
	if !errors.Is(err, ErrNotVisible) || !strings.Contains(err.Error(), topic+"[2] (last stable offset 0, written up to 1)") || strings.Contains(err.Error(), topic+"[0]") {
		t.Fatalf("prove behind an open transaction: %v, want ErrNotVisible naming %s[2] only", err, topic)
	}
}

// A committed record that retention (or DeleteRecords, or compaction)
// removed from its partition before it was read back is not reported as
// aborted: its transaction's commit marker after it says it committed.
// (Replay keeps the events' timestamps: old events replayed into a topic
// of shorter retention.ms are deleted at the broker's next retention check.)
func TestReadBackProvesACommittedRecordDeletedBeforeItIsRead(t *testing.T) {
	_, opts, adm, newClient := cluster(t)
	try := kgo.TryCommit
	written := rec(0, "a")
	transact(t, opts, "w", &try, written)
	transact(t, opts, "later", &try, rec(0, "b")) // the partition goes on
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dels, err := adm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: written.Offset + 1}}})
	if err != nil || dels.Error() != nil {
		t.Fatalf("delete records: %v %v", err, dels.Error())
	}
	if err := Prove(ctx, adm, newClient, []*kgo.Record{written}); err != nil {
		t.Fatalf("prove a committed record deleted before its read-back: %v, want nil (its commit marker follows it)", err)
	}
}

// A record deleted with its transaction's marker cannot be proved either
// way: the error says so and is not ErrNotCommitted (which makes replay
// publish it again).
func TestReadBackOfARecordDeletedWithItsMarkerIsNotCalledAborted(t *testing.T) {
	_, opts, adm, newClient := cluster(t)
	try := kgo.TryCommit
	written := rec(0, "a")
	transact(t, opts, "w", &try, written)
	transact(t, opts, "later", &try, rec(0, "b"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dels, err := adm.DeleteRecords(ctx, kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: written.Offset + 2}}})
	if err != nil || dels.Error() != nil {
		t.Fatalf("delete records: %v %v", err, dels.Error())
	}
	err = Prove(ctx, adm, newClient, []*kgo.Record{written})
	if err == nil || errors.Is(err, ErrNotCommitted) {
		t.Fatalf("prove a record deleted with its commit marker: %v, want an error that is not ErrNotCommitted", err)
	}
}

// Interrupted before the first answer, the wait still names the
// partitions it waited for.
func TestAwaitVisibleInterruptedNamesThePartitions(t *testing.T) {
	_, _, adm, _ := cluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := AwaitVisible(ctx, adm, map[string]map[int32]int64{topic: {1: 7}})
	if !errors.Is(err, ErrNotVisible) || !strings.Contains(err.Error(), topic+"[1]") {
		t.Fatalf("await visibility interrupted: %v, want ErrNotVisible naming %s[1]", err, topic)
	}
}
