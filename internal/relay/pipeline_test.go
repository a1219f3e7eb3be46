package relay

// The commit pipeline (a commit in flight while the loop reads on and
// holds the next batch's records): restarts, failures, fencing, time-outs,
// linger, max_wait and metrics, on the scripted harness (script_test.go).

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func slowCommitScript(flavor string) *script {
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
func TestPipelineSlowCommitStopAfterEveryEvent(t *testing.T) {
	realTime(t)
	for _, flavor := range []string{"mariadb", "mysql"} {
		for _, stop := range []string{"term", "crash"} {
			for _, batch := range []int{1, 0} {
				t.Run(flavor+"/"+stop+"/"+map[int]string{1: "one", 0: "all"}[batch], func(t *testing.T) {
					t.Parallel()
					h := newHarness(t, slowCommitScript(flavor), maxRecords(2))
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
func TestPipelineCommitFailsWhileHoldingRecords(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		h := newHarness(t, slowCommitScript(flavor), maxRecords(2))
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
// and commit time of a batch". With pipelining the loop takes the commit's
// result later (finishCommit); the histogram must still measure the
// commit, not whatever the loop did meanwhile: here a CreateTopics for a
// new aggregate type that takes 1.5 s at the broker, while EndTxn takes a
// few ms. Counted as a 1.5 s Kafka transaction, a dashboard or alert on
// commit latency would fire on slow topic creation, binlog reads, XA
// look-ups.
func TestPipelineTxnSecondsExcludesLoopWork(t *testing.T) {
	realTime(t)
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

// throttleProduce makes the broker accept produce requests at rate bytes/s
// (as a client quota or a slow disk does: responses are delayed in
// proportion to their size).
var throttledRecords atomic.Int64

// A bulk catch-up (200-row INSERTs) on a broker that accepts about 60 KB/s
// of records (a producer quota, a slow or remote cluster) with
// kafka.request_timeout 3 s. A batch of the default 20,000 records (290 KB)
// needs ~5 s to be acknowledged, so its commit fails at the request
// timeout; the relay must shrink the batch whose flush timed out and make
// progress (5,000 records flush in ~1.2 s), never restart on the same
// first batch for good.
func TestPipelineBigBatchOnSlowBrokerMakesProgress(t *testing.T) {
	realTime(t)
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

// An attempt that ends (source stream error, stale host, lease lost, a
// crash of the reader) while a commit is in flight: run's deferred
// settleInflight waits for the commit. When that commit succeeded, its
// records are committed and the next attempt starts after them, so they
// must be counted as a finished commit: outbox_relay_events_total (and
// kafka_transactions_total, the position metrics) must equal what was
// published, never stay below it for good.
func TestPipelineEventsTotalCountsCommitInFlightAtAttemptEnd(t *testing.T) {
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

// A new instance initialises the transactional id while the old one's
// commit is in flight (EndTxn held 600 ms at the broker) and the old loop
// holds the next transaction's records: the old commit is fenced (the
// coordinator aborted its transaction), the old loop returns ErrFenced
// without producing what it held, and the new instance, which read the
// checkpoint after fencing, publishes everything once.
func TestPipelineFenceDuringInFlightCommitWithHeldRecords(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 2))
		s.tx(s.insert("order", "1", 1), s.insert("customer", "1", 1)) // a new topic, created while held
		s.tx(s.insert("order", "1", 1))
		h := newHarness(t, s, nil)
		var endTxns atomic.Int32
		h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
			h.kafka.KeepControl()
			if endTxns.Add(1) == 2 { // the first batch's (after the initial checkpoint's)
				h.kafka.SleepControl(func() { time.Sleep(600 * time.Millisecond) })
			}
			return nil, nil, false
		})
		a := h.start()
		a.feed(s.through(1)) // caught up: in flight for 600 ms
		a.feed(s.through(2)) // held, due when the commit ends
		b := h.start()       // fences a while its commit is in flight
		err := a.wait()
		t.Logf("old attempt: %v", err)
		if !errors.Is(err, ErrFenced) {
			t.Errorf("old attempt returned %v, want ErrFenced", err)
		}
		b.finish()
		h.verify()
	})
}

// An acknowledgement time-out of the commit in flight (a throttled broker:
// 8 records take 2 s, kafka.request_timeout 1.5 s) while the loop holds the
// next batch: the attempt fails with errAckTimeout, the bound is halved
// from the failed batch's size (not the held one's), and the restart
// publishes everything once in smaller batches.
func TestPipelineAckTimeoutHalvesWhileHolding(t *testing.T) {
	realTime(t)
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 8)) // one full batch: committed at once
	s.tx(s.insert("order", "1", 3)) // held while its flush times out
	s.tx(s.insert("order", "2", 3))
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.Batch.MaxRecords = 8
		c.Kafka.RequestTimeout = 1500 * time.Millisecond
	})
	h.batch = 0
	a := h.start()
	// After the initial checkpoint: the broker takes 250 ms per record.
	var throttled atomic.Bool
	throttled.Store(true)
	var mu sync.Mutex
	h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		if !throttled.Load() {
			return nil, nil, false
		}
		n := 0
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				n += len(p.Records)
			}
		}
		h.kafka.SleepControl(func() { mu.Lock(); time.Sleep(time.Duration(n) * 250 * time.Millisecond); mu.Unlock() })
		return nil, nil, false
	})
	a.feed(s.through(1))
	a.feedAll()
	err := a.wait()
	t.Logf("first attempt: %v; batch bound now %d", err, h.relay.batchLimit())
	if !errors.Is(err, errAckTimeout) {
		t.Fatalf("first attempt: %v, want an acknowledgement time-out", err)
	}
	if got := h.relay.batchLimit(); got != 4 {
		t.Errorf("bound %d after the 8-record batch timed out, want 4", got)
	}
	throttled.Store(false)
	h.start().finish()
	h.verify()
}

