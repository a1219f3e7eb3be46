package relay

// A lane's first commit of a topic is proved (laneproof.go): a commit the
// broker never received is never reported committed, and the proof costs
// nothing once each topic's first commit is proved.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// With two lanes, the second lane's first commit of an attempt answered
// success without the broker seeing it (franz-go ends a transaction without
// EndTxn when it raced the client's first metadata of its topics) is not
// reported committed: the attempt ends, and the first lane never commits a
// checkpoint covering the batch. Without the proof the first lane's next
// commit stored a checkpoint past it, the source went idle, the relay
// stopped, and the restart's fencing aborted the batch: its events were
// never published.
func TestLanesFirstCommitTheBrokerNeverReceivedIsNotReported(t *testing.T) {
	for _, stop := range []string{"term", "crash"} {
		t.Run(stop, func(t *testing.T) {
			s := newScript("mariadb")
			for i := range 4 {
				s.tx(s.insert("order", fmt.Sprint(i), 2))
			}
			h := newHarness(t, s, func(c *config.Config) { c.Kafka.RequestTimeout = 2 * time.Second })
			dropped := kafkatest.DropCommit(h.kafka, h.cfg.Name+"#2")
			a := h.start() // the initial checkpoint: the first lane
			a.feed(s.through(2))
			// The source goes idle once the first lane committed the second
			// batch (or the attempt ended); the relay is stopped.
			eventually(t, "the second batch committed or the attempt ended", func() bool {
				return eventsTotal(t, h) == 4 || !a.running()
			})
			var err error
			if stop == "term" {
				err = a.term()
			} else {
				err = a.crash()
			}
			if !dropped.Load() {
				t.Fatal("the second lane's commit never reached the broker's control")
			}
			if !errors.Is(err, errNotProved) || !strings.Contains(err.Error(), "commit kafka transaction: not proved committed") {
				t.Errorf("attempt whose second lane's commit never reached the broker ended with %v, want not proved committed", err)
			}
			// Restarted: its fencing aborts the transaction left open; every
			// event is published once.
			h.start().finish()
			h.verify()
		})
	}
}

// A lane's first commit while another pipeline's open transaction holds
// the shared checkpoint topic back is reported once the partition holds
// its commit marker: the proof does not end the attempt of a healthy
// pipeline beside a slow one.
func TestLanesFirstCommitHeldBackByAnotherPipelineIsReported(t *testing.T) {
	s := newScript("mariadb")
	for i := range 3 {
		s.tx(s.insert("order", fmt.Sprint(i), 1))
	}
	h := newHarness(t, s, func(c *config.Config) { c.Kafka.RequestTimeout = time.Second })
	a := h.start() // the initial checkpoint: the first lane's proof
	other := holdCheckpointTopic(t, h)
	ctx := context.Background()
	// Both lanes' first commits of the data topic (the second lane's of the
	// checkpoint topic too) behind the open transaction.
	a.feed(s.through(2))
	eventually(t, "the batches committed behind the open transaction, or the attempt ended", func() bool {
		return eventsTotal(t, h) == 2 || !a.running()
	})
	if !a.running() {
		t.Fatalf("the attempt ended: %v", a.wait())
	}
	if err := other.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	a.finish()
	h.verify()
}

// The proof runs on a lane's first commit of each topic only (the data
// topic and the checkpoint topic, per lane): later commits ask nothing
// more of the brokers. One lane and two.
func TestLanesProveOnlyTheFirstCommitOfATopic(t *testing.T) {
	for _, lanes := range []int{1, 2} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			s := newScript("mariadb")
			for i := range 8 {
				s.tx(s.insert("order", fmt.Sprint(i), 1))
			}
			h := newHarness(t, s, func(c *config.Config) { c.Kafka.TransactionLanes = lanes })
			var asked atomic.Int32 // read_committed ListOffsets: the proof's question
			h.kafka.ControlKey(int16(kmsg.ListOffsets), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				if req.(*kmsg.ListOffsetsRequest).IsolationLevel == 1 {
					asked.Add(1)
				}
				return nil, nil, false
			})
			a := h.start()
			// Every lane commits a batch of the data topic.
			a.feed(s.through(lanes))
			eventually(t, "the first batches committed", func() bool { return eventsTotal(t, h) == float64(lanes) })
			first := asked.Load()
			if first == 0 {
				t.Fatal("the first commits were not proved (no read_committed ListOffsets)")
			}
			a.feed(s.through(8))
			eventually(t, "every batch committed", func() bool { return eventsTotal(t, h) == 8 })
			if n := asked.Load(); n != first {
				t.Errorf("%d read_committed ListOffsets after the first commits, %d before: later commits were proved again", n, first)
			}
			for i, ln := range []*lane{a.first, a.lane} {
				if ln == nil {
					continue
				}
				if n := len(ln.topics.proved); n != 2 {
					t.Errorf("lane %d proved %d topics %v, want the data topic and the checkpoint topic", i+1, n, ln.topics.proved)
				}
			}
			if err := a.term(); err != nil {
				t.Fatal(err)
			}
			h.verify()
		})
	}
}

