package relay

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// Exactly-once, the sink knows where its last checkpoint record is and waits
// until read_committed readers see it: behind another producer's open
// transaction it reports ErrNotVisible, and returns once that one ends.
func TestExactlyOnceAwaitsVisibleCheckpoint(t *testing.T) {
	ctx := context.Background()
	opts := aloOptions
	opts.txn = true
	a := newTestSink(t, opts)
	other, err := kgo.NewClient(kgo.SeedBrokers(a.cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.TransactionalID("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := other.ProduceSync(ctx, a.store.Record(&checkpoint.Checkpoint{Name: "other", GTIDSet: "0-1-1", Flavor: "mariadb"})).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.commit(ctx, cpAt("0-1-2")); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := a.awaitVisible(short); !errors.Is(err, checkpoint.ErrNotVisible) {
		t.Fatalf("checkpoint behind an open transaction: %v, want ErrNotVisible", err)
	}
	if err := other.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	wait, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	if err := a.awaitVisible(wait); err != nil {
		t.Fatal(err)
	}
	if got := a.stored(t); got != "0-1-2" {
		t.Fatalf("stored %q, want 0-1-2", got)
	}
}

// abort ends the open transaction: a read_committed reader sees nothing of
// its records, the partitions are not held back, and the next transaction
// commits normally on the same client.
func TestExactlyOnceAbort(t *testing.T) {
	ctx := context.Background()
	opts := aloOptions
	opts.txn = true
	a := newTestSink(t, opts)
	if err := a.abort(ctx); err != nil || a.openFor() != 0 {
		t.Fatalf("abort without an open transaction: %v (open for %s)", err, a.openFor())
	}
	a.pin(t, "0-1-1")
	for i := range 5 {
		if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Key: []byte{byte(i)}, Value: []byte("aborted")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.cl.Flush(ctx); err != nil { // in the log, acknowledged
		t.Fatal(err)
	}
	if a.openFor() <= 0 {
		t.Fatal("openFor is 0 with a transaction open")
	}
	if err := a.abort(ctx); err != nil {
		t.Fatal(err)
	}
	if a.open || a.openFor() != 0 {
		t.Fatal("the sink still has a transaction open after abort")
	}
	if committed, all := committedCount(t, a.cl, "data"); committed != 0 || all != 5 {
		t.Fatalf("after abort: %d records visible to read_committed, %d in the log; want 0 and 5", committed, all)
	}
	// A new transaction on the same client.
	if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("kept")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.commit(ctx, cpAt("0-1-2")); err != nil {
		t.Fatal(err)
	}
	if committed, _ := committedCount(t, a.cl, "data"); committed != 1 {
		t.Fatalf("after the next commit: %d records visible, want 1", committed)
	}
	if got := a.stored(t); got != "0-1-2" {
		t.Fatalf("stored %q, want 0-1-2", got)
	}
}

// A fencing error on a transaction open longer than the transaction timeout
// is ErrTxnTimedOut (the broker aborted it; resume from the checkpoint),
// not ErrFenced; a fence by another instance within the timeout stays
// ErrFenced.
func TestExactlyOnceTimedOutIsNotFenced(t *testing.T) {
	realTime(t)
	ctx := context.Background()
	opts := aloOptions
	opts.txn, opts.txnTimeout = true, time.Second
	a := newTestSink(t, opts)
	a.pin(t, "0-1-1")
	if err := a.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("late")}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the broker aborts the transaction
	_, err := a.commit(ctx, cpAt("0-1-2"))
	if !errors.Is(err, ErrTxnTimedOut) || errors.Is(err, ErrFenced) || errclass.Fatal(err) {
		t.Fatalf("commit after the transaction timeout: %v, want ErrTxnTimedOut, not fatal", err)
	}
	t.Logf("after the timeout: %v; abort: %v", err, a.abort(ctx))
	if committed, _ := committedCount(t, a.cl, "data"); committed != 0 {
		t.Fatalf("%d records of the timed-out transaction visible", committed)
	}
	if got := a.stored(t); got != "0-1-1" {
		t.Fatalf("stored %q, want 0-1-1", got)
	}

	b := newTestSink(t, opts)
	b.pin(t, "0-1-1")
	if err := b.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("fenced")}}); err != nil {
		t.Fatal(err)
	}
	if err := b.cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	other, err := kgo.NewClient(kgo.SeedBrokers(b.cl.OptValue(kgo.SeedBrokers).([]string)...), kgo.TransactionalID("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, _, err := other.ProducerID(ctx); err != nil { // fences b
		t.Fatal(err)
	}
	_, err = b.commit(ctx, cpAt("0-1-2"))
	if !errors.Is(err, ErrFenced) || errors.Is(err, ErrTxnTimedOut) || !errclass.Fatal(err) {
		t.Fatalf("commit after a fence: %v, want ErrFenced", err)
	}
	t.Logf("after a fence: %v", err)
	if err := b.abort(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("abort when fenced: %v, want ErrFenced", err)
	}
}

