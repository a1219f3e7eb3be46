package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/ha"
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

// startLeased is h.start with the attempt run under ls, a term's lease, as
// Relay.attempt runs it inside an election: the delivery (both lanes)
// refuses to produce or commit once it is lost and fails what its clients
// buffer.
func (h *harness) startLeased(ls *ha.Lease) *attempt { return h.startWith(ls, false) }

// topicIDs returns the event ids (header id) read_committed consumers see
// on topic, in offset order.
func (h *harness) topicIDs(topic string) []string {
	h.t.Helper()
	var out []string
	for _, r := range h.consume() {
		if r.Topic == topic {
			out = append(out, header(r, "id"))
		}
	}
	return out
}

// writeCheckpoint commits cp as the pipeline's checkpoint, as `checkpoint
// set|skip` does (the operator's recovery from a stop).
func (h *harness) writeCheckpoint(cp *checkpoint.Checkpoint) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.relay.store.Write(ctx, h.cfg.Name, h.cfg.Kafka.TransactionLanes, cp); err != nil {
		h.t.Fatal(err)
	}
}

// startAtLeastOnce is h.start for kafka.delivery at-least-once, as
// Relay.attempt builds it (no transactional id, no Kafka transactions).
func (h *harness) startAtLeastOnce() *attempt { return h.startWith(nil, true) }

// eventually polls cond every 5 ms for at most 20 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// countInits counts the InitProducerID requests for id the broker receives.
func countInits(h *harness, id string) *atomic.Int32 {
	var n atomic.Int32
	h.kafka.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		if r := req.(*kmsg.InitProducerIDRequest); r.TransactionalID != nil && *r.TransactionalID == id {
			n.Add(1)
		}
		return nil, nil, false
	})
	return &n
}

// writeHoldingInit starts a checkpoint write of set (Store.Write, two
// lanes) with its InitProducerID of the pipeline's name held at the broker:
// held receives once that request arrives, closing release lets it go on,
// and wrote receives Write's result.
func writeHoldingInit(h *harness, set *checkpoint.Checkpoint) (held <-chan struct{}, release chan struct{}, wrote <-chan error) {
	var armed atomic.Bool
	arrived := make(chan struct{}, 1)
	release = make(chan struct{})
	h.kafka.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		h.kafka.KeepControl()
		r := req.(*kmsg.InitProducerIDRequest)
		if r.TransactionalID != nil && *r.TransactionalID == h.cfg.Name && armed.CompareAndSwap(true, false) {
			arrived <- struct{}{}
			h.kafka.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	armed.Store(true)
	result := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		result <- h.relay.store.Write(ctx, h.cfg.Name, 2, set)
	}()
	return arrived, release, result
}
