package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// testSink is a sink on an embedded broker whose produce responses can be
// held back: hold() stops acknowledgements until the returned function
// releases them. Exactly-once (opts.txn) its transactional id is "t".
type testSink struct {
	*sink
	store *checkpoint.Store
	hold  func() (release func())
}

func newTestSink(t *testing.T, opts sinkOptions) testSink {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var mu sync.Mutex
	var gate chan struct{} // nil: acknowledge at once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		mu.Lock()
		g := gate
		mu.Unlock()
		if g != nil {
			c.SleepControl(func() { <-g })
		}
		return nil, nil, false // the broker handles it as usual
	})
	copts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0)}
	if opts.txn {
		copts = append(copts, kgo.TransactionalID("t"))
	}
	if opts.txnTimeout > 0 {
		copts = append(copts, kgo.TransactionTimeout(opts.txnTimeout))
	}
	cl, err := kgo.NewClient(copts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	store := checkpoint.NewStore("cp", kgo.SeedBrokers(c.ListenAddrs()...))
	if err := store.EnsureTopic(context.Background(), kadm.NewClient(cl), 1); err != nil {
		t.Fatal(err)
	}
	s := newSink(context.Background(), cl, store, opts)
	return testSink{sink: s, store: store, hold: func() func() {
		g := make(chan struct{})
		mu.Lock()
		gate = g
		mu.Unlock()
		return func() {
			mu.Lock()
			gate = nil
			mu.Unlock()
			close(g)
		}
	}}
}

var aloOptions = sinkOptions{timeout: 10 * time.Second, parts: 3, repl: 1, maxUnacked: 1000}

func cpAt(gtids string) *checkpoint.Checkpoint {
	return &checkpoint.Checkpoint{Name: "t", GTIDSet: gtids, Flavor: "mariadb", Time: time.Now().UTC()}
}

func (a testSink) stored(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cp, err := a.store.Load(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if cp == nil {
		return ""
	}
	return cp.GTIDSet
}

// pin writes a first checkpoint at gtids and waits until it is stored.
func (a testSink) pin(t *testing.T, gtids string) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.commit(ctx, cpAt(gtids)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.finish(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.stored(t); got != gtids {
		t.Fatalf("first checkpoint: stored %q, want %q", got, gtids)
	}
}

// waitDrain waits for the sink's wake-ups until drain writes a checkpoint.
func (a testSink) waitDrain(t *testing.T) (*checkpoint.Checkpoint, error) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-a.acked:
			if cp, err := a.drain(); cp != nil || err != nil {
				return cp, err
			}
		case <-deadline:
			t.Fatal("no checkpoint written after the acknowledgements")
		}
	}
}

