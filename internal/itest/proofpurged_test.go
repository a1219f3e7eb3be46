//go:build integration

package itest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/preflight"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/source"
)

// A host that no longer has the checkpoint's last transaction in its
// binlog cannot prove it holds it: unless it is the server the checkpoint
// was read from, the relay stops (purged, exit 66) naming the operator's
// way on, and `checkpoint set` of the same position (which carries no
// fingerprint) is that way.

// The replica the relay fails over to purged its binlogs up to past the
// checkpoint's last transaction (its position is still served): refused as
// unproven, named, the checkpoint unchanged and nothing of it published;
// after `checkpoint set --gtid <the checkpoint> --schema keep` the relay
// reads it, every row exactly once.
func TestReplicaThatPurgedLastTransactionStopsUntilOperatorSetsPosition(t *testing.T) {
	BrokerOnlyAsSink(t)
	pr := startPairRelay(t, nil)
	c, primary, replica, k, s, cfg, p := pr.c, pr.primary, pr.replica, pr.k, pr.s, pr.cfg, pr.p
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "p"}); err != nil {
		t.Fatal(err)
	}
	cp := waitCaughtUp(t, p, cfg, primary)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, replica)
	primary.Kill()
	if err := replica.Exec("STOP SLAVE", "RESET SLAVE ALL", "FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	purgeOldBinlogs(t, replica)
	promoted := &Schema{DB: replica, Name: s.Name}
	if _, err := promoted.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 10, Tag: "r"}); err != nil {
		t.Fatal(err)
	}

	cfg.Source.Hosts = []string{replica.Addr}
	p = RunRelay(t, cfg)
	err := p.StoppedWith(t)
	if !errors.Is(err, source.ErrUnproven) || !errors.Is(err, binlog.ErrPurged) || relay.ExitCode(err) != relay.ExitPurged {
		t.Fatalf("relay on a replica without the last transaction stopped with %v (exit %d), want ErrUnproven (exit %d)",
			err, relay.ExitCode(err), relay.ExitPurged)
	}
	if !strings.Contains(err.Error(), "checkpoint set --gtid '"+cp.GTIDSet+"'") {
		t.Fatalf("the stop does not name the operator's way on: %v", err)
	}
	if got := loadCheckpoint(t, cfg); got.GTIDSet != cp.GTIDSet {
		t.Fatalf("checkpoint moved from %s to %s", cp.GTIDSet, got.GTIDSet)
	}
	if recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix); len(recs) != 40 {
		t.Fatalf("%d records published, want the primary's 40 only", len(recs))
	}
	requireProof(t, cfg, replica, preflight.Fail, "cannot show")

	path := WriteConfig(t, cfg)
	if out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", cp.GTIDSet, "--schema", "keep", "--yes", "--config", path); code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s%s", code, out, errOut)
	}
	p = RunRelay(t, cfg)
	p.WaitReady(t)
	waitCaughtUp(t, p, cfg, replica)
	if rep := requireExact(t, k, promoted, cfg.Router.TopicPrefix); rep.Expected != 50 {
		t.Fatalf("%s: want 50 rows", rep)
	}
	if !strings.Contains(p.Logs(), "checkpoint without a fingerprint") {
		t.Fatalf("no log line says the checkpoint set by hand proves nothing:\n%s", tailLines(p.Logs(), 20))
	}
}

// The server the checkpoint was read from purged its binlogs up to past
// the checkpoint's last transaction (an outbox idle for longer than the
// binlog retention): a restart on it is accepted as the same server, with
// a warning, and goes on.
func TestSameServerThatPurgedLastTransactionIsAccepted(t *testing.T) {
	BrokerOnlyAsSink(t)
	sr := startServerRelay(t)
	k, db, s, cfg, p := sr.k, sr.primary, sr.s, sr.cfg, sr.p
	seq := 0
	writeEveryday(t, db, s, "early", 5, &seq)
	// Transactions without outbox rows after the last one with rows: the
	// checkpoint passes them, its fingerprint stays.
	if err := db.Exec("CREATE TABLE app.other (id INT PRIMARY KEY)", "INSERT INTO app.other VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	cp := waitCaughtUp(t, p, cfg, db)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	purgeOldBinlogs(t, db)
	if cp.Fingerprint == nil || cp.Fingerprint.GTID == cp.GTIDSet {
		t.Fatalf("checkpoint at %s with fingerprint %+v: want one of an earlier transaction", cp.GTIDSet, cp.Fingerprint)
	}

	p = RunRelay(t, cfg)
	p.WaitReady(t)
	writeEveryday(t, db, s, "late", 5, &seq)
	waitCaughtUp(t, p, cfg, db)
	if rep := requireExact(t, k, s, cfg.Router.TopicPrefix); rep.Expected != 30 {
		t.Fatalf("%s: want 30 rows", rep)
	}
	if !strings.Contains(p.Logs(), "accepted as the server the checkpoint was read from") {
		t.Fatalf("no log line says the host was accepted as the same server:\n%s", tailLines(p.Logs(), 20))
	}
}

// The server the relay reads rotates its binlog right after the
// checkpoint's last transaction (FLUSH BINARY LOGS) and crashes: the
// relay's next attempt, and a fresh relay after it, read that transaction
// again from the older binlog file and go on, every row once.
func TestSameServerRotatedAndRestartedProvesLastTransaction(t *testing.T) {
	BrokerOnlyAsSink(t)
	sr := startServerRelay(t)
	k, db, s, cfg, p := sr.k, sr.primary, sr.s, sr.cfg, sr.p
	seq := 0
	writeEveryday(t, db, s, "early", 5, &seq)
	waitCaughtUp(t, p, cfg, db)
	if err := db.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	crashAndRestart(t, db)
	writeEveryday(t, db, s, "mid", 5, &seq)
	waitCaughtUp(t, p, cfg, db)
	requireProvedBy(t, p, db.Addr)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	p = RunRelay(t, cfg)
	p.WaitReady(t)
	requireProvedBy(t, p, db.Addr)
	writeEveryday(t, db, s, "late", 5, &seq)
	waitCaughtUp(t, p, cfg, db)
	if rep := requireExact(t, k, s, cfg.Router.TopicPrefix); rep.Expected != 45 {
		t.Fatalf("%s: want 45 rows", rep)
	}
}

// crashAndRestart kills db (SIGKILL, as a crash) and starts it again.
func crashAndRestart(t *testing.T, db *devdb.Server) {
	t.Helper()
	db.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := db.Start(ctx); err != nil {
		t.Fatal(err)
	}
}
