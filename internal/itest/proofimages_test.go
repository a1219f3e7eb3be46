//go:build integration

package itest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// A replica re-logs the transactions it applies with its own
// binlog_row_image: a DELETE or UPDATE the primary logged with a session's
// MINIMAL image (the primary key alone) is FULL in the replica's binlog.
// The relay accepts such images of captured tables (it publishes only
// INSERTs), so the checkpoint's last transaction with outbox rows may be
// one, and the proof must still hold on the replica.

// The last transaction with outbox rows the relay read from the primary is
// a clean-up DELETE its session logged with binlog_row_image=MINIMAL; the
// replica (FULL) logged it with whole rows. Failing over, the replica
// proves it holds the checkpoint's last transaction and the relay goes on
// there.
func TestFailoverToReplicaAfterMinimalImageDeleteProvesLastTransaction(t *testing.T) {
	pr := startPairRelay(t, nil)
	c, primary, replica, s, cfg, p := pr.c, pr.primary, pr.replica, pr.s, pr.cfg, pr.p
	waitHostState(t, p, primary.Addr, "streaming")
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 20, Tag: "p"}); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, p, cfg, primary)
	if err := primary.Exec("SET SESSION binlog_row_image=MINIMAL",
		fmt.Sprintf("DELETE FROM %s ORDER BY id LIMIT 5", s.Table())); err != nil {
		t.Fatal(err)
	}
	if cp := waitCaughtUp(t, p, cfg, primary); cp.Fingerprint == nil {
		t.Fatalf("checkpoint %s past the DELETE carries no fingerprint", cp.GTIDSet)
	}
	c.WaitReplicated(t, time.Minute, replica)
	primary.Kill()

	waitHostState(t, p, replica.Addr, "streaming")
	requireRunning(t, p)
}
