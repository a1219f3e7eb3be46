//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/preflight"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// startMixedCluster starts a primary and len(lsu) replicas; lsu[i] says
// whether replica i runs with log_slave_updates.
func startMixedCluster(t *testing.T, lsu ...bool) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var servers []*devdb.Server
	t.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	for i := 0; i <= len(lsu); i++ {
		opts := devdb.Options{Dir: filepath.Join(dir, fmt.Sprintf("db%d", i+1)), ServerID: i + 1,
			Settings: map[string]string{"innodb-buffer-pool-size": "32M"}}
		if i > 0 && lsu[i-1] {
			opts.Settings["log-slave-updates"] = ""
		}
		srv, err := devdb.Start(ctx, opts)
		if err != nil {
			t.Fatalf("start server %d: %v", i+1, err)
		}
		servers = append(servers, srv)
	}
	c := &Cluster{Primary: servers[0], Replicas: servers[1:]}
	if err := c.Primary.Exec("CREATE USER '"+replUser+"'@'%' IDENTIFIED BY '"+replPassword+"'",
		"GRANT REPLICATION SLAVE ON *.* TO '"+replUser+"'@'%'"); err != nil {
		t.Fatal(err)
	}
	for _, r := range c.Replicas {
		if err := r.Replicate(c.Primary, replUser, replPassword); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// waitApplied waits until r's gtid_slave_pos reaches the primary's head.
func waitApplied(t *testing.T, c *Cluster, r *devdb.Server) {
	t.Helper()
	head := Head(t, c.Primary)
	Eventually(t, time.Minute, func() error {
		rows, err := r.Query("SELECT @@GLOBAL.gtid_slave_pos")
		if err != nil {
			return err
		}
		want, _ := binlog.ParseSet("mariadb", head)
		have, err := binlog.ParseSet("mariadb", rows[0][0])
		if err != nil {
			return err
		}
		if !have.Contain(want) {
			return fmt.Errorf("%s applied %s, primary at %s", r.Addr, rows[0][0], head)
		}
		return nil
	})
}

// A replica without log_slave_updates is not chosen as a source host. The
// failure guarded against: a replica without log_slave_updates (MariaDB's
// default) in source.hosts. Its binlog holds none of the primary's
// transactions and never will; its gtid_slave_pos is exactly the checkpoint
// while the relay is caught up (any quiet moment). The gtid_slave_pos
// rule of Relate ("it logs what comes next") calls it Contains, the server
// accepts its own slave position, and when the preferred replica dies the
// relay streams from b: ready, streaming, heartbeats committed, and not one
// of the transactions committed since is ever published, even after the
// preferred replica is back (the relay never moves back).
func TestReplicaWithoutLogSlaveUpdatesNotChosen(t *testing.T) {
	BrokerOnlyAsSink(t)
	c := startMixedCluster(t, true, false)
	a, b := c.Replicas[0], c.Replicas[1]
	k := StartKafka(t)
	name := env.Unique("app")
	if err := c.Primary.Exec("CREATE DATABASE "+name, fmt.Sprintf(OutboxDDL, name), fmt.Sprintf(AlarmDDL, name),
		fmt.Sprintf(SeqDDL, name), "CREATE USER IF NOT EXISTS 'relay'@'%' IDENTIFIED BY 'relay-pw'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'relay'@'%'"); err != nil {
		t.Fatal(err)
	}
	s := &Schema{DB: c.Primary, Name: name}
	c.WaitReplicated(t, time.Minute, a)
	waitApplied(t, c, b)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = c.Addrs(a, b)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	first, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "a"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, a)
	waitApplied(t, c, b)
	cp := WaitCheckpoint(t, cfg, Head(t, c.Primary), time.Minute)
	rows, _ := b.Query("SELECT @@GLOBAL.gtid_binlog_state, @@GLOBAL.gtid_slave_pos, @@GLOBAL.log_slave_updates")
	t.Logf("checkpoint %s; b binlog state / slave pos / log_slave_updates %v", cp.GTIDSet, rows)
	a.Kill() // the preferred replica dies while the relay is caught up (a quiet moment)
	// B's binlog lacks what it applies; the relay does not stream
	// from it (it waits for a).
	waitHostState(t, p, b.Addr, "purged")
	// check, as an operator would run it before restarting the unit now.
	rep := preflight.Run(context.Background(), cfg)
	for _, it := range rep {
		if strings.HasPrefix(it.Target, "source") && it.Status != preflight.Pass {
			t.Logf("check: %s %s %s: %s", it.Target, it.Name, it.Status, it.Detail)
		}
	}
	checkOK := rep.OK()
	t.Logf("check with a down, b without log_slave_updates: OK=%v", checkOK)
	second, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "b"})
	if err != nil {
		t.Fatal(err)
	}
	waitApplied(t, c, b)
	if checkOK {
		t.Errorf("check passes with b, whose binlog never receives the primary's transactions, as the only usable host")
	}
	t.Logf("after a died: b is %q, ready %v; b binlog state %v", hostState(p, b.Addr), p.Metrics.Ready.Load(),
		func() any { r, _ := b.Query("SELECT @@GLOBAL.gtid_binlog_state"); return r }())
	if err := a.Start(context.Background()); err != nil { // the preferred replica is back
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, a)
	deadline := time.Now().Add(45 * time.Second)
	head := Head(t, c.Primary)
	want, _ := binlog.ParseSet("mariadb", head)
	for time.Now().Before(deadline) {
		if cp := loadCheckpoint(t, cfg); cp != nil {
			have, _ := binlog.ParseSet("mariadb", cp.GTIDSet)
			if have.Contain(want) {
				break
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	if cp := loadCheckpoint(t, cfg); cp != nil {
		have, _ := binlog.ParseSet("mariadb", cp.GTIDSet)
		if !have.Contain(want) {
			recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
			t.Fatalf("45 s after a came back (and 60 s after %d transactions were committed) the checkpoint is still %s, head %s; "+
				"%d of %d events published; the relay streams from %s (state %q, ready %v):\n%s",
				len(second), cp.GTIDSet, head, len(recs), len(first)+len(second), b.Addr, hostState(p, b.Addr), p.Metrics.Ready.Load(),
				tailLines(p.Logs(), 6))
		}
	}
	requireExact(t, k, s, cfg.Router.TopicPrefix)
}

// RESET MASTER on the source stops the relay as diverged, naming its
// server_id, never skipping the events after the reset. The failure guarded
// against: RESET MASTER on the source the relay reads (a primary: a DBA
// reclaiming disk, a restore from a backup whose binlogs were not kept; the
// same happens when a crash with sync_binlog=0 loses the binlog's tail).
// Sequence numbers of the host's own server_id start again from 1. Relate
// calls the host "behind" (its highest sequence in the domain is below the
// checkpoint's) although it can never be behind on transactions it wrote
// itself (MySQL's rule, the host's own server_uuid, has no MariaDB
// counterpart): the relay "waits for it to catch up", and once the new
// history's sequence numbers pass the checkpoint's, it resumes after the
// checkpoint's GTID, which now names a different transaction: every event
// committed after the reset up to that sequence number is skipped,
// silently.
func TestResetMasterOnPrimaryStopsAsDiverged(t *testing.T) {
	BrokerOnlyAsSink(t)
	c := startMixedCluster(t)
	k := StartKafka(t)
	s := c.NewSchema(t, env)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = []string{c.Primary.Addr}
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "a"}); err != nil {
		t.Fatal(err)
	}
	cp := WaitCheckpoint(t, cfg, Head(t, c.Primary), time.Minute)
	if err := p.Stop(); err != nil { // a rolling restart, maintenance
		t.Fatal(err)
	}
	if err := c.Primary.Exec("RESET MASTER"); err != nil {
		t.Fatal(err)
	}
	// New history below the checkpoint's sequence number when the relay
	// connects: the host is seen to lack transactions it wrote itself. (Once
	// the new history passes the checkpoint's sequence number before the
	// relay connects, GTIDs alone cannot tell it from a host that is ahead:
	// docs/source.md, "Source failover".)
	second, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 10, Tag: "b"})
	if err != nil {
		t.Fatal(err)
	}
	head := Head(t, c.Primary)
	t.Logf("checkpoint before the reset %s, head after it %s", cp.GTIDSet, head)
	if !gtidBelow(t, head, cp.GTIDSet) {
		t.Fatalf("the new history %s already passed the checkpoint %s: write fewer transactions", head, cp.GTIDSet)
	}
	p = RunRelay(t, cfg)
	// The relay's verdict on the host comes first (it stops, or, as before
	// the fix, waits for the host to "catch up"); then the new history
	// passes the checkpoint's sequence number.
	Eventually(t, time.Minute, func() error {
		select {
		case <-p.Done():
			return nil
		default:
		}
		if st := hostState(p, c.Primary.Addr); st != "" && st != "unchecked" && st != "unreachable" {
			return nil
		}
		return fmt.Errorf("the relay has no verdict on %s yet", c.Primary.Addr)
	})
	more, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 60, Tag: "c"})
	if err != nil {
		t.Fatal(err)
	}
	second = append(second, more...)
	// The host lost transactions it wrote itself: diverged, a
	// stop for an operator (exit 65), and nothing after the reset is
	// published from a position that names another transaction.
	err = p.StoppedWith(t)
	if relay.ExitCode(err) != relay.ExitData || !errors.Is(err, binlog.ErrPositionDiverged) || !strings.Contains(err.Error(), "own server_id") {
		t.Fatalf("after RESET MASTER on the source: exit %d (%v), want %d, diverged, naming its own server_id", relay.ExitCode(err), err, relay.ExitData)
	}
	rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if len(rep.Unexpected)+len(rep.Duplicates) > 0 || len(rep.Missing) != len(second) {
		t.Fatalf("after the stop: %s; want exactly the %d events committed after the reset unpublished", rep, len(second))
	}
}

