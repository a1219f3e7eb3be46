//go:build integration

package itest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// `checkpoint set --gtid` of a position the source has not reached (a
// typo: a sequence number too high) is refused without --force, naming the
// GTID the server has not executed and the host; nothing changes.
func TestCheckpointSetRefusesPositionServerHasNotExecuted(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 3}); err != nil {
		t.Fatal(err)
	}
	head := Head(t, env.DB)
	WaitCheckpoint(t, cfg, head, time.Minute)
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
	typo := typoGTID(t, head)
	out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", typo, "--yes", "--config", path)
	if code != 1 || !strings.Contains(errOut, "has not executed "+typo) || !strings.Contains(errOut, env.DB.Addr) || !strings.Contains(errOut, "--force") {
		t.Fatalf("set --gtid %s (the server is at %s): exit %d, want 1 naming the GTID, the host and --force\n%s%s", typo, head, code, out, errOut)
	}
	if cp := loadCheckpoint(t, cfg); cp.GTIDSet != head {
		t.Fatalf("a refused set changed the checkpoint to %s", cp.GTIDSet)
	}
	// A position the server has is taken as before.
	if out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", head, "--yes", "--config", path); code != 0 {
		t.Fatalf("set --gtid %s (the head): exit %d\n%s%s", head, code, out, errOut)
	}
}

// `checkpoint skip` of a GTID the source has not executed (a typo that
// looks like the first of a new domain) is refused the same way; the
// relay would wait for the server to write it.
func TestCheckpointSkipRefusesTransactionServerHasNotExecuted(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, _, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
	before := loadCheckpoint(t, cfg)
	out, errOut, code := env.CLI(t, "checkpoint", "skip", "--gtid", "77-9-1", "--yes", "--config", path)
	if code != 1 || !strings.Contains(errOut, "has not executed 77-9-1") || !strings.Contains(errOut, env.DB.Addr) || !strings.Contains(errOut, "--force") {
		t.Fatalf("skip --gtid 77-9-1: exit %d, want 1 naming the GTID, the host and --force\n%s%s", code, out, errOut)
	}
	if cp := loadCheckpoint(t, cfg); cp.GTIDSet != before.GTIDSet {
		t.Fatalf("a refused skip changed the checkpoint to %s", cp.GTIDSet)
	}
}

// A checkpoint set by hand ahead of the server (--force) stops `run` with
// an error that says it was set by hand, names the GTID the server has not
// executed, and how to fix it, not only that the server "lost transactions
// it wrote".
func TestRunSaysCheckpointAheadOfServerWasSetByHand(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, _, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	if err := Store(t, cfg).EnsureTopic(context.Background(), kadmFor(t, k), 1); err != nil {
		t.Fatal(err)
	}
	head := Head(t, env.DB)
	typo := typoGTID(t, head)
	out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", typo, "--force", "--yes", "--config", path)
	if code != 0 || !strings.Contains(errOut, "stored anyway (--force)") {
		t.Fatalf("set --gtid %s --force: exit %d\n%s%s", typo, code, out, errOut)
	}
	p := env.StartProc(t, path)
	code, err := p.Wait(time.Minute)
	if err != nil || code != relay.ExitData {
		t.Fatalf("run from a checkpoint ahead of the server: exit %d %v, want %d\n%s", code, err, relay.ExitData, p.Output())
	}
	line := lineWith(p.Output(), "outbox-relay: ")
	for _, want := range []string{"set by hand", "checkpoint set", "has not executed " + typo, env.DB.Addr, "checkpoint set --gtid SET"} {
		if !strings.Contains(line, want) {
			t.Fatalf("the stop lacks %q:\n%s", want, line)
		}
	}
}

// typoGTID is head's GTID (one domain, MariaDB) with a sequence number
// 1,000 past it: a position the server has not reached.
func typoGTID(t testing.TB, head string) string {
	t.Helper()
	var d, srv, seq int
	if _, err := fmt.Sscanf(head, "%d-%d-%d", &d, &srv, &seq); err != nil || strings.Contains(head, ",") {
		t.Fatalf("want a one-domain MariaDB set, got %q (%v)", head, err)
	}
	return fmt.Sprintf("%d-%d-%d", d, srv, seq+1000)
}
