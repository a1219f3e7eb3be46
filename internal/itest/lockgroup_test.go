//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// Two instances of one pipeline with different ha.lock_topic are never
// active at once. The failure guarded against: two instances of one
// pipeline (same name, so the same lock group outbox-relay.lock.<name>)
// whose ha.lock_topic differs (a rolling update that renames it, a standby
// with another config file). Each member subscribes to its own lock topic,
// the balancer gives each the partition 0 of its topic, and both are active
// at once: in at-least-once both publish and checkpoint, in exactly-once
// they fence each other back and forth.
func TestLockTopicMismatchNeverTwoActives(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = "at-least-once"
	c1, c2 := cfg, cfg
	c1.HA.LockTopic = env.Unique("lock-a")
	c2.HA.LockTopic = env.Unique("lock-b")
	c2.Source.ServerID = cfg.Source.ServerID + 1
	p1 := RunRelay(t, c1)
	p1.WaitReady(t)
	p2 := RunRelay(t, c2)
	wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 200, Pace: 2 * time.Millisecond})
	both := 0
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if p1.Metrics.Role() == metrics.RoleActive && p2.Metrics.Role() == metrics.RoleActive {
			both++
		}
	}
	wait()
	_ = k
	if both > 0 {
		t.Fatalf("two instances of pipeline %s active at once in %d of 200 samples (lock topics %s and %s, one group %s)",
			cfg.Name, both, c1.HA.LockTopic, c2.HA.LockTopic, clients.GroupID(cfg.Name))
	}
}

// A standby taking over retries a transient source error instead of
// exiting. The failure guarded against: a standby that has waited (it never
// ran an attempt in this process) takes over during a rolling restart
// (SIGTERM of the active) while the source is briefly unreachable (a
// replica restarting, a network blip: here no server listens on its
// address). Run treats an error before this process's first start as a
// start-up failure: the new active exits (75) instead of retrying, and no
// instance is left. The pipeline is down until a supervisor restarts it
// (Kubernetes: CrashLoopBackOff).
func TestStandbyRetriesTransientSourceErrorAtTakeover(t *testing.T) {
	k, _, cfg := env.Pipeline(t)
	p1 := RunRelay(t, cfg)
	p1.WaitReady(t)
	c2 := cfg
	c2.Source.ServerID = cfg.Source.ServerID + 1
	c2.Source.Hosts = []string{freeAddr(t)} // the source, down for a moment
	c2.Source.ConnectTimeout = time.Second
	p2 := RunRelay(t, c2)
	// A standby that waits: a member of the lock group beside the active
	// (its role metric says standby from its start, before it has joined).
	WaitLockGroup(t, k.Brokers, cfg.Name, 2, 30*time.Second)
	Eventually(t, 20*time.Second, func() error {
		if p2.Metrics.Role() != metrics.RoleStandby {
			return context.DeadlineExceeded
		}
		return nil
	})
	if err := p1.Stop(); err != nil { // rolling restart: SIGTERM of the active
		t.Fatal(err)
	}
	select {
	case <-p2.Done():
		t.Fatalf("the standby took over and exited (code %d) on a transient source error instead of retrying: %v",
			relay.ExitCode(p2.Err()), p2.Err())
	case <-time.After(15 * time.Second):
	}
}

// The lock topic is deleted by a tool while two instances run.
// Must hold: never two actives, and one active again within 20 s.
func TestLockTopicDeletedOneActiveAgain(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = "at-least-once"
	cfg.HA.LockTopic = env.Unique("lock")
	p1 := RunRelay(t, cfg)
	p1.WaitReady(t)
	c2 := cfg
	c2.Source.ServerID = cfg.Source.ServerID + 1
	p2 := RunRelay(t, c2)
	WaitLockGroup(t, k.Brokers, cfg.Name, 2, 30*time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).DeleteTopics(context.Background(), cfg.HA.LockTopic); err != nil {
		t.Fatal(err)
	}
	wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 200, Pace: 5 * time.Millisecond})
	both, lastOne := 0, time.Time{}
	start := time.Now()
	for ; time.Since(start) < 20*time.Second; time.Sleep(50 * time.Millisecond) {
		n := 0
		for _, p := range []*InProcess{p1, p2} {
			if p.Metrics.Role() == metrics.RoleActive && p.Metrics.Ready.Load() {
				n++
			}
		}
		if n > 1 {
			both++
		}
		if n == 1 {
			lastOne = time.Now()
		}
	}
	wait()
	if both > 0 || time.Since(lastOne) > time.Second {
		t.Fatalf("after the lock topic was deleted: %d samples with two actives; last sample with one active ready %s ago\np1:\n%s\np2:\n%s",
			both, time.Since(lastOne), tailLines(p1.Logs(), 8), tailLines(p2.Logs(), 8))
	}
	WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
	requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
}