// check on two hosts at once passes: their stream probes do not collide.
// The failure guarded against: `check` on two hosts at once (run before
// `run` on both after a power cut or a fleet-wide restart; docs/ha.md:
// instances on different hosts share one configuration, so one
// source.server_id). Both stream probes register with
// ProbeServerID(source.server_id), the same id: the server drops the first
// probe's dump connection when the second registers, and that check fails
// the host.
func TestConcurrentChecksProbesDoNotCollide(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, _, cfg := env.Pipeline(t)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	fails := 0
	var details []string
	for round := 0; round < 10; round++ {
		res := make(chan preflight.Report, 2)
		for i := 0; i < 2; i++ {
			go func() { res <- preflight.Run(context.Background(), cfg) }()
		}
		for i := 0; i < 2; i++ {
			r := <-res
			if it, ok := r.Find("stream"); ok && it.Status == preflight.Fail {
				fails++
				details = append(details, it.Detail)
			} else if !r.OK() {
				fails++
				details = append(details, fmt.Sprintf("%+v", r))
			}
		}
	}
	if fails > 0 {
		t.Fatalf("%d of 20 concurrent checks of a healthy source failed: %s", fails, details[0])
	}
}

// When the chosen replica stops replicating and another has the events, the
// relay moves to it. The failure guarded against: the replica the relay
// reads stops replicating (a replication error, STOP SLAVE for a backup, an
// errant DBA statement under gtid_strict_mode) while the other replica of
// source.hosts keeps up. The host was judged once, before streaming;
// nothing judges it again: the relay stays on it, ready and healthy
// (heartbeats), while every event committed since waits on a host that does
// not replicate, however long the other host has had them.
func TestChosenReplicaStopsReplicatingFailsOver(t *testing.T) {
	BrokerOnlyAsSink(t)
	c := StartCluster(t, 2)
	a, b := c.Replicas[0], c.Replicas[1]
	k := StartKafka(t)
	s := c.NewSchema(t, env)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = c.Addrs(a, b)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	if err := a.Exec("STOP SLAVE"); err != nil {
		t.Fatal(err)
	}
	second, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "b"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, b)
	// The relay notices a's head standing still while b has more
	// (stale.go: two samples 10 s apart) and moves to b.
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) && published(p, cfg) < float64(len(second)) {
		time.Sleep(500 * time.Millisecond)
	}
	n := published(p, cfg)
	if n < float64(len(second)) {
		t.Fatalf("30 s after %d transactions reached replica b, %v events published: the relay stays on a (state %q, ready %v), "+
			"whose replication is stopped", len(second), n, hostState(p, a.Addr), p.Metrics.Ready.Load())
	}
}

