package relay

import (
	"context"
	"errors"
	"github.com/rs/zerolog"
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
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// testSink drives a delivery on an embedded broker as the loop does, whose
// produce responses can be held back: hold() stops acknowledgements until
// the returned function releases them. Exactly-once (opts.txn) it has one
// lane (transactional id "t"), whose state the tests look at.
type testSink struct {
	*lane // exactly-once; nil at-least-once
	d     delivery
	alo   *atLeastOnce // at-least-once; nil exactly-once
	cl    *kgo.Client
	store *checkpoint.Store
	hold  func() (release func())
	bound int // records the delivery may have unacknowledged
}

// testOptions are a test sink's settings: exactly-once (txn) or not.
type testOptions struct {
	deliveryOptions
	maxUnacked int
	txn        bool
}

// produce hands rec to the open batch, as the loop does.
func (a testSink) produce(ctx context.Context, rec outRecord) error {
	_, err := a.d.send(ctx, part{records: []pendingRecord{{rec: rec}}, bound: a.bound})
	return err
}

// commit ends the batch with cp, as the loop does, and waits for the
// committed stream's answer when the seal is in flight (exactly-once); at
// least once the checkpoint is written later (waitDrain, finish).
func (a testSink) commit(ctx context.Context, cp *checkpoint.Checkpoint) (*checkpoint.Checkpoint, error) {
	inFlight, err := a.d.send(ctx, part{seal: &seal{cp: cp}, bound: a.bound})
	if err != nil || !inFlight {
		return nil, err
	}
	c := <-a.d.committed()
	return c.cp, c.err
}

// finish waits, at least once, until every ended batch is acknowledged and
// its checkpoint written (exactly-once a commit is durable when it returns).
func (a testSink) finish(ctx context.Context) (*checkpoint.Checkpoint, error) {
	if a.alo == nil {
		return nil, nil
	}
	return a.alo.finish(ctx)
}

// drain writes, at least once, the checkpoint of the batches acknowledged
// (as the delivery's goroutine does when woken).
func (a testSink) drain() (*checkpoint.Checkpoint, error) { return a.alo.drain() }

// abort forgets the open batch (exactly-once: aborts its transaction).
func (a testSink) abort(ctx context.Context) error {
	_, err := a.d.stop(ctx, false)
	return err
}

func newTestSink(t *testing.T, opts testOptions) testSink {
	t.Helper()
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
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
	a := testSink{cl: cl, store: store, bound: opts.maxUnacked, hold: func() func() {
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
	if opts.txn {
		a.lane = newLane(context.Background(), cl, store, opts.deliveryOptions)
		a.d = newExactlyOnce([]*lane{a.lane}, newAccounting(nil))
	} else {
		a.alo = newAtLeastOnce(context.Background(), cl, store, opts.deliveryOptions, newAccounting(nil))
		a.d = a.alo
	}
	runDelivery(t, a.d)
	return a
}

// runDelivery runs d's goroutines until the test ends.
func runDelivery(t *testing.T, d delivery) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

var aloOptions = testOptions{deliveryOptions: deliveryOptions{timeout: 10 * time.Second}, maxUnacked: 1000}

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

// pin writes a first checkpoint at gtids and waits until it is stored. At
// least once, the delivery's goroutine writes it and answers on the
// committed stream, which pin reads: a test's next read of the stream
// (waitDrain) is then the answer to its own batches, however the machine
// schedules that goroutine against finish.
func (a testSink) pin(t *testing.T, gtids string) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.commit(ctx, cpAt(gtids)); err != nil {
		t.Fatal(err)
	}
	if a.alo != nil {
		if cp, err := a.waitDrain(t); err != nil || cp.GTIDSet != gtids {
			t.Fatalf("first checkpoint: drain wrote %v, %v; want %s", cp, err, gtids)
		}
	}
	if _, err := a.finish(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.stored(t); got != gtids {
		t.Fatalf("first checkpoint: stored %q, want %q", got, gtids)
	}
}

// waitDrain waits for the committed stream until a checkpoint is written
// (at-least-once: once the acknowledgements are in).
func (a testSink) waitDrain(t *testing.T) (*checkpoint.Checkpoint, error) {
	t.Helper()
	select {
	case c := <-a.d.committed():
		return c.cp, c.err
	case <-time.After(10 * time.Second):
		t.Fatal("no checkpoint written after the acknowledgements")
		return nil, nil
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

// INVALID_REPLICATION_FACTOR from CreateTopics is passing only while the
// metadata lists enough brokers (they restart: KRaft registers them before
// it unfences them); a replication factor above the cluster's size is a
// configuration error.
func TestBrokersRestarting(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1))
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, tc := range []struct {
		repl int16
		want bool
	}{{1, true}, {-1, true}, {3, false}} {
		s := &catalog{adm: kadm.NewClient(cl), repl: tc.repl}
		if got := s.brokersRestarting(context.Background()); got != tc.want {
			t.Errorf("replication factor %d on one broker: passing %v, want %v", tc.repl, got, tc.want)
		}
	}
}

// txnSink is an exactly-once delivery of one lane on c (transactional id
// "t", checkpoint topic "cp"), its client made with extra options too and
// warmed on "data" and "cp" (warmProducer), with the context to use.
func txnSink(t *testing.T, c *kfake.Cluster, extra ...kgo.Opt) (testSink, context.Context) {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(0), kgo.TransactionalID("t")}, extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	store := checkpoint.NewStore("cp", kgo.SeedBrokers(c.ListenAddrs()...))
	ctx := context.Background()
	if err := store.EnsureTopic(ctx, kadm.NewClient(cl), 1); err != nil {
		t.Fatal(err)
	}
	warmProducer(t, cl, store, "data", "cp")
	ln := newLane(ctx, cl, store, deliveryOptions{timeout: 10 * time.Second})
	d := newExactlyOnce([]*lane{ln}, newAccounting(nil))
	runDelivery(t, d)
	return testSink{lane: ln, d: d, cl: cl, store: store}, ctx
}

// warmProducer commits a transaction on cl with two records in each
// of topics, before the test's own transactions. franz-go (v1.22.3)
// partitions the first records of a topic new to the client before it
// stores the topic's partitions (kgo storePartitionsUpdate); a transaction
// ended in between, the metadata goroutine descheduled on a loaded host,
// misses them: a commit whose only topic that is becomes an abort and
// returns nil, and their sequences are not reset at the epoch bump, so the
// next produce there is OUT_OF_ORDER_SEQUENCE_NUMBER. The second record of
// a topic waits for that store (it takes the mutex the store holds).
func warmProducer(t *testing.T, cl *kgo.Client, store *checkpoint.Store, topics ...string) {
	t.Helper()
	ctx := context.Background()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, topic := range topics {
		for range 2 {
			rec := &kgo.Record{Topic: topic, Value: []byte("warm")}
			if topic == "cp" {
				rec = store.Record(&checkpoint.Checkpoint{Name: "warm", GTIDSet: "0-1-1", Flavor: "mariadb"})
			}
			if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// testCatalog is a topic catalog on c (3 partitions per topic it creates),
// with the context to use.
func testCatalog(t *testing.T, c *kfake.Cluster) (*catalog, context.Context) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return newCatalog(kadm.NewClient(cl), "cp", 10*time.Second, 3, 1, zerolog.Nop(), nil, nil), context.Background()
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

// createdNotListed makes c answer the first CreateTopics for topic as a
// success without creating it; the topic is created for real after delay
// (never if delay < 0). This is Apache Kafka right after a creation: the
// controller has the topic, the broker that answers metadata does not yet.
func createdNotListed(t *testing.T, c *kfake.Cluster, topic string, delay time.Duration) {
	t.Helper()
	var faked atomic.Bool
	c.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.CreateTopicsRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != topic || !faked.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		resp.Version = req.Version
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, req.Topics[0].NumPartitions, req.Topics[0].ReplicationFactor
		resp.Topics = append(resp.Topics, rt)
		if delay >= 0 {
			time.AfterFunc(delay, func() {
				cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
				if err != nil {
					return
				}
				defer cl.Close()
				_, _ = kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, nil, topic)
			})
		}
		return resp, nil, true
	})
}

// A topic the sink has just created, not yet in the metadata the broker
// answers with, is asked for again until it shows: the pipeline does not
// stop on UNKNOWN_TOPIC_OR_PARTITION for a topic that exists. One that
// never shows is an error once the request timeout has passed.
func TestEnsureTopicWaitsForANewTopicToShowInMetadata(t *testing.T) {
	t.Run("shows after 300 ms", func(t *testing.T) {
		c := kafkatest.Cluster(t, kfake.NumBrokers(1))
		s, ctx := testCatalog(t, c)
		createdNotListed(t, c, "orders", 300*time.Millisecond)
		start := time.Now()
		info, err := s.ensure(ctx, "orders")
		if err != nil {
			t.Fatalf("ensure a topic that shows in metadata 300 ms after its creation: %v", err)
		}
		// Soon after it shows, not after franz-go's metadata cache (5 s)
		// let go of the first UNKNOWN_TOPIC_OR_PARTITION answer.
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("ensure took %v for a topic listed 300 ms after its creation, want well under the client's 5 s metadata cache", took)
		}
		if info.partitions != 3 {
			t.Fatalf("partitions %d, want 3", info.partitions)
		}
	})
	t.Run("never shows", func(t *testing.T) {
		c := kafkatest.Cluster(t, kfake.NumBrokers(1))
		s, ctx := testCatalog(t, c)
		s.timeout = 500 * time.Millisecond
		createdNotListed(t, c, "orders", -1)
		start := time.Now()
		_, err := s.ensure(ctx, "orders")
		if !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("ensure a created topic that never shows in metadata: %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("gave up after %v, want about the request timeout (500 ms)", took)
		}
	})
}

// A topic the brokers say exists (TOPIC_ALREADY_EXISTS) and never list (it
// is marked for deletion) ends ensureTopic within the request timeout with
// an error that names the topic and says why it is not listed, not a bare
// UNKNOWN_TOPIC_OR_PARTITION from a "describe" the operator never asked
// for.
func TestEnsureTopicMarkedForDeletionEndsNamingIt(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1))
	s, ctx := testCatalog(t, c)
	s.timeout = 500 * time.Millisecond
	c.ControlKey(int16(kmsg.CreateTopics), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.CreateTopicsRequest)
		resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
		resp.Version = req.Version
		for _, rt := range req.Topics {
			st := kmsg.NewCreateTopicsResponseTopic()
			st.Topic, st.ErrorCode = rt.Topic, kerr.TopicAlreadyExists.Code
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	start := time.Now()
	_, err := s.ensure(ctx, "orders")
	took := time.Since(start)
	if !errors.Is(err, kerr.UnknownTopicOrPartition) || errclass.Fatal(err) {
		t.Fatalf("ensure a topic that exists and is never listed: %v (fatal %v), want a retried UNKNOWN_TOPIC_OR_PARTITION", err, errclass.Fatal(err))
	}
	if took > 5*time.Second {
		t.Fatalf("gave up after %v, want about the request timeout (500 ms)", took)
	}
	if msg := err.Error(); !strings.Contains(msg, "orders") || !strings.Contains(msg, "marked for deletion") || !strings.Contains(msg, "500ms") {
		t.Errorf("error %q: want the topic, how long it was asked for and the likely cause (marked for deletion)", msg)
	}
}

