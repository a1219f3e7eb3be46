// Package kafkatest is the shared fixture of the tests that run on an
// embedded Kafka broker (franz-go's kfake): a cluster per test, closed when
// the test ends, and the controls several packages' tests share (a lock
// group whose member can be cut off from its coordinator). Test machinery:
// only _test.go files import it, so it never reaches the relay's binary.
package kafkatest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Cluster starts an embedded cluster with opts for t and closes it when t
// ends; an error starting it fails t.
func Cluster(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Election is an embedded broker for the lock group's tests: it accepts
// short sessions, and its gate stops answering one member's heartbeats (a
// partition between it and the group coordinator).
type Election struct {
	C       *kfake.Cluster
	mu      sync.Mutex
	blocked string        // member id whose heartbeats get no answer
	wake    chan struct{} // closed at cleanup: blocked requests end

	instances int // configurations made: each gets its own ha.instance_id
}

// NewElection starts an Election broker (a topic "data" of 3 partitions)
// for t.
func NewElection(t testing.TB) *Election {
	t.Helper()
	c := Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, "data"),
		kfake.BrokerConfigs(map[string]string{"group.min.session.timeout.ms": "1000"}))
	e := &Election{C: c, wake: make(chan struct{})}
	t.Cleanup(func() { close(e.wake) }) // runs before Close
	c.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		e.mu.Lock()
		blocked := e.blocked
		e.mu.Unlock()
		if hb, ok := req.(*kmsg.HeartbeatRequest); ok && blocked != "" && hb.MemberID == blocked {
			c.SleepControl(func() { <-e.wake })
		}
		return nil, nil, false
	})
	return e
}

// Partition stops answering the heartbeats of member (a group member id).
func (e *Election) Partition(member string) {
	e.mu.Lock()
	e.blocked = member
	e.mu.Unlock()
}

// Released is closed when the test ends: requests a control holds until
// then end.
func (e *Election) Released() <-chan struct{} { return e.wake }

// Config is the configuration of another instance of pipeline "pipe" on
// the broker (PipelineConfig), each with an ha.instance_id of its own
// (instances of one pipeline on one host).
func (e *Election) Config() config.Config {
	e.mu.Lock()
	e.instances++
	n := e.instances
	e.mu.Unlock()
	return PipelineConfig(e.C, fmt.Sprintf("instance-%d", n))
}

// PipelineConfig is the configuration of pipeline "pipe" on c with only
// what its lock group needs: replication factor 1, a 10 s request timeout,
// short sessions (3 s, heartbeats every 500 ms), ha.instance_id instance.
func PipelineConfig(c *kfake.Cluster, instance string) config.Config {
	cfg := config.Default()
	cfg.Name = "pipe"
	cfg.Kafka.Brokers = c.ListenAddrs()
	cfg.Kafka.ReplicationFactor = 1
	cfg.Kafka.RequestTimeout = 10 * time.Second
	cfg.HA.SessionTimeout = 3 * time.Second
	cfg.HA.HeartbeatInterval = 500 * time.Millisecond
	cfg.HA.InstanceID = instance
	return cfg
}

// AbortCommits makes c abort the next n commits (EndTxn) of transactional
// id while their producer is answered success, as when franz-go ends a
// transaction without sending its EndTxn and the broker aborts it at its
// timeout. It returns the count of commits aborted so far.
func AbortCommits(c *kfake.Cluster, id string, n int32) *atomic.Int32 {
	var aborted atomic.Int32
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		end := req.(*kmsg.EndTxnRequest)
		if end.TransactionalID == id && end.Commit && aborted.Load() < n {
			end.Commit = false // kfake aborts; its answer says no error
			aborted.Add(1)
		}
		return nil, nil, false
	})
	return &aborted
}

// DropCommit answers the next commit (EndTxn) of transactional id success
// without the broker seeing it, as franz-go does when it ends a
// transaction without sending EndTxn: the transaction stays open until
// its timeout, or until a producer initialising the id aborts it. It
// returns whether the commit was dropped yet.
func DropCommit(c *kfake.Cluster, id string) *atomic.Bool {
	var dropped atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		end := req.(*kmsg.EndTxnRequest)
		if end.TransactionalID != id || !end.Commit || dropped.Load() {
			c.KeepControl()
			return nil, nil, false
		}
		dropped.Store(true)
		return end.ResponseKind(), nil, true
	})
	return &dropped
}
