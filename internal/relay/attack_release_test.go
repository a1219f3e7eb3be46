package relay

// Adversarial review of sendNow in produceHeld (commit.go): the records
// released into the other lane (or, with one lane, produced after the
// commit) go to the broker a releaseChunk at a time. These disturb the
// pipeline while such a chunk is in flight.

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

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// TestAttackRelease: a catch-up (15,000 rows, batches up to 10,000, a
// linger of a minute so that only sendNow and commit flushes send
// records), the first commit's flush slowed so that thousands of records
// are held and then released in chunks. The first produce request that
// carries no checkpoint record (a chunk sendNow sent) after the slowed one
// is disturbed; the attempt ends (or not), the next one from the committed
// checkpoint reads to the end, and a read_committed consumer sees every
// row exactly once, in order.
func TestAttackRelease(t *testing.T) {
	for _, lanes := range []int{2, 1} {
		for _, how := range []string{"partition-error", "txn-abortable", "conn-drop", "fence", "sigterm", "crash", "lease-lost", "too-large"} {
			t.Run(fmt.Sprintf("%s/lanes=%d", how, lanes), func(t *testing.T) {
				t.Parallel()
				attackRelease(t, lanes, how)
			})
		}
	}
}

func attackRelease(t *testing.T, lanes int, how string) {
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
		ls                   *lease
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
		ls = newLease(context.Background())
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
		cl, cerr := kgo.NewClient(append(h.relay.kopts, kgo.TransactionalID(id))...)
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
		ls.lose("test")
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
		if !errors.Is(err, ErrLeaseLost) {
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

// TestAttackReleaseManyChunks: a batch of 30,000 held records (15 chunks)
// behind a commit slowed for a second, with one and two lanes: all
// published once and in order (that the goroutines sendNow's Flush starts
// end is TestAttackSendNowConcurrentFlush's).
func TestAttackReleaseManyChunks(t *testing.T) {
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

// TestAttackSendNowConcurrentFlush: sendNow on a client while another
// goroutine's Flush (a real one, with time) waits for records the broker
// holds: the real Flush must not return before every record is
// acknowledged (the cancelled Flush's Broadcast and its flushing count must
// not end it early), and must return once they are (no hang); the
// goroutines sendNow's Flush starts all end.
func TestAttackSendNowConcurrentFlush(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
				(&sink{cl: cl}).sendNow()
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