// The lock topic was created by a tool with 3 partitions.
// Must hold: one active, a clean hand-over on SIGTERM, never two actives.
func TestLockTopicThreePartitionsOneActive(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = "at-least-once"
	cfg.HA.LockTopic = env.Unique("lock")
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, nil, cfg.HA.LockTopic); err != nil {
		t.Fatal(err)
	}
	p1 := RunRelay(t, cfg)
	p1.WaitReady(t)
	c2 := cfg
	c2.Source.ServerID = cfg.Source.ServerID + 1
	p2 := RunRelay(t, c2)
	c3 := cfg
	c3.Source.ServerID = cfg.Source.ServerID + 2
	p3 := RunRelay(t, c3)
	wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 200, Pace: 5 * time.Millisecond})
	both := 0
	for i := 0; i < 100; i++ {
		n := 0
		for _, p := range []*InProcess{p1, p2, p3} {
			if p.Metrics.Role() == metrics.RoleActive {
				n++
			}
		}
		if n > 1 {
			both++
		}
		if i == 30 {
			_ = p1.Stop()
		}
		time.Sleep(50 * time.Millisecond)
	}
	wait()
	if both > 0 {
		t.Fatalf("%d samples with two actives", both)
	}
	WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
	requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
}

// A standby's crash and immediate restart leave the active instance active.
// The failure guarded against: the STANDBY crashes (kill -9, OOM) and its
// supervisor restarts it at once (systemd RestartSec=100ms, a pod restart).
// The new member's JoinGroup starts a rebalance that waits for the dead
// member until its session expires; meanwhile the active instance's own
// JoinGroup is not answered, its guard (session - 2 x heartbeat) runs out
// and it drops the lease although nothing happened to it: a crash of the
// standby stops the pipeline for seconds (a flap of the healthy active).
func TestStandbyCrashRestartKeepsActive(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	cfg.HA = config.Default().HA
	cfg.Log.Level = "info"
	f := startFleet(t, cfg, 2)
	active, _ := f.waitStreaming(nil, time.Minute)
	standby := 1 - active
	waitStarted(t, f.proc(active), cfg)
	addr := f.members[active].cfg.HTTP.Listen
	f.waitSettled(30 * time.Second) // the standby is a settled member of a stable group
	wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 300, Pace: 5 * time.Millisecond})
	f.proc(standby).Kill()
	f.restart(standby)
	// A sample is the active's state, or a scrape that did not answer
	// within its second (three brokers, three servers and the relays share
	// two cores): that says nothing of the state, so it is counted apart.
	notStreaming, unanswered, samples := 0, 0, 0
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		samples++
		switch series(addr, `outbox_relay_up{state="streaming"}`) {
		case 1:
		case -1:
			unanswered++
		default:
			notStreaming++
		}
	}
	wait()
	lost := series(addr, `outbox_relay_lease_events_total{event="lost"}`)
	if lost > 0 || notStreaming > 0 || unanswered > samples/2 {
		t.Fatalf("the healthy active instance lost its lease %v times and was not streaming in %d of %d samples (%d scrapes unanswered) "+
			"after the standby was killed -9 and restarted", lost, notStreaming, samples, unanswered)
	}
}

