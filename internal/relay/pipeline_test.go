package relay

// Adversarial review of issue 17 (commit pipelining, settle wait, larger
// batches): loop-level cases on the scripted harness (script_test.go).

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// slowEndTxn makes every EndTxn take d at the broker: each commit stays in
// flight while the loop reads on and holds what it routes.
func slowEndTxn(h *harness, d time.Duration) {
	h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		h.kafka.SleepControl(func() { time.Sleep(d) })
		return nil, nil, false
	})
}

func attack17Script(flavor string) *script {
	s := newScript(flavor)
	s.tx(s.insert("order", "1", 1))
	s.tx(s.insert("order", "1", 2), s.insert("order", "2", 1))
	s.xaPrepare("x,,1", s.insert("order", "1", 2))
	s.tx(s.insert("order", "1", 3), s.insert("order", "3", 2)) // split by max_records
	s.tx()
	s.xaCommit("x,,1")
	s.xaPrepare("y,,1", s.insert("order", "2", 1))
	s.tx(s.insert("order", "2", 1))
	s.xaRollback("y,,1")
	s.xaOnePhase("z,,1", s.insert("order", "1", 3))
	s.tx(s.insert("order", "1", 1))
	return s
}

// SIGTERM and crash after every event while every commit is in flight for
// 40 ms (records routed meanwhile are held), with batches split at 2 records.
func TestAttack17SlowCommitStopEvery(t *testing.T) {
	for _, flavor := range []string{"mariadb", "mysql"} {
		for _, stop := range []string{"term", "crash"} {
			for _, batch := range []int{1, 0} {
				t.Run(flavor+"/"+stop+"/"+map[int]string{1: "one", 0: "all"}[batch], func(t *testing.T) {
					t.Parallel()
					h := newHarness(t, attack17Script(flavor), maxRecords(2))
					h.batch = batch
					slowEndTxn(h, 40*time.Millisecond)
					if stop == "term" {
						h.stopEvery((*attempt).term, nil)
					} else {
						h.stopEvery((*attempt).crash, errCrash)
					}
					h.verify()
				})
			}
		}
	}
}

// The in-flight commit fails (EndTxn refused) every third time while records
// are held: each failure ends the attempt; restarts publish everything once.
func TestAttack17CommitFailsWhileHolding(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		h := newHarness(t, attack17Script(flavor), maxRecords(2))
		var n atomic.Int32
		h.kafka.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
			h.kafka.KeepControl()
			h.kafka.SleepControl(func() { time.Sleep(20 * time.Millisecond) })
			r := req.(*kmsg.EndTxnRequest)
			if r.Commit && n.Add(1)%3 == 0 {
				resp := r.ResponseKind().(*kmsg.EndTxnResponse)
				resp.ErrorCode = kerr.InvalidTxnState.Code
				return resp, nil, true
			}
			return nil, nil, false
		})
		for i := 0; i < 30; i++ {
			a := h.start()
			a.feedAll()
			err := a.term()
			if err == nil {
				break
			}
			t.Logf("attempt %d: %v", i, err)
		}
		h.start().finish()
		h.verify()
	})
}