// At-least-once: a checkpoint is written only once every record before it
// is acknowledged, and then the newest such checkpoint.
func TestAtLeastOnceCheckpointFollowsAcknowledgements(t *testing.T) {
	ctx := context.Background()
	a := newTestSink(t, aloOptions)
	a.pin(t, "0-1-1")

	release := a.hold()
	for i := range 3 {
		if err := a.produce(ctx, &kgo.Record{Topic: "data", Key: []byte{byte(i)}, Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	if cp, err := a.commit(ctx, cpAt("0-1-2")); cp != nil || err != nil {
		t.Fatalf("checkpoint of an unacknowledged batch written: %v, %v", cp, err)
	}
	// A heartbeat after it waits for it too.
	if cp, err := a.commit(ctx, cpAt("0-1-3")); cp != nil || err != nil {
		t.Fatalf("heartbeat checkpoint written before the batch before it: %v, %v", cp, err)
	}
	if cp, err := a.drain(); cp != nil || err != nil {
		t.Fatalf("drain wrote %v, %v while records are unacknowledged", cp, err)
	}
	release()
	cp, err := a.waitDrain(t)
	if err != nil {
		t.Fatal(err)
	}
	if cp.GTIDSet != "0-1-3" {
		t.Fatalf("drain wrote %s, want the newest complete batch 0-1-3", cp.GTIDSet)
	}
	if _, err := a.finish(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.stored(t); got != "0-1-3" {
		t.Fatalf("stored %q, want 0-1-3", got)
	}
}

// A record that fails keeps its batch's checkpoint, and every later one,
// out of the topic: the relay resumes before it.
func TestAtLeastOnceFailedRecordWritesNoCheckpoint(t *testing.T) {
	ctx := context.Background()
	a := newTestSink(t, aloOptions)
	a.pin(t, "0-1-1")
	// Larger than any record batch the client sends: refused before it leaves.
	big := bytes.Repeat([]byte("x"), 2<<20)
	if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: big}); err != nil {
		t.Fatal(err)
	}
	if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	_, err := a.commit(ctx, cpAt("0-1-2"))
	if err == nil {
		_, err = a.finish(ctx)
	}
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("a refused record ended the batch with %v, want ErrRejected", err)
	}
	if got := a.stored(t); got != "0-1-1" {
		t.Fatalf("stored %q after a failed batch, want 0-1-1", got)
	}
}

// Far ahead of the acknowledgements, produce waits for them for a bounded
// time and then fails, instead of blocking on a full client buffer.
func TestAtLeastOnceBoundsUnacknowledgedRecords(t *testing.T) {
	ctx := context.Background()
	opts := aloOptions
	opts.maxUnacked, opts.timeout = 2, 300*time.Millisecond
	a := newTestSink(t, opts)
	release := a.hold()
	defer release()
	for i := range 2 {
		if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("third")}) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "wait for acknowledgements") {
			t.Fatalf("third record with two unacknowledged (bound 2): %v, want a timeout waiting for acknowledgements", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("produce blocked beyond its timeout")
	}
}

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
	if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("v")}); err != nil {
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

// Kafka errors are sorted by their kerr properties: retriable ones and
// other recoverable ones end the attempt (returned as they are), fencing
// wraps ErrFenced, refusals wrap ErrRejected.
func TestClassify(t *testing.T) {
	tests := []struct {
		err  error
		want error // nil: returned unchanged
	}{
		{kerr.NotLeaderForPartition, nil},
		{kerr.RequestTimedOut, nil},
		{kerr.CoordinatorLoadInProgress, nil},
		{kerr.NotEnoughReplicas, nil},
		{kerr.UnknownTopicOrPartition, nil},
		{kerr.CorruptMessage, nil}, // Kafka flags it retriable
		{kerr.ConcurrentTransactions, nil},
		{kerr.TransactionAbortable, nil},
		{kerr.UnknownProducerID, nil},
		{kerr.OutOfOrderSequenceNumber, nil},
		{kerr.UnknownServerError, nil},
		{kerr.OperationNotAttempted, nil},
		{context.DeadlineExceeded, nil},
		{kgo.ErrRecordTimeout, nil},
		{errors.New("connection reset"), nil},

		{kerr.ProducerFenced, ErrFenced},
		{kerr.InvalidProducerEpoch, ErrFenced},
		{kerr.TransactionalIDAuthorizationFailed, ErrRejected}, // a missing ACL, not another producer: stop, do not rejoin
		{kerr.InvalidTxnState, ErrFenced},

		{kerr.MessageTooLarge, ErrRejected},
		{kerr.RecordListTooLarge, ErrRejected},
		{kerr.InvalidRecord, ErrRejected},
		{kerr.InvalidTimestamp, ErrRejected},
		{kerr.InvalidTopicException, ErrRejected},
		{kerr.TopicAuthorizationFailed, ErrRejected},
		{kerr.ClusterAuthorizationFailed, ErrRejected},
		{kerr.GroupAuthorizationFailed, ErrRejected},
		{kerr.SaslAuthenticationFailed, ErrRejected},
		{kerr.PolicyViolation, ErrRejected},
		{kerr.InvalidReplicationFactor, ErrRejected},
		{kerr.InvalidConfig, ErrRejected},
		{&kadm.AuthError{Err: kerr.TopicAuthorizationFailed}, ErrRejected},
	}
	for _, tt := range tests {
		in := fmt.Errorf("produce: %w", tt.err)
		got := classify(in)
		if tt.want == nil {
			if got != in {
				t.Errorf("%v: classified as %v, want it unchanged", tt.err, got)
			}
			continue
		}
		if !errors.Is(got, tt.want) || !errors.Is(got, tt.err) {
			t.Errorf("%v: %v, want %v wrapping it", tt.err, got, tt.want)
		}
		if other := map[error]error{ErrFenced: ErrRejected, ErrRejected: ErrFenced}[tt.want]; errors.Is(got, other) {
			t.Errorf("%v: also %v", tt.err, other)
		}
		// A record's content (size, timestamp, form) is a data stop, not a
		// configuration one: it names the record (recordcheck.go).
		var ke *kerr.Error
		if record := errors.As(tt.err, &ke) && recordRefusal(ke); errors.Is(got, ErrRecordRefused) != record {
			t.Errorf("%v: ErrRecordRefused is %v, want %v", tt.err, errors.Is(got, ErrRecordRefused), record)
		}
	}
	if classify(nil) != nil {
		t.Error("classify(nil) is not nil")
	}
	// Every non-retriable Kafka error is either left to the retry, a fence
	// or a refusal, never two of them; the sorting depends on properties,
	// so a code the table above does not name still lands somewhere.
	for code := int16(-1); code < 140; code++ {
		ke, ok := kerr.ErrorForCode(code).(*kerr.Error)
		if !ok {
			continue
		}
		got := classify(ke)
		if ke.Retriable && got != error(ke) {
			t.Errorf("retriable %v classified as %v", ke, got)
		}
		if errors.Is(got, ErrFenced) && errors.Is(got, ErrRejected) {
			t.Errorf("%v is both fenced and rejected", ke)
		}
	}
}

// committedCount counts the records of topic a read_committed consumer sees
// (up to the last stable offsets), and all records, aborted ones included.
func committedCount(t *testing.T, cl *kgo.Client, topic string) (committed, all int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := kadm.NewClient(cl)
	count := func(level kgo.IsolationLevel, ends kadm.ListedOffsets) int {
		want := map[int32]kgo.Offset{}
		remaining := map[int32]int64{}
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil && o.Offset > 0 {
				want[o.Partition] = kgo.NewOffset().AtStart()
				remaining[o.Partition] = o.Offset
			}
		})
		if len(want) == 0 {
			return 0
		}
		cons, err := kgo.NewClient(kgo.SeedBrokers(cl.OptValue(kgo.SeedBrokers).([]string)...),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: want}), kgo.FetchIsolationLevel(level), kgo.KeepControlRecords())
		if err != nil {
			t.Fatal(err)
		}
		defer cons.Close()
		n := 0
		for len(remaining) > 0 {
			fs := cons.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consume %s: %v", topic, ctx.Err())
			}
			fs.EachRecord(func(r *kgo.Record) {
				end, ok := remaining[r.Partition]
				if !ok || r.Offset >= end {
					return
				}
				if !r.Attrs.IsControl() {
					n++
				}
				if r.Offset+1 >= end {
					delete(remaining, r.Partition)
				}
			})
		}
		return n
	}
	lso, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	hwm, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	return count(kgo.ReadCommitted(), lso), count(kgo.ReadUncommitted(), hwm)
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
		if err := a.produce(ctx, &kgo.Record{Topic: "data", Key: []byte{byte(i)}, Value: []byte("aborted")}); err != nil {
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
	if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("kept")}); err != nil {
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
	ctx := context.Background()
	opts := aloOptions
	opts.txn, opts.txnTimeout = true, time.Second
	a := newTestSink(t, opts)
	a.pin(t, "0-1-1")
	if err := a.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("late")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the broker aborts the transaction
	_, err := a.commit(ctx, cpAt("0-1-2"))
	if !errors.Is(err, ErrTxnTimedOut) || errors.Is(err, ErrFenced) || fatal(err) {
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
	if err := b.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("fenced")}); err != nil {
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
	if !errors.Is(err, ErrFenced) || errors.Is(err, ErrTxnTimedOut) || !fatal(err) {
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
// the first two DescribeTransactions.
func TestExactlyOnceSettlesBeforeNextProduce(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var mu sync.Mutex
	var seen []string // "describe:<state>" and "produce", in arrival order
	prepared := 2
	c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
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
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		mu.Lock()
		seen = append(seen, "produce")
		mu.Unlock()
		return nil, nil, false
	})
	s, ctx := txnSink(t, c)
	if _, err := s.commit(ctx, cpAt("0-1-1")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	seen = nil // from the end of the first commit on
	mu.Unlock()
	if err := s.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.commit(ctx, cpAt("0-1-2")); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := strings.Join(seen, " ")
	mu.Unlock()
	if !strings.HasPrefix(got, "describe:PrepareCommit describe:PrepareCommit describe:kfake produce") {
		t.Fatalf("requests after the first commit: %s; want two PrepareCommit answers, then the completed one, then the produce", got)
	}
	if s.settleOff || s.settleWaits.Load() != 1 {
		t.Fatalf("settleOff %v, waits %d; want false, 1", s.settleOff, s.settleWaits.Load())
	}
}

// INVALID_REPLICATION_FACTOR from CreateTopics is passing only while the
// metadata lists enough brokers (they restart: KRaft registers them before
// it unfences them); a replication factor above the cluster's size is a
// configuration error.
func TestBrokersRestarting(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tc := range []struct {
		repl int16
		want bool
	}{{1, true}, {-1, true}, {3, false}} {
		s := &sink{adm: kadm.NewClient(cl), sinkOptions: sinkOptions{repl: tc.repl}}
		if got := s.brokersRestarting(context.Background()); got != tc.want {
			t.Errorf("replication factor %d on one broker: passing %v, want %v", tc.repl, got, tc.want)
		}
	}
}

// txnSink is an exactly-once sink on c (transactional id "t", checkpoint
// topic "cp", 3 partitions per topic it creates), with the context to use.
func txnSink(t *testing.T, c *kfake.Cluster) (*sink, context.Context) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0), kgo.TransactionalID("t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	store := checkpoint.NewStore("cp", kgo.SeedBrokers(c.ListenAddrs()...))
	ctx := context.Background()
	if err := store.EnsureTopic(ctx, kadm.NewClient(cl), 1); err != nil {
		t.Fatal(err)
	}
	return newSink(ctx, cl, store, sinkOptions{txn: true, timeout: 10 * time.Second, parts: 3, repl: 1}), ctx
}