// Two instances on two hosts from one configuration file
// (docs/ha.md: "same configuration ... give each its own source.server_id
// ... if they share a host", so on different hosts they share it). The
// active one freezes (SIGSTOP here; a VM pause, or a dead node whose TCP
// connections stay half-open) while its binlog dump connection is open.
// The standby takes the lease and connects to the source with the same
// server_id.
func TestTakeoverFromFrozenActiveWithSharedServerID(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	cfg.Log.Level = "info"
	f := &fleet{t: t, stop: make(chan struct{}), stopped: make(chan struct{})}
	for i := 0; i < 2; i++ {
		c := cfg // same source.server_id on both "hosts"
		c.HTTP.Listen = freeAddr(t)
		m := &member{cfg: c, path: WriteConfig(t, c)}
		m.p = env.StartProc(t, m.path)
		f.members = append(f.members, m)
	}
	go f.watch()
	t.Cleanup(f.close)
	active, _ := f.waitStreaming(nil, time.Minute)
	time.Sleep(3 * time.Second)
	wait := writeAsync(t, s, WriteOptions{Writers: 2, Transactions: 200, Pace: 5 * time.Millisecond})
	p := f.proc(active)
	_ = p.cmd.Process.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	other := f.proc(1 - active)
	start := time.Now()
	for time.Since(start) < 30*time.Second && !other.Exited() &&
		series(f.members[1-active].cfg.HTTP.Listen, `outbox_relay_up{state="streaming"}`) != 1 {
		time.Sleep(50 * time.Millisecond)
	}
	// let it stream a while with the frozen one's connection still open
	time.Sleep(5 * time.Second)
	wait()
	if other.Exited() {
		t.Fatalf("the standby took over and exited (code %d) while the frozen active's dump connection (same server_id) was open:\n%s",
			other.cmd.ProcessState.ExitCode(), tailLines(other.Output(), 6))
	}
	if series(f.members[1-active].cfg.HTTP.Listen, `outbox_relay_up{state="streaming"}`) != 1 {
		t.Fatalf("the standby does not stream 35 s after the active froze:\n%s", tailLines(other.Output(), 6))
	}
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
	select {
	case <-time.After(3 * time.Second):
	}
	if other.Exited() {
		t.Fatalf("after the frozen instance resumed, the active one exited (code %d):\n%s",
			other.cmd.ProcessState.ExitCode(), tailLines(other.Output(), 6))
	}
}

