package ha

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// electionConfig is an elector's configuration for another instance on
// e's broker.
func electionConfig(e *kafkatest.Election) Config { return testConfig(e.Config()) }

// testConfig is an elector's configuration for cfg: the relay's Kafka
// connection options without TLS or SASL.
func testConfig(cfg config.Config) Config {
	k, err := clients.NewKafka(cfg)
	if err != nil {
		panic(err) // a test configuration without TLS or SASL files
	}
	return Config{Relay: cfg, Log: zerolog.Nop(), Metrics: metrics.New("test"), Kafka: k}
}

func joined(t *testing.T, c Config) *Elector {
	t.Helper()
	e := New(c)
	if err := e.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Leave)
	return e
}

// acquireAsync returns a channel that gets e's lease and when it came.
type acquired struct {
	l  *Lease
	at time.Time
}

func acquireAsync(ctx context.Context, e *Elector) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, _ := e.Acquire(ctx)
		ch <- acquired{l, time.Now()}
	}()
	return ch
}

func TestElectionOneActiveAndCleanHandOver(t *testing.T) {
	realTime(t)
	ec := kafkatest.NewElection(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := joined(t, electionConfig(ec)), joined(t, electionConfig(ec))
	ca, cb := acquireAsync(ctx, a), acquireAsync(ctx, b)
	var first acquired
	var holder, standby *Elector
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
	if first.l.Err() != nil {
		t.Fatalf("the active member lost its lease while heartbeating: %v", first.l.Err())
	}
	// A clean stop: end the term, leave the group; the standby takes over at
	// once (no session timeout to wait for).
	left := time.Now()
	holder.End(first.l)
	holder.Leave()
	select {
	case got := <-standbyCh:
		if d := got.at.Sub(left); d > 2*time.Second {
			t.Fatalf("hand-over after a leave took %s", d)
		}
		t.Logf("hand-over after a leave: %s", got.at.Sub(left))
		standby.End(got.l)
	case <-time.After(10 * time.Second):
		t.Fatal("the standby did not take over after the active one left")
	}
}

// A coordinator that ends a dead process's session late (a loaded broker:
// 5 s late seen on Apache Kafka) does not turn the restart into a refusal.
// Here the dead incarnation joined with twice the restarted one's session
// timeout: its member lingers a session longer than the restart counts on.
// The restart waits it out and joins; before, it refused to start as a
// second live instance with its ha.instance_id (exit 78, which also stops a
// supervisor's restarts).
func TestElectionRestartWaitsForADeadMemberTheCoordinatorEndsLate(t *testing.T) {
	realTime(t)
	ec := kafkatest.NewElection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := electionConfig(ec)
	late := cs.Relay
	late.HA.SessionTimeout = 2 * cs.Relay.HA.SessionTimeout
	dead := New(testConfig(late))
	if err := dead.Join(ctx); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(dead.cl)
	for { // until its member is in the group
		groups, err := adm.DescribeGroups(ctx, dead.Group())
		if err != nil {
			t.Fatal(err)
		}
		if g := groups[dead.Group()]; g.State == "Stable" && len(g.Members) == 1 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the first incarnation did not join: %+v", groups)
		case <-time.After(50 * time.Millisecond):
		}
	}
	dead.cl.Close() // kill -9: a static member's client stops without leaving
	began := time.Now()
	restarted := New(cs)
	if err := restarted.Join(ctx); err != nil {
		t.Fatalf("restart after a kill, the dead member's session ending %s after it: %v", late.HA.SessionTimeout, err)
	}
	t.Cleanup(restarted.Leave)
	if waited := time.Since(began); waited < cs.Relay.HA.SessionTimeout {
		t.Fatalf("joined after %s: the dead member's session (%s) had not ended", waited, late.HA.SessionTimeout)
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
	ec := kafkatest.NewElection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c1 := electionConfig(ec)
	a := joined(t, c1)
	la, err := a.Acquire(ctx)
	if err != nil || la == nil {
		t.Fatalf("first instance: lease %v, err %v", la, err)
	}
	c2 := electionConfig(ec)
	c2.Relay.HA.InstanceID = c1.Relay.HA.InstanceID
	b := New(c2)
	began := time.Now()
	err = b.Join(ctx)
	if err == nil {
		b.Leave()
		t.Fatal("a second live instance with the same ha.instance_id joined the lock group")
	}
	if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "ha.instance_id") {
		t.Fatalf("join: %v, want a configuration error naming ha.instance_id", err)
	}
	if waited := time.Since(began); waited < c2.Relay.HA.SessionTimeout {
		t.Errorf("refused after %s: a dead process's member may linger for a session timeout (%s)", waited, c2.Relay.HA.SessionTimeout)
	}
	if err := la.Err(); err != nil {
		t.Fatalf("the incumbent lost its lease: %v", err)
	}
}

// An instance restarted after a kill -9 finds its earlier process's member
// in the group: it waits for that member's session to end, then joins,
// and the member that is active meanwhile keeps its lease.
func TestElectionRestartWaitsForOwnDeadMember(t *testing.T) {
	realTime(t)
	ec := kafkatest.NewElection(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := joined(t, electionConfig(ec))
	la, err := a.Acquire(ctx)
	if err != nil || la == nil {
		t.Fatalf("active: lease %v, err %v", la, err)
	}
	cs := electionConfig(ec)
	s := New(cs)
	if err := s.Join(ctx); err != nil {
		t.Fatal(err)
	}
	// kill -9 of the standby: a static member's client stops without
	// leaving the group.
	s.cl.Close()
	restarted := New(cs)
	if err := restarted.Join(ctx); err != nil {
		t.Fatalf("restarted standby: %v", err)
	}
	t.Cleanup(restarted.Leave)
	adm := kadm.NewClient(restarted.cl)
	for { // until the rebalance its join started is over
		groups, err := adm.DescribeGroups(ctx, restarted.id.group)
		if err != nil {
			t.Fatal(err)
		}
		if g := groups[restarted.id.group]; g.State == "Stable" && len(g.Members) == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the group did not settle with the restarted standby: %+v", groups)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := la.Err(); err != nil {
		t.Fatalf("the active instance lost its lease when a standby restarted: %v", err)
	}
}
