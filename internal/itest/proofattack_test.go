//go:build integration

package itest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/source"
)

// Servers that share more history with the checkpoint's than a server_id:
// what the proof must still tell apart, and what it must accept.

// A restored backup of A (its data directory copied: the same server_id,
// the same GTIDs) that diverged later: both write different transactions
// under the same GTIDs after the copy. A pipeline whose checkpoint is
// before the divergence goes on there (B holds everything it published);
// one whose checkpoint is past the divergence is refused as another
// history, nothing of B published.
func TestRestoredBackupRefusedOncePastItsDivergence(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	a := startServerAt(t, dirA, nil)
	seqA := 0
	writeEveryday(t, a, &Schema{DB: a, Name: "app"}, "base", 20, &seqA)

	before := env.RelayConfig(k, "app.outbox")
	before.Source.Hosts = []string{a.Addr}
	before.Source.Start = "earliest"
	r := RunRelay(t, before)
	r.WaitReady(t)
	waitCaughtUp(t, r, before, a)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	// The backup: A's data directory, copied while A is down.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a.Stop()
	if out, err := exec.Command("cp", "-a", dirA, dirB).CombinedOutput(); err != nil {
		t.Fatalf("copy the data directory: %v: %s", err, out)
	}
	// The binlog index names its files by absolute path: the copy's name
	// its own.
	index := filepath.Join(dirB, "data", "binlog.index")
	idx, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(index, []byte(strings.ReplaceAll(string(idx), dirA, dirB)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	b, err := devdb.Start(ctx, devdb.Options{Dir: dirB, ServerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	if ha, hb := Head(t, a), Head(t, b); ha != hb {
		t.Fatalf("the copy is at %s, A at %s", hb, ha)
	}
	seqB := seqA
	writeEveryday(t, a, &Schema{DB: a, Name: "app"}, "a", 10, &seqA)
	writeEveryday(t, b, &Schema{DB: b, Name: "app"}, "b", 30, &seqB)

	past := env.RelayConfig(k, "app.outbox")
	past.Source.Hosts = []string{a.Addr}
	past.Source.Start = "earliest"
	r = RunRelay(t, past)
	r.WaitReady(t)
	waitCaughtUp(t, r, past, a)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	// Before the divergence: B is of the checkpoint's history.
	before.Source.Hosts = []string{b.Addr}
	r = RunRelay(t, before)
	r.WaitReady(t)
	waitCaughtUp(t, r, before, b)
	if rep := requireExact(t, k, &Schema{DB: b, Name: "app"}, before.Router.TopicPrefix); rep.Expected != 150 {
		t.Fatalf("%s: want B's 150 rows", rep)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	// Past it: B holds other transactions under the checkpoint's GTIDs.
	cp := loadCheckpoint(t, past)
	past.Source.Hosts = []string{b.Addr}
	r = RunRelay(t, past)
	err = r.StoppedWith(t)
	if !errors.Is(err, source.ErrForeignHistory) || !errors.Is(err, binlog.ErrPositionDiverged) {
		t.Fatalf("relay past the divergence, on the copy: %v, want ErrForeignHistory", err)
	}
	if got := loadCheckpoint(t, past); got.GTIDSet != cp.GTIDSet {
		t.Fatalf("checkpoint moved from %s to %s", cp.GTIDSet, got.GTIDSet)
	}
	if rep := requireExact(t, k, &Schema{DB: a, Name: "app"}, past.Router.TopicPrefix); rep.Expected != 90 {
		t.Fatalf("%s: want A's 90 rows, nothing of B", rep)
	}
}

// A replica promoted after losing transactions: its replication stopped
// while the relay read on from the primary, then the primary died. The
// promoted replica lacks the checkpoint's last GTID: behind while its
// sequence numbers stay below the checkpoint's (the relay waits, not
// ready). Then it is given the old primary's server_id, as operators do to
// keep GTIDs looking alike, and writes past the checkpoint: its GTIDs now
// hold the checkpoint's, its transactions under them are its own; refused
// as another history. Nothing of it published, the checkpoint unchanged.
func TestPromotedReplicaThatLostTransactionsIsRefused(t *testing.T) {
	BrokerOnlyAsSink(t)
	pr := startPairRelay(t, nil)
	c, primary, replica, k, s, cfg, p := pr.c, pr.primary, pr.replica, pr.k, pr.s, pr.cfg, pr.p
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 10, Tag: "both"}); err != nil {
		t.Fatal(err)
	}
	c.WaitReplicated(t, time.Minute, replica)
	if err := replica.Exec("STOP SLAVE"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 20, Tag: "lost"}); err != nil {
		t.Fatal(err)
	}
	cp := waitCaughtUp(t, p, cfg, primary)
	primary.Kill()
	if err := replica.Exec("RESET SLAVE ALL"); err != nil {
		t.Fatal(err)
	}
	promoted := &Schema{DB: replica, Name: s.Name}

	if _, err := promoted.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 3, Tag: "few"}); err != nil {
		t.Fatal(err)
	}
	waitHostState(t, p, replica.Addr, "behind")
	if p.Metrics.Ready.Load() {
		t.Fatal("ready while no host holds the checkpoint")
	}
	if err := replica.Exec("SET GLOBAL server_id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := promoted.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 60, Tag: "many"}); err != nil {
		t.Fatal(err)
	}
	if rel, why, err := source.Relate("mariadb", cp.GTIDSet, binlogState(t, replica), "1"); err != nil || rel != source.Contains {
		t.Fatalf("the promoted replica's GTIDs do not hold the checkpoint %s: %v %s %v", cp.GTIDSet, rel, why, err)
	}
	waitHostState(t, p, replica.Addr, "diverged")
	if !strings.Contains(p.Logs(), source.ErrForeignHistory.Error()) {
		t.Fatalf("no log line names the refusal:\n%s", tailLines(p.Logs(), 20))
	}
	requireRunning(t, p)
	if got := loadCheckpoint(t, cfg); got.GTIDSet != cp.GTIDSet {
		t.Fatalf("checkpoint moved from %s to %s", cp.GTIDSet, got.GTIDSet)
	}
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	for _, r := range recs {
		if !strings.Contains(r.ID, "-bothw") && !strings.Contains(r.ID, "-lostw") {
			t.Fatalf("published %q, a row written on the promoted replica", r.ID)
		}
	}
	if len(recs) != 30 {
		t.Fatalf("%d records, want the primary's 30", len(recs))
	}
	t.Logf("promoted replica at %s, checkpoint at %s: %s", Head(t, replica), cp.GTIDSet, hostState(p, replica.Addr))
}

