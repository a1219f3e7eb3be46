package relay

import (
	"context"
	"fmt"
	"github.com/rs/zerolog"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A batch cut by its size bound (catch-up) is committed without asking the
// coordinator whether it completed (each question costs the broker CPU
// that bulk catch-up needs); a batch that ends where the reader caught up
// asks, so the next small transaction does not meet the broker's 20 ms
// CONCURRENT_TRANSACTIONS back-off. Both publish every event once. One
// transaction lane: with two, the second lane also asks once before each
// of its commits whether the first lane's id is still its own (lanes.go),
// a question per two commits, not one every settlePoll.
func TestSettleOnlyWhenCaughtUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		// live: each transaction is fed once the one before is committed
		// (the reader at the head); otherwise all at once (catch-up: about
		// 15 batches cut at 10 records).
		live bool
		// askedMin/askedMax bound the DescribeTransactions questions.
		askedMin, askedMax int32
	}{
		// The initial checkpoint-only commit, the last full batch (no rows
		// behind it) and the final commit ask; the 14 full batches before
		// them do not.
		{"catch-up", false, 0, 3},
		{"caught up after each transaction", true, 30, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript("mariadb")
			for i := range 30 {
				s.tx(s.insert("order", fmt.Sprint(i), 5))
			}
			h := newHarness(t, s, func(c *config.Config) {
				maxRecords(10)(c)
				c.Kafka.TransactionLanes = 1
			})
			h.batch = 0
			asked := countDescribeTxn(h)
			a := h.start()
			if tc.live {
				for i := 1; i <= 30; i++ {
					a.feed(s.through(i))
					want := s.set(i)
					h.waitCheckpoint("through "+want, func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == want })
				}
			}
			a.finish()
			h.verify()
			if n := asked.Load(); n < tc.askedMin || n > tc.askedMax {
				t.Fatalf("DescribeTransactions asked %d times; want %d-%d", n, tc.askedMin, tc.askedMax)
			}
			t.Logf("DescribeTransactions asked %d times", asked.Load())
		})
	}
}

// countDescribeTxn counts the DescribeTransactions requests h's broker
// answers (it answers them as usual).
func countDescribeTxn(h *harness) *atomic.Int32 {
	var asked atomic.Int32
	h.kafka.ControlKey(int16(kmsg.DescribeTransactions), func(kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		asked.Add(1)
		return nil, nil, false
	})
	return &asked
}

// A small batch at the head (a row, some routing, then the reader caught up
// and the commit) goes to the broker in one produce request with its
// checkpoint record: a broker handles one request per connection at a
// time, so a second request costs a second round trip before EndTxn, in
// every transaction of a latency-bound relay. "sent at once" is the control:
// without the linger the row travels alone (the counting sees two).
func TestSmallBatchOneProduceRequest(t *testing.T) {
	for _, tc := range []struct {
		name   string
		linger []kgo.Opt // after the relay's options
		want   int32
	}{
		{"exactly-once producer", nil, 1},
		{"sent at once", []kgo.Opt{kgo.ProducerLinger(0)}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
			var produces atomic.Int32
			var first atomic.Int64 // when the first produce request after a reset arrived
			c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				if produces.Add(1) == 1 {
					first.CompareAndSwap(0, time.Now().UnixNano())
				}
				return nil, nil, false
			})
			cfg := config.Default()
			cfg.Name, cfg.Kafka.Brokers = "p", c.ListenAddrs()
			k, err := clients.NewKafka(cfg)
			if err != nil {
				t.Fatal(err)
			}
			limits := &topicLimits{}
			cl, err := kgo.NewClient(append(producerOpts(k, 0, limits, nil, nil), tc.linger...)...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx := context.Background()
			store := checkpoint.NewStore(cfg.Kafka.CheckpointTopic, k.Admin()...)
			if err := store.EnsureTopic(ctx, kadm.NewClient(cl), 1); err != nil {
				t.Fatal(err)
			}
			snk := newLane(ctx, cl, store, deliveryOptions{timeout: 10 * time.Second})
			topics := newCatalog(kadm.NewClient(cl), store.Topic(), 10*time.Second, 3, 1, zerolog.Nop(), limits, nil)
			if _, err := topics.ensure(ctx, "orders"); err != nil {
				t.Fatal(err)
			}
			// As the relay at the head: its first commit (checkpoint only) is
			// behind it, the client knows both topics.
			if err := snk.produce(outRecord{Record: &kgo.Record{Topic: "orders", Key: []byte("o-0"), Value: []byte("{}")}}); err != nil {
				t.Fatal(err)
			}
			if _, err := snk.commit(ctx, &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: "0-1-1", Flavor: "mariadb", Events: 1}, nil); err != nil {
				t.Fatal(err)
			}
			// A machine that holds the test past the linger between the row and
			// its commit (a loaded CI host) sends the row alone, as it should:
			// such an attempt proves nothing and is made again. A row that
			// reaches the broker alone before its linger has ended fails.
			const attempts = 20
			minLinger := cl.OptValue(kgo.ProducerLinger).(time.Duration)
			for i := range attempts {
				produces.Store(0)
				first.Store(0)
				start := time.Now()
				key := fmt.Sprintf("o-%d", i+1)
				if err := snk.produce(outRecord{Record: &kgo.Record{Topic: "orders", Key: []byte(key), Value: []byte("{}")}}); err != nil {
					t.Fatal(err)
				}
				if tc.linger != nil {
					// The control: the row's own request reaches the broker.
					for produces.Load() == 0 {
						runtime.Gosched()
					}
				} else {
					// The loop's work between routing the row and the commit.
					time.Sleep(200 * time.Microsecond)
				}
				cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: fmt.Sprintf("0-1-%d", i+2), Flavor: "mariadb", Events: int64(i + 2)}
				if _, err := snk.commit(ctx, cp, nil); err != nil {
					t.Fatal(err)
				}
				n := produces.Load()
				if n == tc.want {
					return
				}
				if waited := time.Duration(first.Load() - start.UnixNano()); tc.linger == nil && waited >= minLinger {
					t.Logf("attempt %d: the row's request left %v after it, past the linger: again", i+1, waited)
					continue
				}
				t.Fatalf("%d produce requests for a one-row batch and its checkpoint, want %d", n, tc.want)
			}
			t.Fatalf("%d attempts, each held past the producer's linger of %v: nothing measured", attempts, minLinger)
		})
	}
}