// A topic created a moment ago that the brokers still do not list when
// the request timeout ends mid-way through a metadata request (a slow
// broker) ends ensureTopic with the same error as one that ends between
// two requests: the topic, how long and why, not a bare "context deadline
// exceeded" from the request the deadline cut short.
func TestEnsureTopicNeverListedEndsNamingItWhenTheDeadlineCutsARequest(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1))
	s, ctx := testCatalog(t, c)
	s.timeout = 500 * time.Millisecond
	createdNotListed(t, c, "orders", -1)
	var asked atomic.Int32
	c.ControlKey(int16(kmsg.Metadata), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, rt := range kreq.(*kmsg.MetadataRequest).Topics {
			if rt.Topic != nil && *rt.Topic == "orders" && asked.Add(1) > 1 {
				// Every answer after the first comes after the deadline.
				c.SleepControl(func() { <-time.After(time.Second) })
				break
			}
		}
		return nil, nil, false
	})
	_, err := s.ensure(ctx, "orders")
	if !errors.Is(err, kerr.UnknownTopicOrPartition) || errclass.Fatal(err) {
		t.Fatalf("ensure a created topic never listed, the deadline landing in a metadata request: %v (fatal %v), want a retried UNKNOWN_TOPIC_OR_PARTITION", err, errclass.Fatal(err))
	}
	if msg := err.Error(); !strings.Contains(msg, "orders") || !strings.Contains(msg, "marked for deletion") || !strings.Contains(msg, "500ms") {
		t.Errorf("error %q: want the topic, how long it was asked for and the likely cause (marked for deletion)", msg)
	}
}

// awaitSettleWait waits until the settle wait after the lane's last commit,
// if one runs, has ended (exactly-once; the lane's next begin would wait
// for it too).
func (a testSink) awaitSettleWait() {
	d := a.d.(*exactlyOnce)
	d.mu.Lock()
	done := a.settle.done
	d.mu.Unlock()
	if done != nil {
		<-done
	}
}