// The broker restarts while two instances run (the group
// state is lost: every member loses its membership). Must hold: never two
// actives, one active again, every event published, both still running.
func TestBrokerRestartTwoInstancesOneActive(t *testing.T) {
	for _, mode := range []string{"exactly-once", "at-least-once"} {
		t.Run(mode, func(t *testing.T) {
			k := StartKafka(t)
			s := env.NewSchema(t)
			cfg := env.RelayConfig(k, s.Table())
			cfg.Kafka.Delivery = config.Delivery(mode)
			p1 := RunRelay(t, cfg)
			p1.WaitReady(t)
			c2 := cfg
			c2.Source.ServerID = cfg.Source.ServerID + 1
			p2 := RunRelay(t, c2)
			WaitLockGroup(t, k.Brokers, cfg.Name, 2, 30*time.Second)
			wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 300, Pace: 5 * time.Millisecond})
			time.Sleep(500 * time.Millisecond)
			k.Restart(t)
			both := 0
			for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				if p1.Metrics.Role() == metrics.RoleActive && p2.Metrics.Role() == metrics.RoleActive {
					both++
				}
			}
			wait()
			for i, p := range []*InProcess{p1, p2} {
				select {
				case <-p.Done():
					t.Errorf("instance %d exited (code %d): %v", i+1, relay.ExitCode(p.Err()), p.Err())
				default:
				}
			}
			if both > 0 {
				t.Errorf("two actives in %d samples", both)
			}
			WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
			if mode == "exactly-once" {
				requireExact(t, k, s, cfg.Router.TopicPrefix)
			} else {
				requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
			}
		})
	}
}

// Different ha.lock_topic in exactly-once does not make the instances fence
// each other back and forth. The failure guarded against: the same mismatch
// of ha.lock_topic, exactly-once: each instance holds "its" lease, each
// InitProducerID fences the other, the fenced one goes back to standby,
// leaves, rejoins, is given partition 0 of its own topic again at once and
// fences back: a flap for as long as both run.
func TestLockTopicMismatchExactlyOnceNoFenceFlap(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	c1, c2 := cfg, cfg
	c1.HA.LockTopic = env.Unique("lock-a")
	c2.HA.LockTopic = env.Unique("lock-b")
	c2.Source.ServerID = cfg.Source.ServerID + 1
	p1 := RunRelay(t, c1)
	p1.WaitReady(t)
	p2 := RunRelay(t, c2)
	wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 200, Pace: 2 * time.Millisecond})
	time.Sleep(10 * time.Second)
	wait()
	f1 := testutil.ToFloat64(p1.Metrics.LeaseEvents.WithLabelValues("fenced"))
	f2 := testutil.ToFloat64(p2.Metrics.LeaseEvents.WithLabelValues("fenced"))
	a1 := testutil.ToFloat64(p1.Metrics.LeaseEvents.WithLabelValues("acquired"))
	a2 := testutil.ToFloat64(p2.Metrics.LeaseEvents.WithLabelValues("acquired"))
	if f1+f2 > 0 {
		t.Fatalf("in 10 s: instance 1 acquired %v times and was fenced %v times, instance 2 acquired %v and fenced %v", a1, f1, a2, f2)
	}
}

// An instance with the same name whose kafka.checkpoint_topic differs (an
// old config file on the second host). Taking the lease on a rolling
// restart, it would find no checkpoint in its topic, start at source.start
// "now" and skip what was committed during the hand-over; it must refuse
// instead: beside the active instance, as its standby (the lock group
// members' settings fingerprint), and alone after the active one stopped
// (the lock group's record of the checkpoint topic). Nothing it could have
// skipped or repeated reaches Kafka.
func TestStandbyWithOtherCheckpointTopicRefusesLease(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	p1 := RunRelay(t, cfg)
	p1.WaitReady(t)
	c2 := cfg
	c2.Source.ServerID = cfg.Source.ServerID + 1
	c2.Kafka.CheckpointTopic = env.Unique("other-checkpoints")
	p2 := RunRelay(t, c2)
	if err := p2.StoppedWith(t); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "checkpoint_topic") {
		t.Fatalf("the standby with another checkpoint topic: %v, want a configuration error naming it", err)
	}
	wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 300, Pace: 5 * time.Millisecond})
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := p1.Stop(); err != nil { // rolling restart
		t.Fatal(err)
	}
	wait()
	p2 = RunRelay(t, c2) // alone in the lock group now
	if err := p2.StoppedWith(t); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "checkpoint_topic") {
		t.Fatalf("alone after the active instance stopped, the instance with another checkpoint topic: %v, want a configuration error naming it", err)
	}
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); len(rep.Duplicates)+len(rep.Unexpected) > 0 {
		t.Fatal(rep)
	}
}

