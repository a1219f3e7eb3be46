//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/preflight"
	"github.com/outbox-relay/outbox-relay/source"
)

// A source host is used only when it proves that it holds the checkpoint's
// last transaction: GTIDs alone cannot tell a server of the checkpoint's
// history from an unrelated one that wrote as many transactions under the
// same server_id and domain (every MariaDB server starts at 0-1-1).

// onlyTagged fails unless every record consumed under prefix is an event
// id of tag (writeEveryday's), n of them, each once.
func onlyTagged(t *testing.T, k *Kafka, prefix, tag string, n int) {
	t.Helper()
	recs := Consume(t, k.Brokers, prefix)
	seen := map[string]bool{}
	for _, r := range recs {
		if !strings.HasPrefix(r.ID, tag+"-") {
			t.Fatalf("published %q, a row of another server (of %d records)", r.ID, len(recs))
		}
		if seen[r.ID] {
			t.Fatalf("published %q twice", r.ID)
		}
		seen[r.ID] = true
	}
	if len(seen) != n {
		t.Fatalf("published %d rows of %s, want %d", len(seen), tag, n)
	}
}

// Two independent servers, both server_id 1 and domain 0 with the same
// set-up: A holds 100 outbox transactions, B 300 others, so B's GTID state
// is past everything the relay read from A. When A dies, B is refused as
// another history (named), nothing of B is published and the checkpoint
// stays where A left it; a fresh relay pointed at B alone stops with the
// same refusal, and `check` fails B's proof.
func TestFailoverRefusesUnrelatedServerWithSameServerID(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	a := startServer(t, nil)
	b := startServer(t, nil)
	seqA, seqB := 0, 0
	writeEveryday(t, a, &Schema{DB: a, Name: "app"}, "a", 100, &seqA)
	writeEveryday(t, b, &Schema{DB: b, Name: "app"}, "b", 300, &seqB)
	headA, headB := Head(t, a), Head(t, b)
	if !gtidBelow(t, headA, headB) {
		t.Fatalf("A at %s, B at %s: B must be past A under the same server_id", headA, headB)
	}

	cfg := env.RelayConfig(k, "app.outbox")
	cfg.Source.Hosts = []string{a.Addr, b.Addr}
	cfg.Source.Start = "earliest"
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	cp := waitCaughtUp(t, p, cfg, a)
	if cp.Fingerprint == nil || cp.Fingerprint.Rows != 3 {
		t.Fatalf("checkpoint %s carries fingerprint %+v, want one of A's last transaction (3 rows)", cp.GTIDSet, cp.Fingerprint)
	}
	requireProof(t, cfg, a, preflight.Pass, "the same rows")
	requireProof(t, cfg, b, preflight.Fail, "other values")
	a.Kill()

	// The relay chooses again: A is unreachable, B is judged.
	Eventually(t, time.Minute, func() error {
		switch st := hostState(p, b.Addr); st {
		case "diverged":
			return nil
		case "streaming":
			t.Fatalf("the relay streams from %s, a server of another history", b.Addr)
		default:
			return fmt.Errorf("host %s is %q", b.Addr, st)
		}
		return nil
	})
	if !strings.Contains(p.Logs(), source.ErrForeignHistory.Error()) {
		t.Fatalf("no log line names the refusal (%q):\n%s", source.ErrForeignHistory, tailLines(p.Logs(), 20))
	}
	requireRunning(t, p) // A may come back: the relay waits, not ready
	if got := loadCheckpoint(t, cfg); got.GTIDSet != cp.GTIDSet {
		t.Fatalf("checkpoint moved from %s to %s while A was down", cp.GTIDSet, got.GTIDSet)
	}
	onlyTagged(t, k, cfg.Router.TopicPrefix, "a", 300)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}

	// A fresh process pointed at B alone: the same check at start-up.
	cfg.Source.Hosts = []string{b.Addr}
	p = RunRelay(t, cfg)
	err := p.StoppedWith(t)
	if !errors.Is(err, source.ErrForeignHistory) || !errors.Is(err, binlog.ErrPositionDiverged) {
		t.Fatalf("relay on %s alone stopped with %v, want ErrForeignHistory", b.Addr, err)
	}
	if got := loadCheckpoint(t, cfg); got.GTIDSet != cp.GTIDSet {
		t.Fatalf("checkpoint moved from %s to %s", cp.GTIDSet, got.GTIDSet)
	}
	onlyTagged(t, k, cfg.Router.TopicPrefix, "a", 300)
	requireProof(t, cfg, b, preflight.Fail, "other values")
	t.Logf("refused: %v", err)
}

// requireProof runs check on cfg and wants host's "proof" item at st,
// its detail containing detail.
func requireProof(t *testing.T, cfg config.Config, host *devdb.Server, st preflight.Status, detail string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep := preflight.Run(ctx, cfg)
	for _, it := range rep {
		if it.Target == "source "+host.Addr && it.Name == "proof" {
			if it.Status != st || !strings.Contains(it.Detail, detail) {
				t.Fatalf("check: proof of %s is %s %q, want %s with %q", host.Addr, it.Status, it.Detail, st, detail)
			}
			return
		}
	}
	t.Fatalf("check has no proof item for %s: %+v", host.Addr, rep)
}