// describeTxnAnswer answers a DescribeTransactions request with one state
// per transactional id asked, set by fill.
func describeTxnAnswer(req kmsg.Request, fill func(*kmsg.DescribeTransactionsResponseTransactionState)) kmsg.Response {
	r := req.(*kmsg.DescribeTransactionsRequest)
	resp := r.ResponseKind().(*kmsg.DescribeTransactionsResponse)
	for _, id := range r.TransactionalIDs {
		st := kmsg.NewDescribeTransactionsResponseTransactionState()
		st.TransactionalID = id
		fill(&st)
		resp.TransactionStates = append(resp.TransactionStates, st)
	}
	return resp
}

// txnStates keeps the cluster's own DescribeTransactions answers for a
// pipeline's transactional ids, asked every millisecond through a client of
// its own, past the test's control function (bypass). A fabricated answer
// (answer) carries the real producer id and epoch without holding the
// request: a held one would hold its client's connection, and the EndTxn
// behind it. The second lane compares them with its first lane's
// (lanes.go); a stale one is older, so never taken for a fence.
type txnStates struct {
	bypass atomic.Bool
	mu     sync.Mutex
	m      map[string]kmsg.DescribeTransactionsResponseTransactionState
}

func watchTxnStates(t *testing.T, h *harness) *txnStates {
	t.Helper()
	peek, err := kgo.NewClient(h.relay.kafka.Admin()...)
	if err != nil {
		t.Fatal(err)
	}
	w := &txnStates{m: map[string]kmsg.DescribeTransactionsResponseTransactionState{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done; peek.Close() })
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			req := kmsg.NewPtrDescribeTransactionsRequest()
			req.TransactionalIDs = checkpoint.TransactionalIDs(h.cfg.Name)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			w.bypass.Store(true)
			resp, err := req.RequestWith(ctx, peek)
			w.bypass.Store(false)
			cancel()
			if err != nil {
				continue
			}
			w.mu.Lock()
			for _, st := range resp.TransactionStates {
				if st.ErrorCode == 0 {
					w.m[st.TransactionalID] = st
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// answer is describeTxnAnswer with each state's producer id and epoch the
// cluster's last known ones.
func (w *txnStates) answer(req kmsg.Request, fill func(*kmsg.DescribeTransactionsResponseTransactionState)) kmsg.Response {
	w.mu.Lock()
	defer w.mu.Unlock()
	return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
		if known, ok := w.m[st.TransactionalID]; ok {
			st.ProducerID, st.ProducerEpoch = known.ProducerID, known.ProducerEpoch
		}
		fill(st)
	})
}