// outbox_relay_kafka_transaction_duration_seconds is documented as "flush
// and commit time of a batch". With pipelining it is observed when the loop
// gets round to taking the commit's result (finishCommit), so it also counts
// whatever the loop did meanwhile: here a CreateTopics for a new aggregate
// type that takes 1.5 s at the broker, while EndTxn takes a few ms. The
// histogram then reports a 1.5 s Kafka transaction; a dashboard or alert on
// commit latency fires on slow topic creation, binlog reads, XA look-ups...
func TestAttack17TxnSecondsCountsLoopWork(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	s.tx(s.insert("customer", "7", 1)) // a new topic: created while the first commit is in flight
	h := newHarness(t, s, nil)
	// Create the first topic up front so that only the second creation is slow.
	var slow atomic.Bool
	h.kafka.ControlKey(int16(kmsg.CreateTopics), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		for _, tp := range req.(*kmsg.CreateTopicsRequest).Topics {
			if tp.Topic == h.cfg.Router.TopicPrefix+"customer" {
				slow.Store(true)
				h.kafka.SleepControl(func() { time.Sleep(1500 * time.Millisecond) })
			}
		}
		return nil, nil, false
	})
	var endTxns atomic.Int32
	h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		endTxns.Add(1)
		return nil, nil, false
	})
	a := h.start()
	a.feed(s.through(1)) // tx 1: committed when caught up (in flight)
	a.feedAll()          // tx 2's rows: the loop blocks in CreateTopics
	if err := a.term(); err != nil {
		t.Fatal(err)
	}
	h.verify()
	var m dto.Metric
	if err := h.relay.metrics.KafkaTxnSeconds.Write(&m); err != nil {
		t.Fatal(err)
	}
	hs := m.GetHistogram()
	t.Logf("EndTxns %d; kafka_transaction_duration_seconds count %d sum %.3f s", endTxns.Load(), hs.GetSampleCount(), hs.GetSampleSum())
	if !slow.Load() {
		t.Fatal("the slow CreateTopics was not hit")
	}
	if hs.GetSampleSum() > 1.0 {
		t.Errorf("kafka_transaction_duration_seconds sums %.3f s over %d commits of a few ms each: it counts the loop's own work (a 1.5 s CreateTopics) as Kafka transaction time", hs.GetSampleSum(), hs.GetSampleCount())
	}
}

// The settle wait turns itself off for the rest of the attempt (settleOff)
// on the first DescribeTransactions answer that carries an error and was not
// a time-out, e.g. a transient UNKNOWN_SERVER_ERROR or a failed connection
// (franz-go does not retry dial errors) while a broker restarts: an attempt
// lasts until the next failure, days, and every transaction pays the 20 ms
// CONCURRENT_TRANSACTIONS back-off again (the p99 goal is lost
// silently; no metric or log says so).
func TestAttack17SettleOffAfterOneTransientError(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var failed atomic.Int32
	c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if failed.Add(1) > 1 {
			return nil, nil, false // once only (the control is dropped)
		}
		return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
			st.ErrorCode = kerr.UnknownServerError.Code
		}), nil, true
	})
	s, ctx := txnSink(t, c)
	for i := 1; i <= 5; i++ {
		if err := s.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.commit(ctx, cpAt("0-1-"+string(rune('0'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	if s.settleOff {
		t.Errorf("one transient DescribeTransactions error (of %d asked) turned the settle wait off for the rest of the attempt (%d waits in 5 commits)",
			failed.Load(), s.settleWaits.Load())
	}
}

// throttleProduce makes the broker accept produce requests at rate bytes/s
// (as a client quota or a slow disk does: responses are delayed in
// proportion to their size).
var throttledRecords atomic.Int64

func throttleProduce(h *harness, rate float64) {
	var mu sync.Mutex
	h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		n := 0
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				n += len(p.Records)
			}
		}
		throttledRecords.Add(int64(n))
		d := time.Duration(float64(n) / rate * float64(time.Second))
		h.kafka.SleepControl(func() { mu.Lock(); time.Sleep(d); mu.Unlock() })
		return nil, nil, false
	})
}