// gtidBelow says a MariaDB GTID position does not contain another: it lacks
// some of want's transactions.
func gtidBelow(t testing.TB, have, want string) bool {
	t.Helper()
	h, err := gomysql.ParseMariadbGTIDSet(have)
	if err != nil {
		t.Fatalf("parse gtid set %q: %v", have, err)
	}
	w, err := gomysql.ParseMariadbGTIDSet(want)
	if err != nil {
		t.Fatalf("parse gtid set %q: %v", want, err)
	}
	return !h.Contain(w)
}

// Failover goes to a host that has every transaction after the checkpoint,
// also when it never logged an idle domain. The failure guarded against:
// MariaDB with two domains, one of them idle (a DBA session with
// gtid_domain_id=1 once, another application's domain that went quiet).
// Replica b's binlog has no transaction of domain 1: it was provisioned
// from a backup, or its binlog was reset, after domain 1's last write. The
// checkpoint holds 1-1-N (the relay started from a's gtid_binlog_pos). When
// a dies, b has every transaction after the checkpoint in every domain, yet
// Relate calls it "behind" (no transaction of domain 1) and the relay waits
// for it forever: not ready, never exiting, /healthz 200, while b will
// never log a domain-1 transaction.
func TestFailoverToHostWithoutIdleDomain(t *testing.T) {
	BrokerOnlyAsSink(t)
	c := StartCluster(t, 2)
	a, b := c.Replicas[0], c.Replicas[1]
	k := StartKafka(t)
	s := c.NewSchema(t, env)
	// One transaction in domain 1, long ago.
	if err := c.Primary.Exec("SET SESSION gtid_domain_id = 1",
		"CREATE TABLE "+s.Name+".dba_note (id INT PRIMARY KEY)",
		"INSERT INTO "+s.Name+".dba_note VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, a, b)
	// b is re-provisioned: its binlog starts empty (RESET MASTER keeps
	// gtid_slave_pos, as a restore from mariabackup does).
	if err := b.Exec("STOP SLAVE", "RESET MASTER", "START SLAVE"); err != nil {
		t.Fatal(err)
	}
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = c.Addrs(a, b)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	first, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "a"})
	if err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, a)
	cp := WaitCheckpoint(t, cfg, Head(t, c.Primary), time.Minute)
	rows, _ := b.Query("SELECT @@GLOBAL.gtid_binlog_state, @@GLOBAL.gtid_slave_pos")
	t.Logf("checkpoint %s; b binlog state / slave pos %v", cp.GTIDSet, rows)
	// b's binlog holds every domain-0 transaction after the checkpoint.
	a.Kill()
	second, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "b"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(45 * time.Second)
	for !p.Metrics.Ready.Load() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if !p.Metrics.Ready.Load() {
		host, port, _ := strings.Cut(b.Addr, ":")
		logs, _ := b.Query("SHOW BINARY LOGS")
		out, err := exec.Command("mariadb-binlog", "--read-from-remote-server", "--host="+host, "--port="+port, "--user=root",
			"--password="+devdb.RootPassword, "--start-position="+cp.GTIDSet, "--short-form", logs[0][0]).CombinedOutput()
		t.Logf("MariaDB on b, asked for %s: err %v, %d bytes: %s", cp.GTIDSet, err, len(out), tailLines(string(out), 3))
		// What go-mysql (with @slave_gtid_strict_mode=1) gets from b at
		// the checkpoint: events, or a refusal?
		pn, _ := strconv.Atoi(port)
		syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: 9911, Flavor: "mariadb", Host: host,
			Port: uint16(pn), User: "root", Password: devdb.RootPassword})
		defer syncer.Close()
		set, _ := gomysql.ParseMariadbGTIDSet(cp.GTIDSet)
		if st, err := syncer.StartSyncGTID(set); err != nil {
			t.Logf("go-mysql StartSyncGTID on b: %v", err)
		} else {
			gtids := 0
			for i := 0; i < 200; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				ev, err := st.GetEvent(ctx)
				cancel()
				if err != nil {
					t.Logf("go-mysql on b after %d events, %d GTIDs: %v", i, gtids, err)
					break
				}
				if g, ok := ev.Event.(*replication.MariadbGTIDEvent); ok {
					gtids++
					if gtids <= 2 {
						t.Logf("go-mysql on b: GTID %d-%d-%d", g.GTID.DomainID, g.GTID.ServerID, g.GTID.SequenceNumber)
					}
				}
			}
		}
		t.Fatalf("45 s after a died the relay still waits for b (state %q), %d events unpublished:\n%s",
			hostState(p, b.Addr), len(second), tailLines(p.Logs(), 4))
	}
	WaitCheckpoint(t, cfg, Head(t, c.Primary), time.Minute)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	if rep.Expected != len(first)+len(second) {
		t.Fatalf("outbox has %d rows, writers committed %d", rep.Expected, len(first)+len(second))
	}
}
