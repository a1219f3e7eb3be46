//go:build integration

package mysqlitest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
	"github.com/outbox-relay/outbox-relay/source"
)

// A MySQL replica applying in parallel without
// replica_preserve_commit_order logs a transaction the primary committed
// after the checkpoint's last one before it: a transaction the checkpoint
// does not cover comes first in the replica's binlog after the position
// just before the checkpoint's last transaction. The replica still holds
// that transaction and proves it; the relay goes on there, every row once.
func TestMySQLReplicaLoggingLaterTransactionFirstProves(t *testing.T) {
	primary, a, replica := primaryAndReplica(t)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", primary.Addr(), replica.Addr())
	cfg.Source.Start = "earliest"
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	last := a.commitTx(t, a.newRows(2, 2, "last"))
	waitCheckpoint(t, cfg, primary.Executed().Flat(), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	// Committed on the primary once the checkpoint was written, applied
	// first on the replica.
	next := a.commitTx(t, a.newRows(2, 2, "later"))
	for _, tx := range []mysqlsource.Tx{next, last} { // the other order
		if _, err := replica.Commit(tx); err != nil {
			t.Fatal(err)
		}
	}
	primary.Close()
	r = itest.RunRelay(t, cfg)
	r.WaitReady(t)
	waitCheckpoint(t, cfg, replica.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, a)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A promoted replica that purged the binlog holding the checkpoint's last
// transaction (its gtid_executed still holds it, in gtid_purged): the read
// that skips everything but that transaction is refused as purged, and
// the replica, not the server the checkpoint was read from, is unproven:
// the relay stops naming the operator's way on, nothing of it published.
func TestMySQLReplicaThatPurgedLastTransactionIsUnproven(t *testing.T) {
	primary, a, replica := primaryAndReplica(t)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", primary.Addr())
	cfg.Source.Start = "earliest"
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	for i := 0; i < 3; i++ {
		a.commit(t, "", a.newRows(2, 2, "p"))
	}
	cp := waitCheckpoint(t, cfg, primary.Executed().Flat(), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Apply(primary); err != nil {
		t.Fatal(err)
	}
	primary.Close()
	promoted := &app{p: replica, tbl: a.tbl, seq: map[string]int64{}, rows: map[string]string{}, value: map[string]string{}, next: a.next}
	replica.Rotate()
	promoted.commit(t, "", promoted.newRows(2, 2, "r"))
	files := replica.Files()
	if err := replica.PurgeTo(files[len(files)-1]); err != nil {
		t.Fatal(err)
	}
	cfg.Source.Hosts = []string{replica.Addr()}
	r = itest.RunRelay(t, cfg)
	err := r.StoppedWith(t)
	if !errors.Is(err, source.ErrUnproven) || !errors.Is(err, binlog.ErrPurged) {
		t.Fatalf("relay on a replica that purged the last transaction stopped with %v, want ErrUnproven", err)
	}
	if !strings.Contains(err.Error(), "checkpoint set --gtid '"+cp+"'") {
		t.Fatalf("the stop does not name the operator's way on: %v", err)
	}
	requireExact(t, k, cfg, a)
}
