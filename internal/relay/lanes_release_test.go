package relay

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
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
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "data"))
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
	s := &producer{cl: cl}
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

// TestLanesReleaseDisturbedChunk: a catch-up (15,000 rows, batches up to 10,000, a
// linger of a minute so that only sendNow and commit flushes send
// records), the first commit's flush slowed so that thousands of records
// are held and then released in chunks. The first produce request that
// carries no checkpoint record (a chunk sendNow sent) after the slowed one
// is disturbed; the attempt ends (or not), the next one from the committed
// checkpoint reads to the end, and a read_committed consumer sees every
// row exactly once, in order.
func TestLanesReleaseDisturbedChunk(t *testing.T) {
	realTime(t)
	for _, lanes := range []int{2, 1} {
		for _, how := range []string{"partition-error", "txn-abortable", "conn-drop", "fence", "sigterm", "crash", "lease-lost", "too-large"} {
			t.Run(fmt.Sprintf("%s/lanes=%d", how, lanes), func(t *testing.T) {
				t.Parallel()
				releaseDisturbed(t, lanes, how)
			})
		}
	}
}

func releaseDisturbed(t *testing.T, lanes int, how string) {
	s := newScript("mariadb").behind()
	for i := range 75 {
		s.tx(s.insert("alarm", []string{"a", "b", "c"}[i%3], 200))
	}
	h := newHarness(t, s, func(c *config.Config) {
		c.Kafka.Batch.MaxRecords = 10000
		c.Kafka.Linger = time.Minute
		c.Kafka.TransactionLanes = lanes
	})
	h.batch = 20
	var (
		armed, slowed, fired atomic.Bool
		firedOn              atomic.Value // transactional id of the disturbed request
		chunks               atomic.Int32 // produce requests without a checkpoint record
		reached              = make(chan struct{})
		proceed              = make(chan struct{})
		a                    *attempt
		ls                   *ha.Lease
	)
	cpTopic := h.relay.store.Topic()
	h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		p := req.(*kmsg.ProduceRequest)
		if p.TransactionID == nil {
			return nil, nil, false
		}
		if !armed.Load() {
			return nil, nil, false
		}
		if slowed.CompareAndSwap(false, true) {
			h.kafka.SleepControl(func() { time.Sleep(300 * time.Millisecond) })
			return nil, nil, false
		}
		for _, tp := range p.Topics {
			if tp.Topic == cpTopic {
				return nil, nil, false
			}
		}
		chunks.Add(1)
		if !fired.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		firedOn.Store(*p.TransactionID)
		close(reached)
		switch how {
		case "partition-error", "txn-abortable", "too-large":
			code := map[string]int16{"partition-error": kerr.UnknownServerError.Code,
				"txn-abortable": kerr.TransactionAbortable.Code, "too-large": kerr.MessageTooLarge.Code}[how]
			resp := p.ResponseKind().(*kmsg.ProduceResponse)
			for _, tp := range p.Topics {
				rt := kmsg.NewProduceResponseTopic()
				rt.Topic = tp.Topic
				for _, pp := range tp.Partitions {
					rp := kmsg.NewProduceResponseTopicPartition()
					rp.Partition = pp.Partition
					rp.ErrorCode = code
					rp.BaseOffset = -1
					rt.Partitions = append(rt.Partitions, rp)
				}
				resp.Topics = append(resp.Topics, rt)
			}
			return resp, nil, true
		case "conn-drop":
			return nil, errors.New("connection dropped (test)"), true
		case "fence", "crash", "sigterm", "lease-lost":
			// The test goroutine acts while this request is held.
			h.kafka.SleepControl(func() { <-proceed })
		}
		return nil, nil, false
	})
	if how == "lease-lost" {
		ls = ha.NewLease(context.Background())
		a = h.startLeased(ls)
	} else {
		a = h.start()
	}
	armed.Store(true) // after the initial checkpoint
	fed := make(chan struct{})
	go func() { defer close(fed); a.feedAll() }()
	select {
	case <-reached:
	case <-a.done:
		t.Fatalf("the attempt ended before a chunk was sent: %v", a.err)
	case <-time.After(30 * time.Second):
		t.Fatal("no chunk sent within 30s: the scenario is not exercised")
	}
	t.Logf("disturbed a chunk of %v", firedOn.Load())
	var err error
	crashed := false
	switch how {
	case "fence":
		id := firedOn.Load().(string)
		cl, cerr := kgo.NewClient(append(h.relay.kafka.Admin(), kgo.TransactionalID(id))...)
		if cerr != nil {
			t.Fatal(cerr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, _, ierr := cl.ProducerID(ctx)
		cancel()
		cl.Close()
		if ierr != nil {
			t.Fatal(ierr)
		}
		close(proceed)
	case "sigterm":
		a.cancel()
		close(proceed)
	case "crash":
		a.readErr <- errCrash
		close(proceed)
		crashed = true
	case "lease-lost":
		ls.Lose("test")
		close(proceed)
	}
	// The attempt ends, or commits the whole script (franz-go retried the
	// request, or sent its records again): then SIGTERM.
	deadline := time.Now().Add(40 * time.Second)
	for a.running() {
		if time.Now().After(deadline) {
			var stacks strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
			t.Fatalf("the attempt neither ended nor committed the script; goroutines:\n%s", stacks.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cp, lerr := h.relay.store.WithStableWait(10*time.Millisecond).Load(ctx, h.cfg.Name)
		cancel()
		if lerr == nil && cp != nil && cp.GTIDSet == s.end() {
			a.cancel()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	err = a.end(crashed)
	<-fed
	t.Logf("first attempt (%d chunks without a checkpoint): %v", chunks.Load(), err)
	switch how {
	case "sigterm", "conn-drop":
		if err != nil {
			t.Errorf("%s: the attempt ended with %v, want nil", how, err)
		}
	case "lease-lost":
		if !errors.Is(err, ha.ErrLeaseLost) {
			t.Errorf("lease lost: %v", err)
		}
	case "fence":
		if !errors.Is(err, ErrFenced) {
			t.Errorf("fenced: %v", err)
		}
	}
	// Whatever a read_committed reader sees now is exactly what the
	// committed checkpoint covers.
	if cp := h.load(); cp != nil {
		h.verifyPublished(s.want[:cp.Events])
	}
	h.kafka.DropControl()
	h.start().finish()
	h.verify()
}

// TestLanesReleaseManyChunks: a batch of 30,000 held records (15 chunks)
// behind a commit slowed for a second, with one and two lanes: all
// published once and in order (that the goroutines sendNow's Flush starts
// end is TestSendNowConcurrentFlush's).
func TestLanesReleaseManyChunks(t *testing.T) {
	realTime(t)
	for _, lanes := range []int{2, 1} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			s := newScript("mariadb").behind()
			for i := range 150 {
				s.tx(s.insert("alarm", []string{"a", "b", "c", "d", "e"}[i%5], 200))
			}
			h := newHarness(t, s, func(c *config.Config) {
				c.Kafka.Batch.MaxRecords = 40000
				c.Kafka.TransactionLanes = lanes
				c.Kafka.Linger = time.Minute
			})
			h.batch = 0
			var armed, slowed atomic.Bool
			var during, requests atomic.Int32
			h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				if req.(*kmsg.ProduceRequest).TransactionID != nil {
					requests.Add(1)
					if armed.Load() && slowed.CompareAndSwap(false, true) {
						h.kafka.SleepControl(func() { time.Sleep(time.Second) })
					}
				}
				return nil, nil, false
			})
			a := h.start()
			armed.Store(true)
			a.feed(s.through(1))
			eventually(t, "the first commit's flush held", slowed.Load)
			a.feed(len(s.events))
			during.Store(requests.Load())
			if err := a.term(); err != nil {
				t.Fatal(err)
			}
			h.verify()
			t.Logf("%d transactional produce requests, %d before the reader was done", requests.Load(), during.Load())
		})
	}
}