// Two live instances on one host with the same
// ha.instance_id (the same settings, or a copy of the service run by
// hand). Joining with the id of a member takes its place: the second one
// would evict the first while it is active (two actives for a moment in
// at-least-once, then the first exits). The newcomer waits for the
// member with its id to leave, as it does for its own dead process, and
// refuses to start (exit 78) when the member is still there after a
// session timeout; the incumbent is untouched and alone active.
func TestSameInstanceIDOnOneHostRefusesNewcomer(t *testing.T) {
	for _, mode := range []string{"at-least-once", "exactly-once"} {
		t.Run(mode, func(t *testing.T) {
			_, s, cfg := env.Pipeline(t)
			cfg.Kafka.Delivery = config.Delivery(mode)
			cfg.HA.InstanceID = env.Unique("same-host")
			p1 := RunRelay(t, cfg)
			p1.WaitReady(t)
			c2 := cfg
			c2.Source.ServerID = cfg.Source.ServerID + 1
			wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 200, Pace: 5 * time.Millisecond})
			p2 := RunRelay(t, c2)
			both := 0
			for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
				if p1.Metrics.Role() == metrics.RoleActive && p2.Metrics.Role() == metrics.RoleActive {
					both++
				}
			}
			wait()
			select {
			case <-p1.Done():
				t.Fatalf("the incumbent exited with code %d: %v", relay.ExitCode(p1.Err()), p1.Err())
			default:
			}
			if both > 0 {
				t.Fatalf("%d samples with two actives", both)
			}
			err := p2.StoppedWith(t)
			if relay.ExitCode(err) != relay.ExitConfig || !strings.Contains(err.Error(), "ha.instance_id") {
				t.Fatalf("the second instance: exit %d (%v), want %d naming ha.instance_id", relay.ExitCode(err), err, relay.ExitConfig)
			}
		})
	}
}

// A misconfigured standby does not take down the healthy active instance:
// it stops itself (exit 78, naming the setting) as soon as it compares
// itself with the lease holder, and a broker restart afterwards leaves the
// healthy instance active. The failure guarded against: one misconfigured
// standby (another kafka.checkpoint_topic: an old config file on the
// second host) sits in the lock group until the healthy active instance
// next acquires the lease (a broker restart rebuilds the group); agree()
// then finds the standby's fingerprint and the HEALTHY instance refuses
// the lease and exits 78; the misconfigured one takes the lease, claim()
// refuses it, and it exits 78 too: one bad standby plus a broker restart
// stops the pipeline for good (RestartPreventExitStatus=78).
func TestMisconfiguredStandbyLeavesHealthyActive(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	p1 := RunRelay(t, cfg)
	p1.WaitReady(t)
	c2 := cfg
	c2.Source.ServerID = cfg.Source.ServerID + 1
	c2.Kafka.CheckpointTopic = env.Unique("other-checkpoints")
	p2 := RunRelay(t, c2)
	if err := p2.StoppedWith(t); !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), "checkpoint_topic") ||
		!strings.Contains(err.Error(), "standby") {
		t.Fatalf("the standby with another checkpoint topic: %v, want it to stop as a standby with a configuration error naming the setting", err)
	}
	wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 100, Pace: 5 * time.Millisecond})
	k.Restart(t)
	wait()
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute) // the healthy instance publishes on after the restart
	t.Logf("p1 lease events acquired %v lost %v; p1 role %v, p2 role %v; p2 logs:\n%s",
		testutil.ToFloat64(p1.Metrics.LeaseEvents.WithLabelValues("acquired")), testutil.ToFloat64(p1.Metrics.LeaseEvents.WithLabelValues("lost")),
		p1.Metrics.Role(), p2.Metrics.Role(), tailLines(p2.Logs(), 4))
	select {
	case <-p1.Done():
		t.Fatalf("the healthy active instance exited (code %d) because a misconfigured standby was in the group: %v; standby: %s",
			relay.ExitCode(p1.Err()), p1.Err(), func() string {
				select {
				case <-p2.Done():
					return fmt.Sprintf("exited too (code %d)", relay.ExitCode(p2.Err()))
				default:
					return "running"
				}
			}())
	default:
	}
}
