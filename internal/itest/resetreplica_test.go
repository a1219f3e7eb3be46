//go:build integration

package itest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/preflight"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/source"
)

// A replica whose binlog was reset is held against while another host has
// the transactions: the relay waits and resumes there, losing nothing. The
// failure guarded against: a replica whose binlog was reset (RESET MASTER)
// while it kept replicating. Its gtid_binlog_state holds the primary's
// server_id at a sequence number past the checkpoint, and its oldest
// binlog's Gtid_list is empty: its variables say it has the checkpoint and
// nothing is purged. But the transactions between the checkpoint and the
// reset are not in its binlog any more; the server refuses the position as
// a hole in its binlog (go-mysql asks for gtid strict mode on the dump
// connection, so it does so even with the global OFF).
//
// The relay must not stop for good while
// another host has the transactions: it holds the refusal against the reset
// replica, waits while the preferred replica is down, and resumes on it
// when it is back, losing nothing. (The checkpoint carries no fingerprint
// here, as one written by an older release or `checkpoint set`: with one,
// the reset replica cannot even show the checkpoint's last transaction and
// is refused before any stream, TestResetReplicaRefusedByProofAtFirstStart.)
func TestResetReplicaHeldWhileAnotherHostHasTransactions(t *testing.T) {
	BrokerOnlyAsSink(t)
	resetReplica(t, resetHeld)
}

// With a fingerprint in the checkpoint, the reset replica is refused at the
// choice: its binlog no longer holds the checkpoint's last transaction with
// outbox rows, and it is not the server the checkpoint was read from
// (purged, source.ErrUnproven). A fresh process whose preferred replica is
// down at its first start then exits 75 (transient, as with every host
// unreachable: its supervisor starts it again), having read nothing of the
// reset replica; started once the preferred one is back, it resumes there,
// losing nothing.
func TestResetReplicaRefusedByProofAtFirstStart(t *testing.T) {
	BrokerOnlyAsSink(t)
	resetReplica(t, resetProved)
}

// A reset replica alone in source.hosts fails check and stops the relay as
// purged. The failure guarded against: the same replica alone in
// source.hosts: `check` must not pass it (passing it would let a check before
// `run` start the unit), and the relay stops on it as purged (exit 66: its
// binlogs after the checkpoint are gone), not as diverged.
func TestResetReplicaAloneFailsCheckAndStopsAsPurged(t *testing.T) {
	BrokerOnlyAsSink(t)
	resetReplica(t, resetCheckOnly)
}

// How resetReplica goes on once the replica's binlog is reset.
const (
	resetHeld      = iota // a checkpoint without a fingerprint; the relay started with a down
	resetProved           // the relay's own checkpoint; the relay started with a down
	resetCheckOnly        // check and the relay on the reset replica alone
)

func resetReplica(t *testing.T, mode int) {
	c := StartCluster(t, 2)
	a, b := c.Replicas[0], c.Replicas[1]
	k := StartKafka(t)
	s := c.NewSchema(t, env)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = c.Addrs(a, b)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	first, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "a"})
	if err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, c.Primary), time.Minute)
	if err := p.Stop(); err != nil { // a rolling restart, or a relay outage
		t.Fatal(err)
	}
	// Committed while the relay is down: on both replicas.
	second, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "b"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, a, b)
	// An operator resets b's binlog (e.g. to reclaim disk); replication
	// goes on.
	if err := b.Exec("STOP SLAVE", "RESET MASTER", "START SLAVE"); err != nil {
		t.Fatal(err)
	}

	third, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "c"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, b)
	rows, _ := b.Query("SELECT @@GLOBAL.gtid_binlog_state")
	t.Logf("b gtid_binlog_state after reset: %v", rows)
	if mode == resetCheckOnly {
		only := cfg
		only.Source.Hosts = c.Addrs(b)
		r := preflight.Run(context.Background(), only)
		if r.OK() {
			t.Errorf("check passes with b, whose binlog lacks the transactions after the checkpoint, the only host: %+v", r)
		}
		if it, ok := r.Find("stream"); !ok || it.Status != preflight.Fail || !strings.Contains(it.Detail, "binlog") {
			t.Errorf("check's stream item on b = %+v (found %v), want a failure saying the binlog lacks the transactions", it, ok)
		}
		err := RunRelay(t, only).StoppedWith(t)
		if code := relay.ExitCode(err); code != relay.ExitPurged || !errors.Is(err, binlog.ErrPurged) {
			t.Errorf("relay on b alone stopped with exit %d (%v), want %d (purged)", code, err, relay.ExitPurged)
		}
		return
	}
	a.Kill() // the preferred replica dies: b cannot serve the position
	if mode == resetProved {
		err := RunRelay(t, cfg).StoppedWith(t)
		if relay.ExitCode(err) != relay.ExitTransient || !errors.Is(err, source.ErrUnreachable) ||
			!strings.Contains(err.Error(), source.ErrUnproven.Error()) {
			t.Fatalf("first start with a down and b reset: exit %d (%v), want %d, a unreachable and b unproven",
				relay.ExitCode(err), err, relay.ExitTransient)
		}
		if recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix); len(recs) != len(first) {
			t.Fatalf("%d records published, want the %d before the outage", len(recs), len(first))
		}
		if err := a.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		p = RunRelay(t, cfg)
		WaitCheckpoint(t, cfg, Head(t, c.Primary), 2*time.Minute)
		if rep := requireExact(t, k, s, cfg.Router.TopicPrefix); rep.Expected != len(first)+len(second)+len(third) {
			t.Fatalf("outbox has %d rows, writers committed %d", rep.Expected, len(first)+len(second)+len(third))
		}
		return
	}
	// The same position set by hand: a checkpoint without a fingerprint.
	cp := loadCheckpoint(t, cfg)
	if out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", cp.GTIDSet, "--schema", "keep", "--yes",
		"--config", WriteConfig(t, cfg)); code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s%s", code, out, errOut)
	}
	p = RunRelay(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("relay logs:\n%s", tailLines(p.Logs(), 30))
		}
	})
	waitHostState(t, p, c.Addrs(b)[0], "purged")
	// The relay waits for a (unreachable: retried), it does not stop.
	Eventually(t, time.Minute, func() error {
		if hostState(p, c.Addrs(a)[0]) != "unreachable" {
			return errors.New("a not yet seen unreachable")
		}
		return nil
	})
	select {
	case <-p.Done():
		t.Fatalf("relay stopped for good (exit %d) while its preferred host is only down: %v\n%s",
			relay.ExitCode(p.Err()), p.Err(), tailLines(p.Logs(), 15))
	default:
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, c.Primary), 2*time.Minute)
	if hostState(p, c.Addrs(a)[0]) != "streaming" {
		t.Errorf("source host a is %q after it came back, want streaming", hostState(p, c.Addrs(a)[0]))
	}
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	if rep.Expected != len(first)+len(second)+len(third) {
		t.Fatalf("outbox has %d rows, writers committed %d", rep.Expected, len(first)+len(second)+len(third))
	}
}