// Far behind the source (catch-up), the loop does not commit each time it
// catches up with the reader for a moment: that made hundreds of small
// Kafka transactions per second, each costing the broker its markers and
// transaction-log writes. Batches end at their bounds (or once the reader
// stays quiet). At the head, a batch commits as soon as the reader has
// nothing more: each transaction, handed over once the one before it is
// committed, is committed alone, with no bound, quiet window or max_wait
// reached. Both publish every event once.
func TestCatchUpCommitsAtBounds(t *testing.T) {
	const txs, bound = 200, 50
	for _, tc := range []struct {
		name     string
		behind   bool
		min, max int32 // Kafka transactions while feeding
	}{
		{"catch-up", true, 1, txs/bound + 6},
		{"at the head", false, txs, txs},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScript("mariadb")
			if tc.behind {
				s.behind()
			}
			for i := range txs {
				s.tx(s.insert("order", fmt.Sprint(i%7), 1))
			}
			h := newHarness(t, s, maxRecords(bound))
			// Wider than the reader's pace below by far: a goroutine stalled
			// for a millisecond on a busy machine is not a quiet reader. At
			// the head no quiet window may end a batch (nor max_wait, a
			// minute): only the reader having nothing more.
			h.relay.quiet = 100 * time.Millisecond
			if !tc.behind {
				h.relay.quiet = time.Minute
			}
			a := h.start()
			var commits atomic.Int32
			h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				commits.Add(1)
				return nil, nil, false
			})
			// Catching up: a transaction per hand-off, each ending where the
			// loop caught up with the reader; the reader hands the next one
			// over well within the quiet window (a reader streaming
			// history), but after a commit on kfake could end. A machine
			// that holds the reader for the quiet window between two
			// hand-offs (a loaded CI host) makes a quiet reader, whose batch
			// commits, as it should: each such stall allows one more.
			stalls := int32(0)
			last := time.Now()
			for i := 1; i <= txs; i++ {
				before := commits.Load()
				a.feed(s.through(i))
				if !tc.behind {
					// At the head: the loop has the transaction and nothing
					// more, so it commits it now (a loop that waited as if
					// catching up would wait for the bound or a minute).
					for deadline := time.Now().Add(20 * time.Second); commits.Load() == before; time.Sleep(100 * time.Microsecond) {
						if time.Now().After(deadline) {
							t.Fatalf("transaction %d of %d not committed within 20s of the loop taking it at the head, the reader having nothing more (batch bound %d, quiet window %v)",
								i, txs, bound, h.relay.quiet)
						}
					}
					continue
				}
				now := time.Now()
				if now.Sub(last) >= h.relay.quiet {
					stalls++
				}
				last = now
				// The reader's pace, not a synchronisation (a timer sleep this
				// short takes about a millisecond).
				for next := time.Now().Add(400 * time.Microsecond); time.Now().Before(next); {
					runtime.Gosched()
				}
			}
			want := s.set(txs)
			h.waitCheckpoint("through "+want, func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == want })
			n := commits.Load()
			a.finish()
			h.verify()
			if n < tc.min || n > tc.max+stalls {
				t.Fatalf("%d Kafka transactions for %d one-row transactions (batch bound %d, %d hand-offs a quiet window apart); want %d-%d",
					n, txs, bound, stalls, tc.min, tc.max+stalls)
			}
			t.Logf("%d Kafka transactions (%d hand-offs a quiet window apart)", n, stalls)
		})
	}
}