// BenchmarkLaneTopicsNote is what the proof costs a produced record: a
// comparison when it goes to the topic of the record before, a map lookup
// when the topic changes (alternating).
func BenchmarkLaneTopicsNote(b *testing.B) {
	for _, topics := range [][]string{{"outbox.event.order"}, {"outbox.event.order", "outbox.event.payment"}} {
		b.Run(fmt.Sprintf("topics=%d", len(topics)), func(b *testing.B) {
			var t laneTopics
			t.proved = map[string]struct{}{}
			for _, topic := range topics {
				t.proved[strings.Clone(topic)] = struct{}{}
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				t.note(topics[i%len(topics)])
			}
			if len(t.fresh) != 0 {
				b.Fatalf("fresh %v, every topic proved", t.fresh)
			}
		})
	}
}

// A lane's first commit held back by another pipeline's open transaction
// on the shared checkpoint topic (a pipeline that crashed mid-commit holds
// it up to its kafka.transaction_timeout) is reported as soon as its
// commit marker is in the partition, not after kafka.request_timeout:
// otherwise every attempt's start stalls a request timeout per lane.
func TestLanesFirstCommitHeldBackIsReportedWithoutWaitingTheRequestTimeout(t *testing.T) {
	const timeout = 8 * time.Second
	s := newScript("mariadb")
	for i := range 3 {
		s.tx(s.insert("order", fmt.Sprint(i), 1))
	}
	h := newHarness(t, s, func(c *config.Config) { c.Kafka.RequestTimeout = timeout })
	a := h.start()
	other := holdCheckpointTopic(t, h)
	ctx := context.Background()
	began := time.Now()
	a.feed(s.through(2)) // both lanes' first commits of the data topic
	eventually(t, "the batches committed behind the open transaction, or the attempt ended", func() bool {
		return eventsTotal(t, h) == 2 || !a.running()
	})
	took := time.Since(began)
	if err := other.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if !a.running() {
		t.Fatalf("the attempt ended: %v", a.wait())
	}
	if took >= timeout/2 {
		t.Errorf("the first commits behind another pipeline's open transaction took %s (kafka.request_timeout %s): the proof waited for visibility instead of finding the commit markers", took.Round(time.Millisecond), timeout)
	}
	a.finish()
	h.verify()
}

// A lane's first commit that the client answered success while it ended
// the transaction with an abort (franz-go under KIP-890 part 2 aborts a
// commit when it knows of no partition written in it) is not reported
// committed: the attempt ends, and every event is published once.
func TestLanesFirstCommitTheBrokerAbortedIsNotReported(t *testing.T) {
	s := newScript("mariadb")
	for i := range 4 {
		s.tx(s.insert("order", fmt.Sprint(i), 2))
	}
	h := newHarness(t, s, func(c *config.Config) { c.Kafka.RequestTimeout = 2 * time.Second })
	id := h.cfg.Name + "#2"
	var flipped atomic.Bool
	h.kafka.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		if end := req.(*kmsg.EndTxnRequest); end.TransactionalID == id && end.Commit && !flipped.Load() {
			flipped.Store(true)
			end.Commit = false // aborted; the client answers its caller success
		}
		return nil, nil, false
	})
	a := h.start()
	a.feed(s.through(2))
	eventually(t, "the second batch committed or the attempt ended", func() bool {
		return eventsTotal(t, h) == 4 || !a.running()
	})
	err := a.term()
	if !flipped.Load() {
		t.Fatal("the second lane's commit never reached the broker's control")
	}
	if !errors.Is(err, errNotProved) {
		t.Errorf("attempt whose second lane's first commit the broker aborted ended with %v, want not proved committed", err)
	}
	h.start().finish()
	h.verify()
}

// holdCheckpointTopic opens another pipeline's transaction holding a
// record in the shared checkpoint topic: read_committed readers see
// nothing past it until the returned client ends it.
func holdCheckpointTopic(t *testing.T, h *harness) *kgo.Client {
	t.Helper()
	other, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...), kgo.TransactionalID("other-pipeline"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	rec := h.relay.store.Record(&checkpoint.Checkpoint{Name: "other-pipeline", GTIDSet: "0-1-1", Flavor: "mariadb"})
	if err := other.ProduceSync(context.Background(), rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return other
}
