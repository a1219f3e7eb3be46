package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Catch-up with two lanes: the records held behind a batch in flight (here
// 5,200, routed while the broker holds the batch's first produce request)
// go to the broker as they are released into the other lane, a chunk at a
// time, not when the producer's linger (here a minute) ends or their own
// commit flushes them: that commit is not due before the stop signal (the
// batch is under its bound, and max_wait and the catch-up quiet window are a
// minute), yet the other lane's produce requests arrive before it. Two
// transactions at the source's head come first, one committed by each lane:
// a client's first records to a topic wait for its partitions and then for
// the linger (sendNow does not reach them), once per lane and attempt.
func TestLanesReleaseSendsHeldRecords(t *testing.T) {
	s := newScript("mariadb")
	s.tx(s.insert("alarm", "a", 1))
	s.tx(s.insert("alarm", "b", 1))
	s.behind() // the rest is an hour old: catch-up
	for i := range 75 {
		s.tx(s.insert("alarm", []string{"a", "b", "c"}[i%3], 200))
	}
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.Batch.MaxRecords = 10000
		c.Kafka.Linger = time.Minute
	})
	h.batch = 20
	h.relay.quiet = time.Minute // the first batch is due at its bound, 10,000 rows
	a := h.start()
	if a.lane == nil {
		t.Fatal("the attempt has one lane: two are the default")
	}
	for n := 1; n <= 2; n++ { // each head transaction alone: committed at once, by the next lane
		a.feed(s.through(n))
		h.waitCheckpoint("of the head transactions", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s.set(n) })
	}
	laneID, _ := a.lane.cl.OptValue(kgo.TransactionalID).(string)
	fed := make(chan struct{})
	var feeding sync.Once
	defer feeding.Do(func() { close(fed) }) // a failed test does not leave the broker's request asleep
	var first atomic.Value                  // the transactional id of the first produce request
	var slowed atomic.Bool
	var produced sync.Map // transactional id -> true
	h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		p := req.(*kmsg.ProduceRequest)
		if p.TransactionID == nil {
			return nil, nil, false
		}
		produced.Store(*p.TransactionID, true)
		if slowed.CompareAndSwap(false, true) {
			// The first batch's flush is answered once the loop has routed
			// every row: the next batch's rows are held meanwhile.
			first.Store(*p.TransactionID)
			h.kafka.SleepControl(func() { <-fed })
		}
		return nil, nil, false
	})
	a.feedAll()
	// Every transaction routed (the last hand-off is taken, not yet routed,
	// when feedAll returns): the first batch's flush may end now.
	eventually(t, "77 source transactions routed", func() bool {
		return testutil.ToFloat64(h.relay.metrics.SourceTransactions) >= 77
	})
	feeding.Do(func() { close(fed) })
	eventually(t, "the first batch's flush (its produce request)", func() bool { return first.Load() != nil })
	other := laneID
	if first.Load() == laneID {
		other = h.cfg.Name
	}
	// Within the deadline, well under the linger: only a send on release
	// gets the records out before their commit.
	eventually(t, "a produce request of "+other+" after the first batch's flush (the records released into it must not linger)", func() bool {
		_, ok := produced.Load(other)
		return ok
	})
	if err := a.term(); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	h.verify()
}

// sendNow relies on franz-go's Flush ending every partition's linger before
// it waits: with a linger of a minute, no produce request leaves before
// sendNow, one leaves at once after it, and sendNow returns while the broker
// has not answered; the same for a record produced after it (lingering
// anew).
func TestSinkSendNow(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var requests atomic.Int32
	arrived := make(chan struct{}, 10)
	release := make(chan struct{})
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		requests.Add(1)
		arrived <- struct{}{}
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s := &sink{cl: cl}
	for i := range 2 {
		acked := make(chan error, 1)
		cl.Produce(context.Background(), &kgo.Record{Topic: "data", Value: []byte("v")}, func(_ *kgo.Record, err error) { acked <- err })
		time.Sleep(100 * time.Millisecond) // a negative check: nothing may leave in this time
		if n := requests.Load(); n != int32(i) {
			t.Fatalf("record %d: %d produce requests before sendNow, want %d: the linger is not in force", i, n, i)
		}
		returned := make(chan struct{})
		go func() { s.sendNow(); close(returned) }()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatalf("record %d: sendNow waits for the broker's answer", i)
		}
		select {
		case <-arrived:
		case <-time.After(10 * time.Second):
			t.Fatalf("record %d: no produce request within 10 s of sendNow: still lingering", i)
		}
		if i == 0 {
			close(release)
		}
		select {
		case err := <-acked:
			if err != nil {
				t.Fatalf("record %d: %v", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("record %d not acknowledged", i)
		}
	}
}
