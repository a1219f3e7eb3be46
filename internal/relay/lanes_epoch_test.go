package relay

// Two transaction lanes: the second lane's
// check of the pipeline's name (lanes.go) against the relay's own epoch
// changes and against a slow coordinator.

import (
	"context"
	"errors"
	"math"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// bumpTo initialises id until the coordinator's epoch for it is epoch
// (kfake: a new id starts at 0, each InitProducerID without a producer id
// bumps it by one).
func bumpTo(t *testing.T, h *harness, id string, epoch int16) {
	t.Helper()
	cl, err := kgo.NewClient(h.relay.kafka.Admin()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	init := func() (int64, int16) {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &id
		req.TransactionTimeoutMillis = int32(h.cfg.Kafka.TransactionTimeout.Milliseconds())
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, cl)
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err != nil {
			t.Fatal(err)
		}
		return resp.ProducerID, resp.ProducerEpoch
	}
	_, e := init()
	for e < epoch {
		n := int(epoch - e)
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n-1; i += 16 {
					init()
				}
			}()
		}
		wg.Wait()
		_, e = init()
	}
	if e != epoch {
		t.Fatalf("bumped %s to epoch %d, want %d", id, e, epoch)
	}
}

// Producer id rotation at epoch exhaustion, under transaction protocol v2
// (EndTxn bumps the epoch). When the first lane commits at epoch 32766
// (Short.MAX_VALUE-1), the coordinator gives it a new producer id at epoch
// 0. kfake switches the id atomically. Apache Kafka answers the EndTxn as
// soon as PrepareCommit is logged, with the producer id and epoch of the
// CompleteCommit transition it is about to make (TransactionCoordinator
// endTransaction: responseCallback(Errors.NONE, newPreSendMetadata.producerId,
// newPreSendMetadata.producerEpoch), newPreSendMetadata being
// TransactionMetadata.prepareComplete: nextProducerId, epoch 0), while its
// cached state stays PrepareCommit with the OLD producer id at epoch 32767
// (prepareAbortOrCommit: producerEpoch + 1) until the markers are written and
// CompleteCommit is appended; DescribeTransactions reports that cached
// state (handleDescribeTransactions: txnMetadata.producerId,
// txnMetadata.producerEpoch). This relay's own txnsettle.go says the same
// window exists (markers and CompleteCommit after the EndTxn answer).
//
// "kafka" models that window (20 ms after the EndTxn answer, during which
// DescribeTransactions of the name reports the old id, epoch 32767,
// PrepareCommit); "kfake" is the embedded broker as is.
func TestLanesEpochOverflowIsNoFence(t *testing.T) {
	for _, broker := range []string{"kfake", "kafka"} {
		t.Run(broker, func(t *testing.T) {
			s := newScript("mariadb")
			for range 7 {
				s.tx(s.insert("order", "1", 1))
			}
			h := newHarness(t, s, nil)
			name := h.cfg.Name
			began := time.Now()
			// h.start initialises the name once more (32764); the initial
			// checkpoint commits at 32764 (-> 32765), transaction 2 at 32765
			// (-> 32766), transaction 4 at 32766: the id rotates.
			bumpTo(t, h, name, math.MaxInt16-4)
			t.Logf("bumped %s to epoch %d in %s", name, math.MaxInt16-4, time.Since(began).Round(time.Millisecond))

			var armed, holding atomic.Bool
			var oldID atomic.Int64
			var windowEnd atomic.Int64 // unix nanos
			var answered atomic.Int64  // unix nanos of the EndTxn answer
			reached := make(chan struct{}, 1)
			release := make(chan struct{})
			var lane2Produces atomic.Int32
			h.kafka.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				r := req.(*kmsg.EndTxnRequest)
				if r.Commit && r.TransactionalID == name && r.ProducerEpoch == math.MaxInt16-1 && armed.CompareAndSwap(true, false) {
					oldID.Store(r.ProducerID)
					holding.Store(true)
					reached <- struct{}{}
					h.kafka.SleepControl(func() { <-release })
					holding.Store(false)
					now := time.Now()
					answered.Store(now.UnixNano())
					if broker == "kafka" {
						windowEnd.Store(now.Add(20 * time.Millisecond).UnixNano())
					}
				}
				return nil, nil, false
			})
			h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				if id := req.(*kmsg.ProduceRequest).TransactionID; id != nil && *id == checkpoint.TransactionalIDs(name)[1] && holding.Load() {
					lane2Produces.Add(1)
				}
				return nil, nil, false
			})
			var modelled atomic.Int32
			h.kafka.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				r := req.(*kmsg.DescribeTransactionsRequest)
				if len(r.TransactionalIDs) != 1 || r.TransactionalIDs[0] != name || time.Now().UnixNano() >= windowEnd.Load() {
					return nil, nil, false
				}
				// Kafka's cached state in the marker window (see above): fully
				// fabricated, so that no other question slips past the model.
				modelled.Add(1)
				return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
					st.ProducerID, st.ProducerEpoch, st.State = oldID.Load(), math.MaxInt16, "PrepareCommit"
					st.TimeoutMillis = int32(h.cfg.Kafka.TransactionTimeout.Milliseconds())
					st.StartTimestamp = time.Now().UnixMilli()
				}), nil, true
			})

			a := h.start()
			for n := 1; n <= 3; n++ {
				a.feed(s.through(n))
				h.waitCheckpoint("committed", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(n) })
			}
			armed.Store(true)
			a.feed(s.through(4)) // the first lane commits at epoch 32766: held
			select {
			case <-reached:
			case <-time.After(10 * time.Second):
				t.Fatal("the first lane never committed at epoch 32766")
			}
			a.feed(s.through(5)) // the second lane's batch, produced once the first is flushed
			eventually(t, "records produced into lane 2 while lane 1's commit is held", func() bool { return lane2Produces.Load() > 0 })
			close(release) // the first lane's id rotates; the second lane commits next
			eventually(t, "the second lane commits or the attempt ends", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				cp, err := h.relay.store.WithStableWait(10*time.Millisecond).Load(ctx, name)
				return !a.running() || err == nil && cp.GTIDSet == s.set(5)
			})
			t.Logf("DescribeTransactions of %s answered as Kafka in the marker window: %d", name, modelled.Load())
			if !a.running() {
				err := a.wait()
				t.Errorf("nobody else touched %s (its producer id rotated at epoch exhaustion, the relay's own commit), yet the attempt ended: %v", name, err)
				if errors.Is(err, ErrFenced) {
					t.Errorf("a false fence: ErrFenced sends the instance back to standby (metrics fenced=1) and aborts the batch")
				}
			}
			dropControlAndFinish(h, a)
		})
	}
}