// The settle wait stays on after one DescribeTransactions answer that
// carries an error and was not a time-out, e.g. a transient
// UNKNOWN_SERVER_ERROR or a failed connection (franz-go does not retry dial
// errors) while a broker restarts. Turned off (settleOff) for the rest of
// the attempt, which lasts until the next failure (days), every transaction
// would pay the 20 ms CONCURRENT_TRANSACTIONS back-off again, silently.
func TestSettleStaysOnAfterOneTransientError(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
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
		if err := s.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.commit(ctx, cpAt("0-1-"+string(rune('0'+i)))); err != nil {
			t.Fatal(err)
		}
	}
	if s.settle.off {
		t.Errorf("one transient DescribeTransactions error (of %d asked) turned the settle wait off for the rest of the attempt (%d waits in 5 commits)",
			failed.Load(), s.settle.waits.Load())
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
			c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
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
				if err := s.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("v")}}); err != nil {
					t.Fatal(err)
				}
				if _, err := s.commit(ctx, cpAt("0-1-"+strconv.Itoa(i))); err != nil {
					t.Fatal(err)
				}
				stopped := s.settle.off || time.Now().Before(s.settle.paused)
				if want := i > tc.after; i <= tc.after+1 && stopped != want {
					t.Fatalf("after commit %d: not asking %v, want %v", i, stopped, want)
				}
			}
			if int(asked.Load()) != tc.after {
				t.Errorf("asked %d times in %d commits, want %d", asked.Load(), settleGiveUp+3, tc.after)
			}
			if refusal := tc.after == 1; s.settle.off != refusal {
				t.Errorf("settle off for the attempt %v, want %v (paused until %s)", s.settle.off, refusal, s.settle.paused.Format(time.TimeOnly))
			}
		})
	}
}

// A coordinator that answers DescribeTransactions, but slower than
// settleMax (a loaded broker; one whose transaction log partition moved
// further away): every settle wait runs out of time. The sink must give
// up asking as it does for failures; a wait that runs out must not count
// as "done" and reset settleFails, or every transaction waits the full
// 50 ms before its first produce (2.5x the 20 ms broker back-off the wait
// exists to avoid) for the whole attempt, firing up to 100
// DescribeTransactions per commit at a coordinator that is already slow.
// Here: 20 one-record commits, DescribeTransactions answered in 80 ms.
func TestSettleGivesUpOnSlowDescribeTransactions(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
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
		if err := s.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		waited += time.Since(began)
		if _, err := s.commit(ctx, cpAt("0-1-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d commits: first produces waited %s in all (%s each), %d DescribeTransactions, settle off %v",
		n, waited, waited/n, asked.Load(), s.settle.off)
	if !s.settle.off && waited > n*settleMax*3/4 {
		t.Errorf("a coordinator slower than settleMax is asked forever: each transaction waited %s before its first produce (the broker's back-off is 20 ms)", waited/n)
	}
}

// A coordinator briefly unavailable (COORDINATOR_LOAD_IN_PROGRESS
// for settleGiveUp questions in a row) does not turn the settle wait off:
// kadm retries the retriable answer within the 50 ms wait.
func TestSettleSurvivesBriefCoordinatorUnavailability(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
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
		if err := s.produce(ctx, outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.commit(ctx, cpAt("0-1-"+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("asked %d, waits %d, fails %d, off %v", failed.Load(), s.settle.waits.Load(), s.settle.fails, s.settle.off)
	if s.settle.off {
		t.Errorf("%d retriable COORDINATOR_LOAD_IN_PROGRESS answers in a row turned the settle wait off for the rest of the attempt; the coordinator answered normally for the next 20 commits and was never asked again (%d waits)",
			settleGiveUp, s.settle.waits.Load())
	}
}

// Live traffic at the head whose transactions fill a batch exactly
// (rows == kafka.batch.max_records, or the halved limit after ack
// time-outs, or large rows reaching max_bytes): the reader is caught up
// after every transaction, so the batch asks the coordinator even when
// full; otherwise every next transaction meets the broker's 20 ms
// CONCURRENT_TRANSACTIONS back-off.
func TestSettleAtHeadWhenBatchFull(t *testing.T) {
	s := newScript("mariadb")
	for i := range 10 {
		s.tx(s.insert("order", fmt.Sprint(i), 10)) // exactly max_records rows
	}
	h := newHarness(t, s, maxRecords(10))
	h.batch = 0
	asked := countDescribeTxn(h)
	a := h.start()
	for i := 1; i <= 10; i++ {
		a.feed(s.through(i))
		want := int64(10 * i)
		h.waitCheckpoint(fmt.Sprint(want, " events"), func(cp *checkpoint.Checkpoint) bool { return cp.Events >= want })
	}
	a.finish()
	h.verify()
	if n := asked.Load(); n < 10 {
		t.Fatalf("reader caught up after each of 10 transactions, but DescribeTransactions asked only %d times: no settle at the head", n)
	}
}
