package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// electionCluster is an embedded broker that accepts short sessions, and a
// gate that stops answering one member's heartbeats (a partition between it
// and the group coordinator).
type electionCluster struct {
	c       *kfake.Cluster
	mu      sync.Mutex
	blocked string        // member id whose heartbeats get no answer
	wake    chan struct{} // closed at cleanup: blocked requests end

	instances int // relays made: each gets its own ha.instance_id
}

func newElectionCluster(t *testing.T) *electionCluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "data"),
		kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "1000"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ec := &electionCluster{c: c, wake: make(chan struct{})}
	t.Cleanup(func() { close(ec.wake) }) // runs before Close
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		ec.mu.Lock()
		blocked := ec.blocked
		ec.mu.Unlock()
		if hb, ok := req.(*kmsg.HeartbeatRequest); ok && blocked != "" && hb.MemberID == blocked {
			c.SleepControl(func() { <-ec.wake })
		}
		return nil, nil, false
	})
	return ec
}

func (ec *electionCluster) partition(member string) {
	ec.mu.Lock()
	ec.blocked = member
	ec.mu.Unlock()
}

// testRelay is a Relay with only what the election needs.
func (ec *electionCluster) relay(t *testing.T) *Relay {
	t.Helper()
	cfg := config.Default()
	cfg.Name = "pipe"
	cfg.Kafka.Brokers = ec.c.ListenAddrs()
	cfg.Kafka.ReplicationFactor = 1
	cfg.Kafka.RequestTimeout = 10 * time.Second
	cfg.HA.SessionTimeout = 3 * time.Second
	cfg.HA.HeartbeatInterval = 500 * time.Millisecond
	// Instances of one pipeline on one host: each needs its own id.
	ec.instances++
	cfg.HA.InstanceID = fmt.Sprintf("instance-%d", ec.instances)
	k, err := clients.NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Relay{cfg: cfg, log: zerolog.Nop(), metrics: metrics.New("test"), kafka: k}
}

func joined(t *testing.T, r *Relay) *elector {
	t.Helper()
	e := r.newElector()
	if err := e.join(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.leave)
	return e
}

// acquireAsync returns a channel that gets e's lease and when it came.
type acquired struct {
	l  *lease
	at time.Time
}

func acquireAsync(ctx context.Context, e *elector) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, _ := e.acquire(ctx)
		ch <- acquired{l, time.Now()}
	}()
	return ch
}

func TestElectionOneActiveAndCleanHandOver(t *testing.T) {
	realTime(t)
	ec := newElectionCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := joined(t, ec.relay(t)), joined(t, ec.relay(t))
	ca, cb := acquireAsync(ctx, a), acquireAsync(ctx, b)
	var first acquired
	var holder, standby *elector
	var standbyCh <-chan acquired
	select {
	case first = <-ca:
		holder, standby, standbyCh = a, b, cb
	case first = <-cb:
		holder, standby, standbyCh = b, a, ca
	case <-time.After(20 * time.Second):
		t.Fatal("nobody acquired the lease")
	}
	// Stays the only active one while the other member heartbeats.
	select {
	case got := <-standbyCh:
		t.Fatalf("both members hold the lease (second at %s)", got.at.Sub(first.at))
	case <-time.After(4 * time.Second):
	}
	if first.l.err() != nil {
		t.Fatalf("the active member lost its lease while heartbeating: %v", first.l.err())
	}
	// A clean stop: end the term, leave the group; the standby takes over at
	// once (no session timeout to wait for).
	left := time.Now()
	holder.end(first.l)
	holder.leave()
	select {
	case got := <-standbyCh:
		if d := got.at.Sub(left); d > 2*time.Second {
			t.Fatalf("hand-over after a leave took %s", d)
		}
		t.Logf("hand-over after a leave: %s", got.at.Sub(left))
		standby.end(got.l)
	case <-time.After(10 * time.Second):
		t.Fatal("the standby did not take over after the active one left")
	}
}

// A network-partitioned active member (its heartbeats unanswered) loses its
// lease on its own before the coordinator can hand it to the standby; a
// commit it still attempts is refused by the sink, and a commit that got
// past that (no lease guard) fails because the new active one's
// InitProducerID fenced the old producer.
func TestElectionPartitionedActiveStopsBeforeTakeover(t *testing.T) {
	realTime(t)
	ec := newElectionCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ra := ec.relay(t)
	a := joined(t, ra)
	var la *lease
	select {
	case got := <-acquireAsync(ctx, a):
		la = got.l
	case <-time.After(20 * time.Second):
		t.Fatal("a did not acquire the lease")
	}
	b := joined(t, ec.relay(t))
	cb := acquireAsync(ctx, b)

	// a is active: an open transaction with a record in it, under its lease,
	// and one more (the same transactional id) that bypasses the guard.
	brokers := ec.c.ListenAddrs()
	store := checkpoint.NewStore("cp", kgo.SeedBrokers(brokers...))
	open := func(ctx context.Context) *exactlyOnceSink {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0), kgo.TransactionalID("pipe"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := store.EnsureTopic(context.Background(), kadm.NewClient(cl), 1); err != nil {
			t.Fatal(err)
		}
		s := newExactlyOnceSink(ctx, cl, store, sinkOptions{timeout: 10 * time.Second, parts: 3, repl: 1})
		if err := s.produce(ctx, &kgo.Record{Topic: "data", Value: []byte("before the partition")}); err != nil {
			t.Fatal(err)
		}
		if err := cl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		return s
	}
	guarded := open(la.ctx)

	member, _ := a.cl.GroupMetadata()
	partitioned := time.Now()
	ec.partition(member)

	var lostAt time.Time
	select {
	case <-la.lost:
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
	if err := la.err(); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("lease error %v, want ErrLeaseLost", err)
	}
	if err := guarded.produce(la.ctx, &kgo.Record{Topic: "data", Value: []byte("late")}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("produce after the loss: %v, want ErrLeaseLost", err)
	}
	if _, err := guarded.commit(la.ctx, cpAt("0-1-2")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("commit after the loss: %v, want ErrLeaseLost", err)
	}

	// A late commit of an open transaction that bypassed the guard: the new
	// active one initialises the producer id first, which fences it.
	unguarded := open(context.Background())
	newActive, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("pipe"))
	if err != nil {
		t.Fatal(err)
	}
	defer newActive.Close()
	if _, _, err := newActive.ProducerID(took.l.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := unguarded.commit(context.Background(), cpAt("0-1-2")); !errors.Is(err, ErrFenced) {
		t.Fatalf("late commit of the old active producer: %v, want ErrFenced", err)
	}
	if committed, _ := committedCount(t, newActive, "data"); committed != 0 {
		t.Fatalf("%d records of the old active one visible", committed)
	}
	b.end(took.l)
}