// dropControlAndFinish hands the broker back to kfake's own handling and
// finishes the work: with a, or, when a has ended (its failure reported by
// the caller), with a new attempt; every event must then be published
// exactly once.
func dropControlAndFinish(h *harness, a *attempt) {
	h.kafka.DropControl()
	if a.running() {
		a.finish()
	} else {
		h.start().finish()
	}
	h.verify()
}

// Transaction protocol v2 (Kafka 4) bumps the producer epoch at every
// commit; after 32,767 commits the coordinator hands out a new producer id
// in the EndTxn answer. One attempt of a caught-up relay commits a Kafka
// transaction per source transaction (hundreds a second): it reaches that
// point within minutes. The sink (with its settle wait) must go through it
// without an error (a fencing error there is fatal). Real broker only:
// RELAY_TEST_KAFKA=host:port RELAY_TEST_EPOCH_EXHAUSTION_TXNS=33000.
func TestLanesEpochExhaustionOnRealKafka(t *testing.T) {
	addr := os.Getenv("RELAY_TEST_KAFKA")
	n, _ := strconv.Atoi(os.Getenv("RELAY_TEST_EPOCH_EXHAUSTION_TXNS"))
	if addr == "" || n == 0 {
		t.Skip("RELAY_TEST_KAFKA and RELAY_TEST_EPOCH_EXHAUSTION_TXNS")
	}
	name := "atk17b-epoch-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerLinger(0), kgo.TransactionalID(name),
		kgo.RecordPartitioner(clients.Partitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := context.Background()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, name); err != nil {
		t.Fatal(err)
	}
	store := checkpoint.NewStore(name+"-cp", kgo.SeedBrokers(addr))
	if err := store.EnsureTopic(ctx, adm, 1); err != nil {
		t.Fatal(err)
	}
	ln := newLane(ctx, cl, store, deliveryOptions{timeout: 10 * time.Second})
	d := newExactlyOnce([]*lane{ln}, newAccounting(nil))
	runDelivery(t, d)
	s := testSink{lane: ln, d: d, cl: cl, store: store}
	id0, ep0, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for i := 1; i <= n; i++ {
		if err := s.produce(ctx, outRecord{Record: &kgo.Record{Topic: name, Value: []byte(strconv.Itoa(i))}}); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if _, err := s.commit(ctx, cpAt("0-1-"+strconv.Itoa(i))); err != nil {
			id, ep, _ := cl.ProducerID(ctx)
			t.Fatalf("commit %d (producer %d epoch %d; started as %d/%d): %v", i, id, ep, id0, ep0, err)
		}
		if i%5000 == 0 {
			id, ep, _ := cl.ProducerID(ctx)
			t.Logf("%d commits in %s: producer %d epoch %d, settle off %v", i, time.Since(began).Round(time.Second), id, ep, s.settle.off)
		}
	}
	id, ep, _ := cl.ProducerID(ctx)
	t.Logf("%d commits in %s: producer %d/%d -> %d/%d, settle off %v, waits %d", n, time.Since(began).Round(time.Second), id0, ep0, id, ep, s.settle.off, s.settle.waits.Load())
}