// The exactly-once producer's linger (here kafka.linger 10 s, far above the
// 5 ms minimum) never delays a commit: a partial commit of a source
// transaction cut by max_records, a batch committed where the reader caught
// up, a checkpoint-only heartbeat and the final commit on SIGTERM all
// flush before EndTxn, so each lands well within the linger. A crash with
// records lingering publishes none of them. (The linger is long enough that
// a loaded machine's slow commits are not taken for it: with 2 s, three
// commits could take that long on a loaded machine.)
func TestPipelineLingerNeverDelaysCommits(t *testing.T) {
	const linger = 10 * time.Second
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 3), s.insert("order", "2", 3)) // 6 rows, max_records 4: a partial commit
	s.tx()                                                     // checkpoint only: the heartbeat commits it
	s.tx(s.insert("order", "1", 1))                            // its rows lingering at a crash
	s.tx(s.insert("order", "2", 1))                            // rows lingering at SIGTERM
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.Batch.MaxRecords = 4
		c.Kafka.Linger = linger
		c.Kafka.CheckpointInterval = 300 * time.Millisecond
	})
	a := h.start()
	began := time.Now()
	a.feed(s.through(1) - 1) // the rows: 4 make a batch (partial), 2 lingering
	cp := h.waitCheckpoint("partial", func(cp *checkpoint.Checkpoint) bool { return cp.Partial != nil && cp.Partial.Rows == 4 })
	t.Logf("partial commit after %s: %+v", time.Since(began), cp.Partial)
	a.feed(s.through(1)) // its commit, caught up
	h.waitCheckpoint("tx 1", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(1) })
	a.feed(s.through(2))
	h.waitCheckpoint("heartbeat past tx 2", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(2) })
	if d := time.Since(began); d >= linger {
		t.Errorf("three commits took %s: the producer's linger (%s) delayed them", d, linger)
	}
	a.feed(s.through(3) - 1) // tx 3's row lingering in the client, then kill -9
	if err := a.crash(); !errors.Is(err, errCrash) {
		t.Fatal(err)
	}
	b := h.start()
	b.feed(s.through(4) - 1) // tx 3, and tx 4's row lingering at SIGTERM
	began = time.Now()
	if err := b.term(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d >= linger {
		t.Errorf("SIGTERM took %s with records lingering (linger %s)", d, linger)
	}
	h.start().finish()
	h.verify()
}

// kafka.batch.max_wait applies while a source transaction with outbox rows
// is being read: its rows wait in pending and the open batch holds only
// ended transactions, which commit at max_wait, not at the open
// transaction's end or half kafka.transaction_timeout (30 s by default;
// max_wait is 200 ms). Here max_wait is 50 ms, the transaction timeout 4 s:
// tx 1 ended, then one row of tx 2, whose end is 3 s away (other tables'
// rows being read): tx 1 must be committed within a second. Latency, not
// safety.
func TestPipelineMaxWaitCommitsWhileTransactionOpen(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 1))
	s.tx(s.insert("order", "2", 1), s.insert("order", "2", 1))
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.Batch.MaxWait = 50 * time.Millisecond
		c.Kafka.TransactionTimeout = 4 * time.Second
	})
	h.batch = 0 // tx 1 and tx 2's first row in one hand-off: not caught up at tx 1's end
	a := h.start()
	a.feed(s.through(1) + 1)
	began := time.Now()
	for time.Since(began) < time.Second && h.load().GTIDSet != s.set(1) {
		time.Sleep(20 * time.Millisecond)
	}
	if cp := h.load(); cp.GTIDSet != s.set(1) {
		t.Errorf("tx 1 ended %s ago (max_wait 50 ms) and is not committed: checkpoint %q; it waits for tx 2 to end or half the transaction timeout",
			time.Since(began).Round(time.Millisecond), cp.GTIDSet)
	}
	h.waitCheckpoint("tx 1 at half the transaction timeout", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(1) })
	t.Logf("tx 1 committed %s after its end", time.Since(began).Round(time.Millisecond))
	a.finish()
	h.verify()
}

// Catching up (far behind the source), a batch waits for its bounds or for
// a quiet reader. A heartbeat says the reader is at the server's head:
// the batch commits then, not at max_wait (here an hour), whether the
// heartbeat comes in the hand-off after the transaction or in the same one.
func TestPipelineHeartbeatCommitsCatchUpBatch(t *testing.T) {
	for _, same := range []bool{true, false} {
		t.Run(map[bool]string{true: "same-hand-off", false: "next-hand-off"}[same], func(t *testing.T) {
			s := newScript("mariadb").behind()
			s.tx(s.insert("order", "1", 1))
			h := newHarness(t, s, func(c *config.Config) {
				c.Kafka.Batch.MaxWait = time.Hour
				c.Kafka.CheckpointInterval = time.Hour
			})
			a := h.start()
			hb := binlog.Event{Kind: binlog.KindHeartbeat, Time: time.Now()}
			if same {
				batch := append(append([]binlog.Event(nil), s.events...), hb)
				a.events <- batch
				a.next = len(a.todo) // the script is sent
			} else {
				a.feed(s.through(1))
				a.events <- []binlog.Event{hb}
			}
			h.waitCheckpoint("tx 1 after the heartbeat", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(1) })
			a.finish()
			h.verify()
		})
	}
}
