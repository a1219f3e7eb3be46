package relay

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Two lanes (the default): Kafka transactions alternate between the
// pipeline's two transactional ids, the next batch's records going out while
// the one before commits. Every row is published once, each aggregate in
// commit order (verify), and both lanes committed batches. One lane: only
// the pipeline's name is used.
func TestLanesKeepOrder(t *testing.T) {
	for _, lanes := range []int{2, 1, -2} {
		t.Run(map[int]string{1: "one lane", 2: "two lanes", -2: "two lanes, first slow"}[lanes], func(t *testing.T) {
			slow := lanes < 0
			lanes = max(lanes, -lanes)
			s := newScript("mariadb")
			for i := range 60 {
				// Two aggregates, each written by many transactions: their
				// order is checked across the lanes.
				s.tx(s.insert("alarm", []string{"a", "b"}[i%2], 1+i%3))
			}
			h := newHarness(t, s, func(c *config.Config) { c.Kafka.TransactionLanes = lanes })
			if slow {
				// Every produce request of the first lane is answered 30 ms
				// late: records of the next batch sent before the answer
				// would land before the batch's own.
				h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
					h.kafka.KeepControl()
					if id := req.(*kmsg.ProduceRequest).TransactionID; id != nil && *id == h.cfg.Name {
						h.kafka.SleepControl(func() { time.Sleep(30 * time.Millisecond) })
					}
					return nil, nil, false
				})
			}
			a := h.start()
			a.feed(s.through(30))
			if lanes == 2 && a.lane == nil {
				t.Fatal("two lanes configured, the attempt has one")
			}
			a.finish()
			h.verify()
			if lanes == 1 {
				if a.lane != nil {
					t.Fatal("one lane configured, the attempt has two")
				}
				return
			}
			if a.first.cpOffset.Load() < 0 || a.lane.cpOffset.Load() < 0 {
				t.Fatalf("checkpoint offsets by lane %d, %d: want both lanes to have committed", a.first.cpOffset.Load(), a.lane.cpOffset.Load())
			}
			// Attempts after a crash with both lanes open start from the
			// committed checkpoint and publish the rest once.
			s.tx(s.insert("alarm", "a", 2))
			s.tx(s.insert("alarm", "b", 2))
			b := h.start()
			b.feed(s.through(61))
			if err := b.crash(); err == nil {
				t.Fatal("crash: no error")
			}
			h.start().finish()
			h.verify()
		})
	}
}

// A relay started with one lane after a run with two initialises the second
// transactional id too: a transaction a crashed instance left open under it
// (holding back the checkpoint topic) is aborted at once, not after the
// broker's transaction timeout, and its records are never visible.
func TestOneLaneAbortsSecondLanesTransaction(t *testing.T) {
	s := newScript("mariadb")
	for range 5 {
		s.tx(s.insert("alarm", "a", 1))
	}
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.TransactionLanes = 1
		c.Kafka.TransactionTimeout = 10 * time.Minute // the broker would not abort it in time
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	left, err := kgo.NewClient(append(h.relay.kafka.Admin(), kgo.TransactionalID(checkpoint.TransactionalIDs(h.cfg.Name)[1]),
		kgo.TransactionTimeout(10*time.Minute))...)
	if err != nil {
		t.Fatal(err)
	}
	defer left.Close()
	if err := h.relay.store.EnsureTopic(ctx, kadm.NewClient(left), 1); err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(left).CreateTopic(ctx, 3, 1, nil, h.cfg.Router.TopicPrefix+"alarm"); err != nil {
		t.Fatal(err)
	}
	if err := left.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	stale := &checkpoint.Checkpoint{Name: h.cfg.Name, GTIDSet: s.set(5), Flavor: "mariadb"}
	invented := &kgo.Record{Topic: h.cfg.Router.TopicPrefix + "alarm", Key: []byte("a"),
		Value: []byte(payload("invented")), Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("invented")}}}
	if err := left.ProduceSync(ctx, h.relay.store.Record(stale), invented).FirstErr(); err != nil {
		t.Fatal(err)
	}
	a := h.start() // fails the test when the checkpoint topic stays held back
	if a.cp != nil {
		t.Fatalf("loaded %+v: the open transaction's checkpoint became visible", a.cp)
	}
	a.finish()
	h.verify() // "invented" is not among the records
	if err := left.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Fatal("the left-over transaction of the second lane committed after the relay started")
	}
}

// A coordinator that answers every DescribeTransactions with a passing
// error (loading): the second lane's question before each commit is bounded
// (checkMax) and lets the commit go on; it does not hold the commit while
// the first lane's next transaction runs into a short transaction timeout.
func TestLanesCheckUnansweredDoesNotStall(t *testing.T) {
	s := newScript("mariadb")
	for i := range 30 {
		s.tx(s.insert("alarm", []string{"a", "b"}[i%2], 1))
	}
	h := newHarness(t, s, func(c *config.Config) { c.Kafka.TransactionTimeout = time.Second })
	var asked atomic.Int32
	h.kafka.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		asked.Add(1)
		return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
			st.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		}), nil, true
	})
	a := h.start()
	began := time.Now()
	a.finish() // fails the test on an error (a transaction timed out)
	h.verify()
	if asked.Load() == 0 {
		t.Fatal("DescribeTransactions was never asked: the scenario is not exercised")
	}
	if a.lane.check.fails == 0 && a.lane.check.paused.IsZero() {
		t.Error("no failed check counted: the second lane never asked")
	}
	t.Logf("30 transactions in %s, %d questions", time.Since(began).Round(time.Millisecond), asked.Load())
}

