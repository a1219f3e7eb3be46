package relay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// electionRelay is a Relay with only what the election needs, another
// instance on e's broker.
func electionRelay(t *testing.T, e *kafkatest.Election) *Relay {
	t.Helper()
	cfg := e.Config()
	k, err := clients.NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Relay{cfg: cfg, log: zerolog.Nop(), metrics: metrics.New("test"), kafka: k}
}

func joined(t *testing.T, r *Relay) *ha.Elector {
	t.Helper()
	e := r.newElector()
	if err := e.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Leave)
	return e
}

// acquireAsync returns a channel that gets e's lease and when it came.
type acquired struct {
	l  *ha.Lease
	at time.Time
}

func acquireAsync(ctx context.Context, e *ha.Elector) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, _ := e.Acquire(ctx)
		ch <- acquired{l, time.Now()}
	}()
	return ch
}

// A network-partitioned active member (its heartbeats unanswered) loses its
// lease on its own before the coordinator can hand it to the standby; a
// commit it still attempts is refused by the sink, and a commit that got
// past that (no lease guard) fails because the new active one's
// InitProducerID fenced the old producer.
func TestElectionPartitionedActiveStopsBeforeTakeover(t *testing.T) {
	realTime(t)
	ec := kafkatest.NewElection(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ra := electionRelay(t, ec)
	a := joined(t, ra)
	var la *ha.Lease
	select {
	case got := <-acquireAsync(ctx, a):
		la = got.l
	case <-time.After(20 * time.Second):
		t.Fatal("a did not acquire the lease")
	}
	b := joined(t, electionRelay(t, ec))
	cb := acquireAsync(ctx, b)

	// a is active: an open transaction with a record in it, under its lease,
	// and one more (the same transactional id) that bypasses the guard.
	brokers := ec.C.ListenAddrs()
	store := checkpoint.NewStore("cp", kgo.SeedBrokers(brokers...))
	open := func(ctx context.Context, lease *ha.Lease) *lane {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0), kgo.TransactionalID("pipe"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := store.EnsureTopic(context.Background(), kadm.NewClient(cl), 1); err != nil {
			t.Fatal(err)
		}
		s := newLane(ctx, cl, store, deliveryOptions{timeout: 10 * time.Second, lease: lease})
		if err := s.produce(outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("before the partition")}}); err != nil {
			t.Fatal(err)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	guarded := open(la.Context(), la)

	member := a.MemberID()
	partitioned := time.Now()
	ec.Partition(member)

	var lostAt time.Time
	select {
	case <-la.Lost():
		lostAt = time.Now()
	case got := <-cb:
		t.Fatalf("the standby acquired the lease %s after the partition, before the old active one stopped", got.at.Sub(partitioned))
	case <-time.After(20 * time.Second):
		t.Fatal("the partitioned active member never gave up its lease")
	}
	var took acquired
	select {
	case took = <-cb:
	case <-time.After(20 * time.Second):
		t.Fatal("the standby never took over")
	}
	t.Logf("partition at 0: old active stopped at %s, standby active at %s (session timeout %s)",
		lostAt.Sub(partitioned).Round(time.Millisecond), took.at.Sub(partitioned).Round(time.Millisecond), ra.cfg.HA.SessionTimeout)
	if !lostAt.Before(took.at) {
		t.Fatal("two active members at once")
	}
	if err := la.Err(); !errors.Is(err, ha.ErrLeaseLost) {
		t.Fatalf("lease error %v, want ha.ErrLeaseLost", err)
	}
	if err := guarded.produce(outRecord{Record: &kgo.Record{Topic: "data", Value: []byte("late")}}); !errors.Is(err, ha.ErrLeaseLost) {
		t.Fatalf("produce after the loss: %v, want ha.ErrLeaseLost", err)
	}
	if _, err := guarded.commit(la.Context(), cpAt("0-1-2"), nil); !errors.Is(err, ha.ErrLeaseLost) {
		t.Fatalf("commit after the loss: %v, want ha.ErrLeaseLost", err)
	}

	// A late commit of an open transaction that bypassed the guard: the new
	// active one initialises the producer id first, which fences it.
	unguarded := open(context.Background(), nil)
	newActive, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("pipe"))
	if err != nil {
		t.Fatal(err)
	}
	defer newActive.Close()
	if _, _, err := newActive.ProducerID(took.l.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := unguarded.commit(context.Background(), cpAt("0-1-2"), nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("late commit of the old active producer: %v, want ErrFenced", err)
	}
	if committed, _ := committedCount(t, newActive, "data"); committed != 0 {
		t.Fatalf("%d records of the old active one visible", committed)
	}
	b.End(took.l)
}