// startPair starts a MariaDB primary (server_id 1) and one GTID replica
// (server_id 2, log_slave_updates) with replicaSettings on top.
func startPair(t *testing.T, replicaSettings map[string]string) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	settings := []map[string]string{{}, {"log-slave-updates": ""}}
	for k, v := range replicaSettings {
		settings[1][k] = v
	}
	var servers []*devdb.Server
	for i, set := range settings {
		set["innodb-buffer-pool-size"] = "32M"
		srv, err := devdb.Start(ctx, devdb.Options{Dir: fmt.Sprintf("%s/db%d", dir, i+1), ServerID: i + 1, Settings: set})
		if err != nil {
			t.Fatalf("start server %d: %v", i+1, err)
		}
		t.Cleanup(srv.Stop)
		servers = append(servers, srv)
	}
	c := &Cluster{Primary: servers[0], Replicas: servers[1:]}
	if err := c.Primary.Exec("CREATE USER '"+replUser+"'@'%' IDENTIFIED BY '"+replPassword+"'",
		"GRANT REPLICATION SLAVE ON *.* TO '"+replUser+"'@'%'"); err != nil {
		t.Fatal(err)
	}
	if err := c.Replicas[0].Replicate(c.Primary, replUser, replPassword); err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, c.Replicas...)
	return c
}

// sourceRelay is a relay reading a primary and its replica, in that order
// (startPairRelay), or one server alone (startServerRelay: replica and c
// nil), ready.
type sourceRelay struct {
	c                *Cluster
	primary, replica *devdb.Server
	k                *Kafka
	s                *Schema
	cfg              config.Config
	p                *InProcess
}

func startPairRelay(t *testing.T, replicaSettings map[string]string) *sourceRelay {
	t.Helper()
	c := startPair(t, replicaSettings)
	r := &sourceRelay{c: c, primary: c.Primary, replica: c.Replicas[0], k: StartKafka(t)}
	r.s = c.NewSchema(t, env)
	r.cfg = env.RelayConfig(r.k, r.s.Table())
	r.cfg.Source.Hosts = []string{r.primary.Addr, r.replica.Addr}
	r.p = RunRelay(t, r.cfg)
	r.p.WaitReady(t)
	return r
}

func startServerRelay(t *testing.T) *sourceRelay {
	t.Helper()
	k := StartKafka(t)
	db := startServer(t, nil)
	r := &sourceRelay{primary: db, k: k, s: &Schema{DB: db, Name: "app"}}
	r.cfg = env.RelayConfig(k, r.s.Table())
	r.cfg.Source.Hosts = []string{db.Addr}
	r.p = RunRelay(t, r.cfg)
	r.p.WaitReady(t)
	return r
}

// Failover from the primary to a real replica with log_slave_updates,
// whose binlog holds the primary's transactions in other bytes: compressed
// row events (log_bin_compress) and no column metadata (NO_LOG, so
// signedness and names are not in its table maps). The replica proves it
// holds the checkpoint's last transaction and the relay goes on there,
// through its promotion: every row exactly once.
func TestFailoverToReplicaProvesItHoldsLastTransaction(t *testing.T) {
	BrokerOnlyAsSink(t)
	pr := startPairRelay(t, map[string]string{"log-bin-compress": "ON", "log-bin-compress-min-len": "10", "binlog-row-metadata": "NO_LOG"})
	c, primary, replica, k, s, cfg, p := pr.c, pr.primary, pr.replica, pr.k, pr.s, pr.cfg, pr.p
	waitHostState(t, p, primary.Addr, "streaming")
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 4, Transactions: 50, Tag: "p"}); err != nil {
		t.Fatal(err)
	}
	cp := waitCaughtUp(t, p, cfg, primary)
	if cp.Fingerprint == nil {
		t.Fatalf("checkpoint %s has no fingerprint", cp.GTIDSet)
	}
	c.WaitReplicated(t, time.Minute, replica)
	requireCompressedRows(t, replica)
	promoted := failOverAndPromote(t, p, cfg, primary, replica, s, 30)
	rep := requireExact(t, k, promoted, cfg.Router.TopicPrefix)
	if rep.Expected != 260 || rep.Received != rep.Expected {
		t.Fatalf("%s: want 260 rows each published once", rep)
	}
	requireRunning(t, p)
}

// failOverAndPromote kills primary, waits until p streams from replica
// once it proved it holds the checkpoint's last transaction, promotes the
// replica and has it take transactions of s's writes, and waits until p
// published them. It returns s on the replica.
func failOverAndPromote(t *testing.T, p *InProcess, cfg config.Config, primary, replica *devdb.Server, s *Schema, transactions int) *Schema {
	t.Helper()
	primary.Kill()
	waitHostState(t, p, replica.Addr, "streaming")
	requireProvedBy(t, p, replica.Addr)
	if err := replica.Exec("STOP SLAVE", "RESET SLAVE ALL"); err != nil {
		t.Fatal(err)
	}
	promoted := &Schema{DB: replica, Name: s.Name}
	if _, err := promoted.Write(context.Background(), WriteOptions{Writers: 2, Transactions: transactions, Tag: "r"}); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, p, cfg, replica)
	requireRunning(t, p)
	return promoted
}

// requireCompressedRows fails unless db's current binlog holds compressed
// row events (log_bin_compress): bytes other than the primary's.
func requireCompressedRows(t *testing.T, db *devdb.Server) {
	t.Helper()
	rows, err := db.Query("SHOW BINLOG EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if strings.Contains(strings.ToLower(r[2]), "compressed") {
			return
		}
	}
	t.Fatalf("%s logs no compressed row event (%d events)", db.Addr, len(rows))
}
