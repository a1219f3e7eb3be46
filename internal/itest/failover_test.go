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

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/preflight"
)

// Source failover against a MariaDB primary with two GTID replicas: the
// relay reads the replicas (source.hosts: [a, b]), writers commit on the
// primary.

// hostState is the state outbox_relay_source_host gives host.
func hostState(p *InProcess, host string) string {
	for _, st := range []string{"streaming", "behind", "diverged", "purged", "unreachable", "refused", "unchecked"} {
		if testutil.ToFloat64(p.Metrics.SourceHosts.WithLabelValues(host, st)) == 1 {
			return st
		}
	}
	return ""
}

func waitHostState(t *testing.T, p *InProcess, host, want string) {
	t.Helper()
	Eventually(t, time.Minute, func() error {
		if got := hostState(p, host); got != want {
			return fmt.Errorf("source host %s is %q, want %q", host, got, want)
		}
		return nil
	})
}

func published(p *InProcess, cfg config.Config) float64 {
	return testutil.ToFloat64(p.Metrics.Events.WithLabelValues(cfg.Router.TopicPrefix+"alarm", "published"))
}

// writeAsync runs writers in the background; the returned func waits for
// them and returns what they committed.
func writeAsync(t *testing.T, s *Schema, opt WriteOptions) func() []Outcome {
	done := make(chan struct{})
	var out []Outcome
	var err error
	go func() { out, err = s.Write(context.Background(), opt); close(done) }()
	return func() []Outcome {
		t.Helper()
		<-done
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

func requireRunning(t *testing.T, p *InProcess) {
	t.Helper()
	select {
	case <-p.Done():
		t.Fatalf("the relay exited: %v\n%s", p.Err(), tailLines(p.Logs(), 20))
	default:
	}
}

// The replica in use is killed while writers commit: the relay goes on
// with the other one.
func TestFailoverReplicaKilledMidStream(t *testing.T) {
	BrokerOnlyAsSink(t)
	c := StartCluster(t, 2)
	a, b := c.Replicas[0], c.Replicas[1]
	k := StartKafka(t)
	s := c.NewSchema(t, env)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = c.Addrs(a, b)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	waitHostState(t, p, a.Addr, "streaming")

	wait := writeAsync(t, s, WriteOptions{Writers: 4, Transactions: 400, RollbackRate: 0.05, Pace: 2 * time.Millisecond})
	Eventually(t, time.Minute, func() error {
		if n := published(p, cfg); n < 200 {
			return fmt.Errorf("%v events published", n)
		}
		return nil
	})
	a.Kill() // mid-stream: the writers are still committing
	before := published(p, cfg)
	committed := wait()
	if before >= float64(len(committed)) {
		t.Fatalf("all %d events were published before the kill", len(committed))
	}
	WaitCheckpoint(t, cfg, Head(t, c.Primary), 2*time.Minute)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	if rep.Expected != len(committed) {
		t.Fatalf("outbox has %d rows, writers committed %d", rep.Expected, len(committed))
	}
	requireRunning(t, p)
	if st := hostState(p, b.Addr); st != "streaming" {
		t.Fatalf("host %s is %q, want streaming", b.Addr, st)
	}
	if !strings.Contains(p.Logs(), `"host":"`+b.Addr+`","preference":2,"hosts":2,"message":"source host in use"`) {
		t.Fatalf("no log line says %s is in use:\n%s", b.Addr, tailLines(p.Logs(), 20))
	}
	t.Logf("%s killed after %.0f of %d events; %s", a.Addr, before, len(committed), rep)
}

// The surviving replica is behind the checkpoint (its replication
// stopped): the relay waits, not ready and never exiting, and goes on when
// the replica catches up.
func TestFailoverWaitsForReplicaBehind(t *testing.T) {
	BrokerOnlyAsSink(t)
	c := StartCluster(t, 2)
	a, b := c.Replicas[0], c.Replicas[1]
	k := StartKafka(t)
	s := c.NewSchema(t, env)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = c.Addrs(a, b)
	p := RunRelay(t, cfg)
	p.WaitReady(t)

	if err := b.Exec("STOP SLAVE"); err != nil {
		t.Fatal(err)
	}
	first, err := s.Write(context.Background(), WriteOptions{Writers: 4, Transactions: 100, Tag: "a"})
	if err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, c.Primary), time.Minute) // read from a: past b
	a.Kill()
	wait := writeAsync(t, s, WriteOptions{Writers: 4, Transactions: 150, Pace: 2 * time.Millisecond, Tag: "b"})

	Eventually(t, 30*time.Second, func() error {
		logs := p.Logs()
		if !strings.Contains(logs, "waiting for a source host to catch up") ||
			!strings.Contains(logs, `"host":"`+b.Addr+`","state":"behind"`) {
			return errors.New("the relay does not say it waits for a behind host")
		}
		return nil
	})
	// It keeps waiting: not ready, not exited, nothing called purged.
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		requireRunning(t, p)
		if p.Metrics.Ready.Load() {
			t.Fatal("ready while no source host is usable")
		}
	}
	if st := hostState(p, b.Addr); st != "behind" {
		t.Fatalf("host %s is %q, want behind", b.Addr, st)
	}
	// check passes (a check before `run` does not block the start): a is
	// down, b behind.
	r := preflight.Run(context.Background(), cfg)
	if !r.OK() {
		t.Fatalf("check fails with one host behind: %+v", r)
	}
	requireItem(t, r, "usable hosts", preflight.Warn, "all behind the checkpoint")
	requireItem(t, r, "position", preflight.Warn, "behind the checkpoint: it is at 0-1-")
	if err := b.Exec("START SLAVE"); err != nil {
		t.Fatal(err)
	}
	second := wait()
	WaitCheckpoint(t, cfg, Head(t, c.Primary), 2*time.Minute)
	p.WaitReady(t)
	requireRunning(t, p)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	if rep.Expected != len(first)+len(second) {
		t.Fatalf("outbox has %d rows, writers committed %d", rep.Expected, len(first)+len(second))
	}
	if logs := p.Logs(); strings.Contains(logs, "purged") {
		t.Fatalf("a behind host was called purged:\n%s", logs)
	}
	waitHostState(t, p, b.Addr, "streaming")
}