// binlogState is db's gtid_binlog_state.
func binlogState(t *testing.T, db *devdb.Server) string {
	t.Helper()
	rows, err := db.Query("SELECT @@GLOBAL.gtid_binlog_state")
	if err != nil {
		t.Fatal(err)
	}
	return rows[0][0]
}

// RESET MASTER on the source, then a new history past the checkpoint's
// sequence number before the relay connects again: GTIDs read it as ahead
// of the checkpoint, the proof finds another transaction under the
// checkpoint's last GTID with outbox rows. Refused, nothing of the new
// history published from a position that names another transaction.
func TestResetMasterPastCheckpointRefusedByProof(t *testing.T) {
	BrokerOnlyAsSink(t)
	sr := startServerRelay(t)
	k, db, s, cfg, p := sr.k, sr.primary, sr.s, sr.cfg, sr.p
	seq := 0
	writeEveryday(t, db, s, "old", 20, &seq)
	cp := waitCaughtUp(t, p, cfg, db)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("RESET MASTER"); err != nil {
		t.Fatal(err)
	}
	writeEveryday(t, db, s, "new", 40, &seq)
	if gtidBelow(t, Head(t, db), cp.GTIDSet) {
		t.Fatalf("the new history %s has not passed the checkpoint %s", Head(t, db), cp.GTIDSet)
	}
	p = RunRelay(t, cfg)
	err := p.StoppedWith(t)
	if !errors.Is(err, source.ErrForeignHistory) {
		t.Fatalf("after RESET MASTER and a new history past the checkpoint: %v, want ErrForeignHistory", err)
	}
	onlyTagged(t, k, cfg.Router.TopicPrefix, "old", 60)
}
