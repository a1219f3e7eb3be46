//go:build integration

package itest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// A host whose binlog stream starts but never shows an event (a server
// stalled on its disk, a proxy that stopped passing) cannot prove it holds
// the checkpoint's last transaction: the proof's read is bounded, the host
// is unreachable for now, and the relay goes on with the next host. It is
// passed over for a while after that, so that the attempts that follow (a
// broker's hiccup, a reader's error) do not each wait out the bound on it
// again before they stream.
func TestProofReadThatNeverShowsAnEventFailsOverAndPassesTheHostOver(t *testing.T) {
	BrokerOnlyAsSink(t)
	sr := startServerRelay(t)
	db, s, cfg, p := sr.primary, sr.s, sr.cfg, sr.p
	seq := 0
	writeEveryday(t, db, s, "a", 10, &seq)
	if cp := waitCaughtUp(t, p, cfg, db); cp.Fingerprint == nil {
		t.Fatalf("checkpoint %s carries no fingerprint", cp.GTIDSet)
	}
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}

	hung := StartHungSource(t, db.Addr, HangAtStream)
	cfg.Source.Hosts = []string{hung.Addr, db.Addr}
	began := time.Now()
	p = RunRelay(t, cfg)
	p.WaitReady(t)
	waitHostState(t, p, db.Addr, "streaming")
	t.Logf("streaming from the second host after %s", time.Since(began).Round(time.Millisecond))
	if st := hostState(p, hung.Addr); st != "unreachable" {
		t.Fatalf("host %s whose stream shows nothing is %q, want unreachable", hung.Addr, st)
	}
	if !strings.Contains(p.Logs(), hung.Addr+" did not show the checkpoint's last transaction") {
		t.Fatalf("no log line says %s did not show the checkpoint's last transaction:\n%s", hung.Addr, tailLines(p.Logs(), 20))
	}

	// The reader's stream ends (its dump thread killed): a new attempt.
	writeEveryday(t, db, s, "b", 5, &seq)
	waitCaughtUp(t, p, cfg, db)
	began = time.Now()
	killDumps(t, db)
	writeEveryday(t, db, s, "c", 5, &seq)
	waitCaughtUp(t, p, cfg, db)
	if took := time.Since(began); took > 15*time.Second {
		t.Fatalf("the attempt after the reader's stream ended streamed after %s: it waited on %s's proof again", took, hung.Addr)
	}
	if n := len(Consume(t, sr.k.Brokers, cfg.Router.TopicPrefix)); n != 60 {
		t.Fatalf("published %d records, want 60", n)
	}
	requireRunning(t, p)
}

// killDumps kills every binlog dump connection of db (the relay's reader).
func killDumps(t *testing.T, db *devdb.Server) {
	t.Helper()
	rows, err := db.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatal("no binlog dump connection to kill")
	}
	for _, r := range rows {
		if err := db.Exec(fmt.Sprintf("KILL %s", r[0])); err != nil && !strings.Contains(err.Error(), "Unknown thread") {
			t.Fatal(err)
		}
	}
}