// A replica with an errant transaction (an outbox row written directly on
// it) is refused with an error that says so; with a good host besides it,
// the relay reads that one, and never publishes the errant row.
func TestFailoverRefusesDivergedReplica(t *testing.T) {
	BrokerOnlyAsSink(t)
	c := StartCluster(t, 2)
	a, b := c.Replicas[0], c.Replicas[1]
	k := StartKafka(t)
	s := c.NewSchema(t, env)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = c.Addrs(a)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	committed, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 50, Tag: "a"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, a, b)

	// The errant transaction takes b's next sequence number, under b's own
	// server_id; the primary's next transaction takes the same number, and
	// b's replication stops on it (gtid_strict_mode).
	if err := b.Exec(fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ('errant-1', 'alarm', 'dev-errant', 'AlarmCreated', '{"seq":1}')`, s.Table())); err != nil {
		t.Fatal(err)
	}
	more, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 1, Tag: "b"})
	if err != nil {
		t.Fatal(err)
	}
	committed = append(committed, more...)
	WaitCheckpoint(t, cfg, Head(t, c.Primary), time.Minute)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}

	// Only b: refused, the relay stops with the reason.
	only := cfg
	only.Source.Hosts = c.Addrs(b)
	err = RunRelay(t, only).StoppedWith(t)
	if !errors.Is(err, binlog.ErrPositionDiverged) || !strings.Contains(err.Error(), b.Addr+" has diverged from the checkpoint") ||
		!strings.Contains(err.Error(), "without the checkpoint's") {
		t.Fatalf("relay on the diverged replica alone: %v", err)
	}
	t.Logf("refused: %v", err)
	r := preflight.Run(context.Background(), only)
	requireItem(t, r, "position", preflight.Fail, "diverged from the checkpoint")
	requireItem(t, r, "usable hosts", preflight.Fail, "none of the 1")

	// b first, a second: b refused, a used.
	both := cfg
	both.Source.Hosts = c.Addrs(b, a)
	p = RunRelay(t, both)
	p.WaitReady(t)
	if st := hostState(p, b.Addr); st != "diverged" {
		t.Fatalf("host %s is %q, want diverged", b.Addr, st)
	}
	if st := hostState(p, a.Addr); st != "streaming" {
		t.Fatalf("host %s is %q, want streaming", a.Addr, st)
	}
	if logs := p.Logs(); !strings.Contains(logs, `"host":"`+b.Addr+`","state":"diverged","message":"source host refused"`) {
		t.Fatalf("no log line refuses %s:\n%s", b.Addr, tailLines(logs, 20))
	}
	more, err = s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 50, Tag: "c"})
	if err != nil {
		t.Fatal(err)
	}
	committed = append(committed, more...)
	WaitCheckpoint(t, cfg, Head(t, c.Primary), time.Minute)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}

	// Now the primary went past b's sequence numbers: b looks behind by its
	// position alone, and a (which has the checkpoint) shows its errant
	// GTID.
	p = RunRelay(t, both)
	p.WaitReady(t)
	Eventually(t, 10*time.Second, func() error {
		if logs := p.Logs(); !strings.Contains(logs, "errant GTIDs 0-3-") {
			return fmt.Errorf("no errant GTIDs named for %s", b.Addr)
		}
		return nil
	})
	if st := hostState(p, b.Addr); st != "diverged" {
		t.Fatalf("host %s is %q, want diverged", b.Addr, st)
	}
	r = preflight.Run(context.Background(), both)
	if it, _ := r.Find("position"); it.Status != preflight.Fail || !strings.Contains(it.Detail, "errant GTIDs 0-3-") || !r.OK() {
		t.Fatalf("check with a diverged and a good host: %+v", r)
	}
	requireItem(t, r, "usable hosts", preflight.Pass, "1 of 2")
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix) // the errant row is not in the primary's outbox
	if rep.Expected != len(committed) {
		t.Fatalf("outbox has %d rows, writers committed %d", rep.Expected, len(committed))
	}
}