// committedAs.ours: the coordinator's state of the first lane's id after
// this instance's commit, as Apache Kafka reports it under transaction
// protocol v2 (and v1), against another producer's InitProducerID.
func TestCommittedAsOurs(t *testing.T) {
	bump := committedAs{before: producerEpoch{7, 4}, after: producerEpoch{7, 5}}       // v2: EndTxn bumped
	same := committedAs{before: producerEpoch{7, 4}, after: producerEpoch{7, 4}}       // v1: no bump
	rotate := committedAs{before: producerEpoch{7, 32766}, after: producerEpoch{9, 0}} // v2 at the last epoch
	for _, tc := range []struct {
		name  string
		c     committedAs
		state producerEpoch
		want  bool
	}{
		{"v2 complete", bump, producerEpoch{7, 5}, true},
		{"v2 still preparing", bump, producerEpoch{7, 4}, true},
		{"v2 fenced", bump, producerEpoch{7, 6}, false},
		{"v1 complete", same, producerEpoch{7, 4}, true},
		{"v1 fenced", same, producerEpoch{7, 5}, false},
		{"rotation preparing: old id, bumped", rotate, producerEpoch{7, 32767}, true},
		{"rotation complete: new id", rotate, producerEpoch{9, 0}, true},
		{"rotation then fenced", rotate, producerEpoch{9, 1}, false},
		{"another producer id", bump, producerEpoch{8, 0}, false},
	} {
		if got := tc.c.ours(tc.state); got != tc.want {
			t.Errorf("%s: ours(%+v) = %v, want %v", tc.name, tc.state, got, tc.want)
		}
	}
}

// A DescribeTransactions of the name that gets no answer in time (the
// coordinator loading after it moved: COORDINATOR_LOAD_IN_PROGRESS, retried
// by franz-go; or no answer at all) lets the second lane's commit go on
// after checkMax (lanes.go): the question has a client of its own, so an
// unanswered one never holds the EndTxn behind it on the same connection
// until the commit's time runs out.
func TestLanesSlowQuestionLetsCommitGoOn(t *testing.T) {
	realTime(t)
	for _, mode := range []string{"loading", "hang"} {
		t.Run(mode, func(t *testing.T) { slowQuestion(t, mode) })
	}
}

func slowQuestion(t *testing.T, mode string) {
	s := newScript("mariadb")
	for range 4 {
		s.tx(s.insert("order", "1", 1))
	}
	h := newHarness(t, s, nil)
	name := h.cfg.Name
	var loadingUntil atomic.Int64
	var asked atomic.Int32
	h.kafka.ControlKey(int16(kmsg.DescribeTransactions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		r := req.(*kmsg.DescribeTransactionsRequest)
		if len(r.TransactionalIDs) == 1 && r.TransactionalIDs[0] == name && time.Now().UnixNano() < loadingUntil.Load() {
			asked.Add(1)
			if mode == "hang" {
				h.kafka.SleepControl(func() { // until the load ends (the test may end it early)
					for time.Now().UnixNano() < loadingUntil.Load() {
						time.Sleep(10 * time.Millisecond)
					}
				})
				return nil, nil, false
			}
			return describeTxnAnswer(req, func(st *kmsg.DescribeTransactionsResponseTransactionState) {
				st.ErrorCode = kerr.CoordinatorLoadInProgress.Code
			}), nil, true
		}
		return nil, nil, false
	})
	a := h.start()
	a.feed(s.through(2)) // initial checkpoint on lane 1, tx 1 on lane 2, tx 2 on lane 1
	h.waitCheckpoint("at 2", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(2) })

	// The name's coordinator is loading for a while (a move, a broker
	// restart); the second lane's own coordinator answers.
	loadingUntil.Store(time.Now().Add(h.cfg.Kafka.RequestTimeout + time.Second).UnixNano())
	began := time.Now()
	a.feed(s.through(3)) // lane 2
	eventually(t, "the second lane commits or the attempt ends", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cp, err := h.relay.store.WithStableWait(10*time.Millisecond).Load(ctx, name)
		return !a.running() || err == nil && cp.GTIDSet == s.set(3)
	})
	t.Logf("after %s: %d DescribeTransactions of the name (%s)", time.Since(began).Round(time.Millisecond), asked.Load(), mode)
	if !a.running() {
		err := a.wait()
		t.Errorf("(%s) the second lane's question got no answer in time, which is documented to let the commit go on (after checkMax); the commit failed instead and ended the attempt: %v", mode, err)
	}
	// The coordinator is back before the stop: its final commit goes to
	// the coordinator the settle wait asked about the first lane, which
	// under "hang" holds that connection's requests (the EndTxn among
	// them) until the load ends.
	loadingUntil.Store(0)
	dropControlAndFinish(h, a)
}