// TestExactlyOnceSettlesBeforeNextProduce: after a commit, the next
// transaction's first produce waits until the coordinator reports the
// committed transaction complete (Apache Kafka answers CONCURRENT_TRANSACTIONS
// and retries after 20 ms otherwise). The broker here reports PrepareCommit to
// the first two DescribeTransactions after the commit.
func TestExactlyOnceSettlesBeforeNextProduce(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	var mu sync.Mutex
	var seen []string // "endtxn", "describe:<state>" and "produce", in arrival order
	prepared := 0
	var described atomic.Int64 // DescribeTransactions requests the broker took
	c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		defer described.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if prepared == 0 {
			seen = append(seen, "describe:kfake")
			return nil, nil, false
		}
		prepared--
		seen = append(seen, "describe:PrepareCommit")
		return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
			st.State, st.ProducerID = "PrepareCommit", 1
		}), nil, true
	})
	for _, key := range []kmsg.Key{kmsg.Produce, kmsg.EndTxn} {
		c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			mu.Lock()
			seen = append(seen, strings.ToLower(key.Name()))
			mu.Unlock()
			return nil, nil, false
		})
	}
	var asked describeWrites
	s, ctx := txnSink(t, c, kgo.WithHooks(&asked))
	// The settle wait gives up after settleMax (50 ms): a machine that
	// holds it that long (a loaded CI host) lets the produce go unwaited,
	// as it should. Such an attempt proves nothing and is made again; a
	// produce that did not wait for a wait still running fails.
	const attempts = 20
	for i := range attempts {
		// The settle wait after the last attempt's commit has ended: the
		// broker's PrepareCommit answers are for this attempt's.
		s.awaitSettleWait()
		// A settle wait that ran out of time may have left its last
		// question in flight: the broker takes it now, not in this
		// attempt's settle wait.
		for deadline := time.Now().Add(10 * time.Second); described.Load() != asked.n.Load(); {
			if time.Now().After(deadline) {
				t.Fatalf("the broker took %d DescribeTransactions, the client wrote %d", described.Load(), asked.n.Load())
			}
			runtime.Gosched()
		}
		mu.Lock()
		seen, prepared = nil, 2
		mu.Unlock()
		if _, err := s.commit(ctx, cpAt(fmt.Sprintf("0-1-%d", 2*i+1))); err != nil {
			t.Fatal(err)
		}
		waits := s.settle.waits.Load()
		if err := s.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		waits = s.settle.waits.Load() - waits
		timedOut := s.settle.answer == settleFailed // read before the next commit's settle wait writes it
		if _, err := s.commit(ctx, cpAt(fmt.Sprintf("0-1-%d", 2*i+2))); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		got := strings.Join(seen, " ")
		mu.Unlock()
		_, afterCommit, _ := strings.Cut(got, "endtxn ")
		if s.settle.off || waits != 1 {
			t.Fatalf("settleOff %v, waits %d; want false, 1", s.settle.off, waits)
		}
		if strings.HasPrefix(afterCommit, "describe:PrepareCommit describe:PrepareCommit describe:kfake produce") {
			return
		}
		if timedOut {
			t.Logf("attempt %d: the settle wait ran out of time (%v) on this machine: again (requests: %s)", i+1, settleMax, got)
			s.settle.fails = 0 // the wait is not paused for the next attempts
			continue
		}
		t.Fatalf("requests from the first commit on: %s; want two PrepareCommit answers after its EndTxn, then the completed one, then the produce", got)
	}
	t.Fatalf("%d attempts, each settle wait out of time (%v): nothing measured", attempts, settleMax)
}

// describeWrites counts the DescribeTransactions requests a client wrote.
type describeWrites struct{ n atomic.Int64 }

func (d *describeWrites) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.DescribeTransactions) && err == nil {
		d.n.Add(1)
	}
}