func TestLeaseLoseRunsStopsOnce(t *testing.T) {
	l := newLease(context.Background())
	n := 0
	l.onLost(func() { n++ })
	if l.err() != nil {
		t.Fatal("a fresh lease is lost")
	}
	l.lose("test")
	l.lose("again")
	l.onLost(func() { n++ }) // registered after: runs at once
	if n != 2 || !errors.Is(l.err(), ErrLeaseLost) || l.ctx.Err() == nil {
		t.Fatalf("stops run %d times, err %v, ctx %v", n, l.err(), l.ctx.Err())
	}
	var none *lease
	if none.err() != nil || none.lostChan() != nil {
		t.Fatal("no lease must mean never lost")
	}
}

// A session timeout the broker refuses is a configuration error, not an
// endless standby.
func TestElectionRefusedSessionTimeout(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1)) // group.min.session.timeout.ms 6s
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := config.Default()
	cfg.Name = "pipe"
	cfg.Kafka.Brokers = c.ListenAddrs()
	cfg.Kafka.ReplicationFactor = 1
	cfg.HA.SessionTimeout = 3 * time.Second
	cfg.HA.HeartbeatInterval = time.Second
	k, _ := clients.NewKafka(cfg)
	r := &Relay{cfg: cfg, log: zerolog.Nop(), metrics: metrics.New("test"), kafka: k}
	e := joined(t, r)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := e.acquire(ctx)
	if l != nil || !errors.Is(err, config.ErrInvalid) || ExitCode(err) != ExitConfig {
		t.Fatalf("acquire: lease %v, err %v; want a configuration error", l, err)
	}
}

// Two live instances with one ha.instance_id (two processes on one host
// with the same settings): the newcomer must not take the place of the
// live member (it would evict an active instance); it waits for the
// member to leave, as it would for its own dead process, and refuses to
// start with a configuration error naming the setting when the member is
// still there after a session timeout. The incumbent keeps its lease.
func TestElectionSameInstanceIDRefused(t *testing.T) {
	realTime(t)
	ec := newElectionCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r1 := ec.relay(t)
	a := joined(t, r1)
	la, err := a.acquire(ctx)
	if err != nil || la == nil {
		t.Fatalf("first instance: lease %v, err %v", la, err)
	}
	r2 := ec.relay(t)
	r2.cfg.HA.InstanceID = r1.cfg.HA.InstanceID
	b := r2.newElector()
	began := time.Now()
	err = b.join(ctx)
	if err == nil {
		b.leave()
		t.Fatal("a second live instance with the same ha.instance_id joined the lock group")
	}
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "ha.instance_id") {
		t.Fatalf("join: %v, want a configuration error naming ha.instance_id", err)
	}
	if waited := time.Since(began); waited < r2.cfg.HA.SessionTimeout {
		t.Errorf("refused after %s: a dead process's member may linger for a session timeout (%s)", waited, r2.cfg.HA.SessionTimeout)
	}
	if err := la.err(); err != nil {
		t.Fatalf("the incumbent lost its lease: %v", err)
	}
}

// An instance restarted after a kill -9 finds its earlier process's member
// in the group: it waits for that member's session to end, then joins,
// and the member that is active meanwhile keeps its lease.
func TestElectionRestartWaitsForOwnDeadMember(t *testing.T) {
	realTime(t)
	ec := newElectionCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := joined(t, ec.relay(t))
	la, err := a.acquire(ctx)
	if err != nil || la == nil {
		t.Fatalf("active: lease %v, err %v", la, err)
	}
	rs := ec.relay(t)
	s := rs.newElector()
	if err := s.join(ctx); err != nil {
		t.Fatal(err)
	}
	// kill -9 of the standby: a static member's client stops without
	// leaving the group.
	s.cl.Close()
	restarted := rs.newElector()
	if err := restarted.join(ctx); err != nil {
		t.Fatalf("restarted standby: %v", err)
	}
	t.Cleanup(restarted.leave)
	adm := kadm.NewClient(restarted.cl)
	for { // until the rebalance its join started is over
		groups, err := adm.DescribeGroups(ctx, restarted.group)
		if err != nil {
			t.Fatal(err)
		}
		if g := groups[restarted.group]; g.State == "Stable" && len(g.Members) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the group did not settle with the restarted standby: %+v", groups)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := la.err(); err != nil {
		t.Fatalf("the active instance lost its lease when a standby restarted: %v", err)
	}
}