// A bulk catch-up (200-row INSERTs) on a broker that accepts about 60 KB/s
// of records (a producer quota, a slow or remote cluster) with
// kafka.request_timeout 3 s. With max_records 5,000 (the old default) each
// batch is flushed in ~1.2 s (73 KB compressed) and the relay makes progress; with the new
// default of 20,000 every batch (290 KB) needs ~5 s to be acknowledged, every commit
// fails at the request timeout, and every restart fails on the same first
// batch: the relay never moves again (a restart loop re-sending 20,000
// records each time), where the old default worked. The relay does not
// shrink a batch whose flush timed out.
func TestAttack17BigDefaultBatchNeverFlushesOnSlowBroker(t *testing.T) {
	build := func() *script {
		s := newScript("mariadb")
		for i := 0; i < 150; i++ {
			s.tx(s.insert("order", strconv.Itoa(i%6), 200))
		}
		return s
	}
	for _, tc := range []struct {
		name string
		max  int
	}{{"max_records=5000", 5000}, {"max_records=default", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, build(), func(c *config.Config) {
				c.Kafka.RequestTimeout = 3 * time.Second
				if tc.max > 0 {
					c.Kafka.Batch.MaxRecords = tc.max
				}
			})
			h.batch = 0
			t.Logf("kafka.batch.max_records %d", h.cfg.Kafka.Batch.MaxRecords)
			throttleProduce(h, 60_000)
			var last error
			for i := 0; i < 4; i++ {
				a := h.start()
				a.feedAll()
				if last = a.term(); last == nil {
					break
				}
				t.Logf("attempt %d: %v", i+1, last)
			}
			cp := h.load()
			t.Logf("records produced %d", throttledRecords.Swap(0))
			if last != nil {
				t.Fatalf("four attempts failed, checkpoint still at %q with %d events (batch bound %d): %v", cp.GTIDSet, cp.Events, h.relay.batchLimit(), last)
			}
			if tc.max == 0 && h.relay.batchLimit() >= h.cfg.Kafka.Batch.MaxRecords {
				t.Errorf("batch bound %d after a flush time-out: not lowered", h.relay.batchLimit())
			}
			h.verify()
		})
	}
}

// eventsTotal sums outbox_relay_events_total over its labels.
func eventsTotal(t *testing.T, h *harness) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 64)
	go func() { h.relay.metrics.Events.Collect(ch); close(ch) }()
	sum := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		sum += d.GetCounter().GetValue()
	}
	return sum
}

// An attempt that ends (source stream error, stale host, lease lost, a
// crash of the reader) while a commit is in flight: run's deferred
// settleInflight waits for the commit and throws its result away. When that
// commit succeeded, its records are committed and the next attempt starts
// after them, but finishCommit never ran: outbox_relay_events_total never
// counts them (nor kafka_transactions_total, the position metrics, or the
// after-commit failpoint). The counter stays below what was published for
// good.
func TestAttack17EventsTotalMissesCommitInFlightAtAttemptEnd(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 3))
	s.tx(s.insert("order", "2", 2))
	h := newHarness(t, s, nil)
	slowEndTxn(h, 300*time.Millisecond)
	a := h.start()
	a.feed(s.through(1)) // caught up: the batch's commit is in flight for 300 ms
	if err := a.crash(); err == nil {
		t.Fatal("crash: nil")
	}
	if cp := h.load(); cp.GTIDSet != s.set(1) {
		t.Fatalf("the in-flight commit did not land: %+v", cp)
	}
	h.start().finish()
	h.verify()
	if got, want := eventsTotal(t, h), float64(len(s.want)); got != want {
		t.Errorf("outbox_relay_events_total %v, %v records published (checkpoint counts %d)", got, want, h.load().Events)
	}
}