// TestSendNowConcurrentFlush: sendNow on a client while another
// goroutine's Flush (a real one, with time) waits for records the broker
// holds: the real Flush must not return before every record is
// acknowledged (the cancelled Flush's Broadcast and its flushing count must
// not end it early), and must return once they are (no hang); the
// goroutines sendNow's Flush starts all end.
func TestSendNowConcurrentFlush(t *testing.T) {
	c := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	release := make(chan struct{})
	var held atomic.Int32
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		held.Add(1)
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerLinger(time.Minute),
		kgo.TransactionalID("t"), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	var firstErr atomic.Value
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			firstErr.CompareAndSwap(nil, err)
		}
	}
	var acked atomic.Int32
	const n = 3000
	for range n {
		cl.Produce(context.Background(), &kgo.Record{Topic: "data", Value: []byte("v")}, func(r *kgo.Record, err error) {
			promise(r, err)
			acked.Add(1)
		})
	}
	base := runtime.NumGoroutine()
	flushed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		flushed <- cl.Flush(ctx)
	}()
	eventually(t, "a produce request held at the broker", func() bool { return held.Load() > 0 })
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				(&producer{cl: cl}).sendNow()
			}
		}()
	}
	wg.Wait()
	select {
	case err := <-flushed:
		t.Fatalf("the real Flush returned (%v) with %d of %d records acknowledged", err, acked.Load(), n)
	case <-time.After(200 * time.Millisecond):
	}
	if err := firstErr.Load(); err != nil {
		t.Fatalf("record error after sendNow: %v", err)
	}
	close(release)
	select {
	case err := <-flushed:
		if err != nil {
			t.Fatalf("real Flush: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the real Flush hangs after sendNow")
	}
	if got := acked.Load(); got != n {
		t.Fatalf("Flush returned with %d of %d records acknowledged", got, n)
	}
	if err := firstErr.Load(); err != nil {
		t.Fatalf("record error: %v", err)
	}
	eventually(t, "sendNow's goroutines end", func() bool { return runtime.NumGoroutine() <= base+10 })
	if err := cl.EndTransaction(context.Background(), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}
