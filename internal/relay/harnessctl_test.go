package relay

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
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
// Relay.attempt runs it inside an election: the sinks (both lanes) refuse
// to produce or commit once it is lost and abort what their clients buffer.
func (h *harness) startLeased(ls *ha.Lease) *attempt {
	t, r, cfg := h.t, h.relay, h.cfg
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits := &topicLimits{}
	cl, err := kgo.NewClient(producerOpts(r.kafka, 0, limits, nil, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	a := &attempt{h: h, cl: cl, events: make(chan []binlog.Event), readErr: make(chan error, 1), done: make(chan struct{})}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			cl.Close()
			t.Fatalf("start attempt: %s: %v", what, err)
		}
	}
	must("checkpoint topic", r.store.EnsureTopic(ctx, kadm.NewClient(cl), cfg.Kafka.ReplicationFactor))
	_, _, err = cl.ProducerID(ctx)
	must("init producer", err)
	a.laneCl, a.checkCl, err = r.secondLane(ctx, limits, nil)
	must("second lane", err)
	a.cp, err = r.store.Load(ctx, cfg.Name)
	must("load checkpoint", err)
	a.from, err = r.startPosition(h.srv, a.cp)
	must("start position", err)
	tracker, err := r.tracker(ctx, h.srv, a.cp)
	must("schema tracker", err)
	// As Relay.attempt: the sinks and the loop are given the lease; the
	// sinks' context is not canceled with the term (runCtx).
	opts := sinkOptions{timeout: cfg.Kafka.RequestTimeout,
		txnTimeout: cfg.Kafka.TransactionTimeout, parts: cfg.Kafka.TopicPartitions, repl: cfg.Kafka.ReplicationFactor,
		maxUnacked: int64(2 * cfg.Kafka.Batch.MaxRecords), limits: limits, lease: ls}
	first := newExactlyOnceSink(context.WithoutCancel(ls.Context()), cl, r.store, opts)
	a.snk = first
	l, err := newLoop(r, h.srv, a.cp, a.from, a.snk)
	must("new loop", err)
	l.lease = ls
	if a.laneCl != nil {
		a.lane = newLane(context.WithoutCancel(ls.Context()), a.laneCl, a.checkCl, r.store, opts, first)
		l.addLane(a.lane)
	}
	l.schema = tracker.Tables()
	if a.cp == nil {
		must("initial checkpoint", l.commit(ls.Context()))
	}
	from, err := binlog.ParseSet(h.s.flavor, a.from)
	must("start position", err)
	for i, ev := range h.s.events {
		if one, _ := binlog.ParseSet(h.s.flavor, ev.GTID); !from.Contain(one) {
			a.todo = append(a.todo, i)
		}
	}
	// The term's context, canceled by a stop (a.cancel) or a loss.
	runCtx, stop := context.WithCancel(ls.Context())
	a.cancel = stop
	go func() {
		defer close(a.done)
		a.err = l.run(runCtx, a.events, a.readErr)
	}()
	return a
}

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
// Relay.attempt builds it (no transactional id, the sink without Kafka
// transactions).
func (h *harness) startAtLeastOnce() *attempt {
	t, r := h.t, h.relay
	t.Helper()
	cfg := h.cfg
	cfg.Kafka.Delivery = config.AtLeastOnce
	k, err := clients.NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	k = k.WithLogger(r.log)
	r.store = k.CheckpointStore() // at-least-once checkpoints are not transactional
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	limits := &topicLimits{}
	cl, err := kgo.NewClient(producerOpts(k, 0, limits, nil, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	a := &attempt{h: h, cl: cl, events: make(chan []binlog.Event), readErr: make(chan error, 1), done: make(chan struct{})}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			cl.Close()
			t.Fatalf("start attempt: %s: %v", what, err)
		}
	}
	must("checkpoint topic", r.store.EnsureTopic(ctx, kadm.NewClient(cl), cfg.Kafka.ReplicationFactor))
	a.cp, err = r.store.Load(ctx, cfg.Name)
	must("load checkpoint", err)
	a.from, err = r.startPosition(h.srv, a.cp)
	must("start position", err)
	tracker, err := r.tracker(ctx, h.srv, a.cp)
	must("schema tracker", err)
	a.snk = newAtLeastOnceSink(context.Background(), cl, r.store, sinkOptions{timeout: cfg.Kafka.RequestTimeout,
		txnTimeout: cfg.Kafka.TransactionTimeout, parts: cfg.Kafka.TopicPartitions, repl: cfg.Kafka.ReplicationFactor,
		maxUnacked: int64(2 * cfg.Kafka.Batch.MaxRecords), maxUnackedBytes: int64(2 * cfg.Kafka.Batch.MaxBytes), limits: limits})
	l, err := newLoop(r, h.srv, a.cp, a.from, a.snk)
	must("new loop", err)
	l.schema = tracker.Tables()
	if a.cp == nil {
		must("initial checkpoint", l.commit(ctx))
		_, err := a.snk.finish(ctx)
		must("initial checkpoint", err)
	}
	from, err := binlog.ParseSet(h.s.flavor, a.from)
	must("start position", err)
	for i, ev := range h.s.events {
		if one, _ := binlog.ParseSet(h.s.flavor, ev.GTID); !from.Contain(one) {
			a.todo = append(a.todo, i)
		}
	}
	runCtx, stop := context.WithCancel(context.Background())
	a.cancel = stop
	go func() {
		defer close(a.done)
		a.err = l.run(runCtx, a.events, a.readErr)
	}()
	return a
}

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
