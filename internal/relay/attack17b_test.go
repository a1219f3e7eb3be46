package relay

// Adversarial review of issue 17, second round: loop/sink-level cases.

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// A coordinator that answers DescribeTransactions, but slower than
// settleMax (a loaded broker; one whose transaction log partition moved
// further away): every settle wait runs out of time, which counts as
// "done" and resets settleFails, so the sink never stops asking. Every
// transaction then waits the full 50 ms before its first produce, 2.5x the
// 20 ms broker back-off the wait exists to avoid, for the whole attempt,
// and fires up to 100 DescribeTransactions per commit at a coordinator that
// is already slow. Here: 20 one-record commits, DescribeTransactions
// answered in 80 ms.
func TestAttack17bSlowDescribeTransactionsNeverGivenUp(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var asked atomic.Int32
	c.ControlKey(int16(kmsg.DescribeTransactions), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		asked.Add(1)
		c.SleepControl(func() { time.Sleep(80 * time.Millisecond) })
		return nil, nil, false
	})
	s, ctx := txnSink(t, c)
	const n = 20
	var waited time.Duration
	for i := 1; i <= n; i++ {
		began := time.Now()
		if err := s.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		waited += time.Since(began)
		if _, err := s.commit(ctx, cpAt("0-1-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d commits: first produces waited %s in all (%s each), %d DescribeTransactions, settle off %v",
		n, waited, waited/n, asked.Load(), s.settleOff)
	if !s.settleOff && waited > n*settleMax*3/4 {
		t.Errorf("a coordinator slower than settleMax is asked forever: each transaction waited %s before its first produce (the broker's back-off is 20 ms)", waited/n)
	}
}

// Held: a coordinator briefly unavailable (COORDINATOR_LOAD_IN_PROGRESS
// for settleGiveUp questions in a row) does not turn the settle wait off:
// kadm retries the retriable answer within the 50 ms wait.
func TestAttack17bHeldBriefCoordinatorUnavailability(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var failed atomic.Int32
	c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if failed.Add(1) > settleGiveUp {
			return nil, nil, false
		}
		return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
			st.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		}), nil, true
	})
	s, ctx := txnSink(t, c)
	for i := 1; i <= settleGiveUp+20; i++ {
		if err := s.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.commit(ctx, cpAt("0-1-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("asked %d, waits %d, fails %d, off %v", failed.Load(), s.settleWaits.Load(), s.settleFails, s.settleOff)
	if s.settleOff {
		t.Errorf("%d retriable COORDINATOR_LOAD_IN_PROGRESS answers in a row turned the settle wait off for the rest of the attempt; the coordinator answered normally for the next 20 commits and was never asked again (%d waits)",
			settleGiveUp, s.settleWaits.Load())
	}
}

// Batches bound by kafka.batch.max_bytes (large payloads: 20,000 rows of
// 50 KB never make a 20,000-record batch, 8 MB holds 160 of them) on a
// broker too slow for one such batch per request_timeout. ackTimedOut
// halves the records bound (l.maxRecords, 20,000), not the size of the
// batch that timed out, so every halving above the bytes-bound count
// changes nothing: the relay needs log2(20,000/160) = 7 failed attempts,
// each a request_timeout and a resent full batch, before one commit goes
// through (here: ~170 records per 3,000-byte batch, 9 halvings needed;
// 5 attempts all fail on the same first batch). Halving the batch that
// timed out (its record count, or the bytes bound too) gets through on
// the second or third.
func TestAttack17bHalvingIgnoresBytesBoundBatches(t *testing.T) {
	s := newScript("mariadb")
	for i := 0; i < 40; i++ {
		s.tx(s.insert("order", strconv.Itoa(i%6), 50))
	}
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.RequestTimeout = time.Second
		c.Kafka.Batch.MaxBytes = 3000 // key+value ~17 bytes a record: ~170 records a batch
	})
	h.batch = 0
	throttleProduce(h, 2500)
	var last error
	for i := 0; i < 5; i++ {
		a := h.start()
		a.feedAll()
		if last = a.term(); last == nil {
			break
		}
		cp := h.load()
		t.Logf("attempt %d: bound then %d, checkpoint events %d: %v", i+1, h.relay.batchLimit(), cp.Events, last)
	}
	if last != nil {
		t.Fatalf("five attempts failed on the same bytes-bound batch; the records bound was halved to %d, which no batch reaches", h.relay.batchLimit())
	}
	h.verify()
}

// Transaction protocol v2 (Kafka 4) bumps the producer epoch at every
// commit; after 32,767 commits the coordinator hands out a new producer id
// in the EndTxn answer. One attempt of a caught-up relay commits a Kafka
// transaction per source transaction (hundreds a second): it reaches that
// point within minutes. The sink (with its settle wait) must go through it
// without an error (a fencing error there is fatal). Real broker only:
// RELAY_TEST_KAFKA=host:port ATK_EPOCH_TXNS=33000.
func TestAttack17bEpochExhaustionOnRealKafka(t *testing.T) {
	addr := os.Getenv("RELAY_TEST_KAFKA")
	n, _ := strconv.Atoi(os.Getenv("ATK_EPOCH_TXNS"))
	if addr == "" || n == 0 {
		t.Skip("RELAY_TEST_KAFKA and ATK_EPOCH_TXNS")
	}
	name := "atk17b-epoch-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerLinger(0), kgo.TransactionalID(name),
		kgo.RecordPartitioner(Partitioner()))
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
	s := newSink(ctx, cl, store, sinkOptions{txn: true, timeout: 10 * time.Second, parts: 1, repl: 1})
	id0, ep0, err := cl.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	for i := 1; i <= n; i++ {
		if err := s.produce(ctx, &kgo.Record{Topic: name, Value: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if _, err := s.commit(ctx, cpAt("0-1-"+strconv.Itoa(i))); err != nil {
			id, ep, _ := cl.ProducerID(ctx)
			t.Fatalf("commit %d (producer %d epoch %d; started as %d/%d): %v", i, id, ep, id0, ep0, err)
		}
		if i%5000 == 0 {
			id, ep, _ := cl.ProducerID(ctx)
			t.Logf("%d commits in %s: producer %d epoch %d, settle off %v", i, time.Since(began).Round(time.Second), id, ep, s.settleOff)
		}
	}
	id, ep, _ := cl.ProducerID(ctx)
	t.Logf("%d commits in %s: producer %d/%d -> %d/%d, settle off %v, waits %d", n, time.Since(began).Round(time.Second), id0, ep0, id, ep, s.settleOff, s.settleWaits.Load())
}