// A fatal stop from the reader (statement-logged DML at the next GTID) while
// the commit of the transactions before it is in flight, and that commit
// fails (EndTxn refused). The loop returns the fatal error (exit 65, "do not
// restart") with the checkpoint still before those transactions: the stop's
// contract ("nothing after the transaction is published, the checkpoint
// stays before it", and the recovery `checkpoint skip --gtid <G>`, which
// requires G to be the next transaction after the checkpoint) no longer
// holds. skip refuses; `skip --force` on MariaDB moves the domain's position
// to G and so drops the transactions in between (never published). Without
// held records the commit's failure is not even reported: settleInflight
// drops it. Before pipelining a failed commit ended the attempt
// (non-fatal, restart) before the loop read on.
func TestAttack17FatalStopWhileInFlightCommitFails(t *testing.T) {
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "nothing-held", true: "records-held"}[held], func(t *testing.T) {
			s := newScript("mariadb")
			s.tx(s.insert("order", "1", 1))
			s.tx(s.insert("order", "1", 1))
			h := newHarness(t, s, nil)
			var refuse atomic.Bool
			h.kafka.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				h.kafka.SleepControl(func() { time.Sleep(200 * time.Millisecond) })
				if !refuse.Load() {
					return nil, nil, false
				}
				resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
				resp.ErrorCode = kerr.UnknownServerError.Code
				return resp, nil, true
			})
			a := h.start()
			refuse.Store(true)
			n := 2
			if held {
				a.feed(s.through(1)) // commit of tx 1 in flight (to be refused)
				a.feed(s.through(2)) // tx 2 held
			} else {
				h.batch = 0
				a.feed(s.through(2)) // one reader batch, caught up at its end: the commit of tx 1-2 in flight
			}
			a.readErr <- fmt.Errorf("%w: gtid %s", binlog.ErrStatementLogged, s.gtid(3))
			err := a.wait()
			refuse.Store(false)
			cp := h.load()
			t.Logf("loop returned %v (fatal %v); checkpoint %q", err, fatal(err), cp.GTIDSet)
			if fatal(err) && cp.GTIDSet != s.set(n) {
				t.Errorf("fatal stop before %s with the checkpoint at %q, not %q (the transaction before it): `checkpoint skip --gtid %s` refuses; with --force it skips %s..%s unpublished",
					s.gtid(3), cp.GTIDSet, s.set(n), s.gtid(3), s.gtid(1), s.gtid(2))
			}
			if fatal(err) {
				return
			}
			// Not fatal: the next attempt reaches the stop again, with the
			// transactions before it committed.
			b := h.start()
			b.feed(s.through(2))
			b.readErr <- fmt.Errorf("%w: gtid %s", binlog.ErrStatementLogged, s.gtid(3))
			err = b.wait()
			if cp := h.load(); !fatal(err) || cp.GTIDSet != s.set(2) {
				t.Errorf("second attempt: %v (fatal %v), checkpoint %q; want the stop with the checkpoint at %q", err, fatal(err), cp.GTIDSet, s.set(2))
			}
		})
	}
}

// A coordinator that never answers DescribeTransactions (here: always
// UNKNOWN_SERVER_ERROR) is not asked for settlePause after settleGiveUp
// failed waits in a row; one that refuses it (authorization) is never asked
// again after the first.
func TestSettleGivesUpOnPersistentFailure(t *testing.T) {
	for _, tc := range []struct {
		code  int16
		after int
	}{{kerr.UnknownServerError.Code, settleGiveUp}, {kerr.TransactionalIDAuthorizationFailed.Code, 1}} {
		t.Run(kerr.ErrorForCode(tc.code).Error(), func(t *testing.T) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			var asked atomic.Int32
			c.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				asked.Add(1)
				return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
					st.ErrorCode = tc.code
				}), nil, true
			})
			s, ctx := txnSink(t, c)
			for i := 1; i <= settleGiveUp+3; i++ {
				if err := s.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("v")}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.commit(ctx, cpAt("0-1-"+strconv.Itoa(i))); err != nil {
					t.Fatal(err)
				}
				stopped := s.settleOff || time.Now().Before(s.settlePaused)
				if want := i > tc.after; i <= tc.after+1 && stopped != want {
					t.Fatalf("after commit %d: not asking %v, want %v", i, stopped, want)
				}
			}
			if int(asked.Load()) != tc.after {
				t.Errorf("asked %d times in %d commits, want %d", asked.Load(), settleGiveUp+3, tc.after)
			}
			if refusal := tc.after == 1; s.settleOff != refusal {
				t.Errorf("settle off for the attempt %v, want %v (paused until %s)", s.settleOff, refusal, s.settlePaused.Format(time.TimeOnly))
			}
		})
	}
}
