//go:build integration

package kititest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// TestPruneRefusesHostOutsideTheSource: a second, independent MariaDB
// server with the same server_id writes GTIDs 0-1-1, 0-1-2, ... that the
// relay's checkpoint (of the first server, far past them) seems to cover.
// prune --host pointed at it must refuse and delete nothing; on the
// source, reached under another address than source.hosts, it proves the
// host by its server_uid and deletes, after naming host, tables, count and
// age; --force-host overrides the refusal.
func TestPruneRefusesHostOutsideTheSource(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	other, err := devdb.Start(ctx, devdb.Options{Dir: t.TempDir(), Settings: map[string]string{"innodb-buffer-pool-size": "32M"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Stop)
	insertOld := func(db *devdb.Server, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if err := db.Exec(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) "+
				"VALUES ('%s', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 2 HOUR)", s.Table(), id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := other.Exec("CREATE DATABASE "+s.Name, fmt.Sprintf(itest.OutboxDDL, s.Name)); err != nil {
		t.Fatal(err)
	}
	insertOld(other, "never-published-1", "never-published-2", "never-published-3")

	relay := itest.RunRelay(t, cfg)
	relay.WaitReady(t)
	insertOld(env.DB, "published-1")
	cp := itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := relay.Stop(); err != nil {
		t.Fatal(err)
	}
	// The other server's GTIDs look covered by the checkpoint.
	otherHead := itest.Head(t, other)
	if !strings.HasPrefix(otherHead, "0-1-") || !covers(t, cp.GTIDSet, otherHead) {
		t.Fatalf("the other server is at %s, the checkpoint at %s: GTIDs do not collide, the test proves nothing", otherHead, cp.GTIDSet)
	}
	if cp.SourceUID == "" {
		t.Fatalf("the checkpoint records no source_uid: %+v", cp)
	}

	path := itest.WriteConfig(t, cfg)
	rootEnv := []string{"KITITEST_ROOT_PW=" + devdb.RootPassword}
	prune := func(host string, extra ...string) (int, string) {
		return runCLI(t, rootEnv, append([]string{"prune", "--config", path, "--older-than", "1h", "--wait", "2s", "--host", host,
			"--user", "root", "--password-env", "KITITEST_ROOT_PW", "--yes"}, extra...)...)
	}
	otherRows := func() int {
		rows, err := other.Query("SELECT COUNT(*) FROM " + s.Table())
		if err != nil {
			t.Fatal(err)
		}
		var n int
		fmt.Sscan(rows[0][0], &n)
		return n
	}
	refused := func(phase string, rows int, want string) {
		t.Helper()
		for _, args := range [][]string{{"--dry-run"}, nil} {
			code, out := prune(other.Addr, args...)
			if code != 1 || !strings.Contains(out, "not proven to be of the checkpoint's source") || !strings.Contains(out, other.Addr) ||
				!strings.Contains(out, want) {
				t.Fatalf("%s: prune %v on an independent server: exit %d, want 1 refusing the host by name (%s)", phase, args, code, want)
			}
			if n := otherRows(); n != rows {
				t.Fatalf("%s: prune %v deleted %d rows of an independent server, rows never published", phase, args, rows-n)
			}
		}
	}
	// Same server_id: its binlog lacks the checkpoint's own-server_id GTIDs.
	refused("same server_id", 3, "has diverged")
	// Another server_id, behind the checkpoint's sequence numbers: nothing
	// in the GTIDs tells it apart from a replica that lags.
	if err := other.Exec("SET GLOBAL server_id = 3"); err != nil {
		t.Fatal(err)
	}
	insertOld(other, "never-published-4")
	if otherHead = itest.Head(t, other); !strings.HasPrefix(otherHead, "0-3-") || !covers(t, cp.GTIDSet, otherHead) {
		t.Fatalf("the other server is at %s, the checkpoint at %s: the test proves nothing", otherHead, cp.GTIDSet)
	}
	refused("another server_id", 4, "neither in source.hosts nor the server the checkpoint")

	// The source under another address than source.hosts: proven by its
	// server_uid.
	_, port, _ := net.SplitHostPort(env.DB.Addr)
	alias := net.JoinHostPort("localhost", port)
	if alias == env.DB.Addr {
		t.Fatalf("source.hosts already names %s", alias)
	}
	code, out := prune(alias)
	for _, want := range []string{alias, s.Table(), "older than 1h", "1 rows are that old", "it is the server the relay reads", "deleted 1 rows"} {
		if !strings.Contains(out, want) {
			t.Errorf("prune on the source as %s: output does not say %q", alias, want)
		}
	}
	if code != 0 {
		t.Fatalf("prune on the source as %s: exit %d", alias, code)
	}

	code, out = prune(other.Addr, "--force-host")
	if code != 0 || !strings.Contains(out, "--force-host") || !strings.Contains(out, "deleted 4 rows") || otherRows() != 0 {
		t.Fatalf("prune --force-host: exit %d, %d rows left", code, otherRows())
	}
}

// TestPruneDryRunChecksDeleteGrant: a dry run as a user without DELETE on
// the outbox table fails naming the table, before a real run would.
func TestPruneDryRunChecksDeleteGrant(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	user := env.Unique("sel")
	// BINLOG MONITOR: prune reads the server's binlog state.
	if err := env.DB.Exec("CREATE USER '"+user+"'@'%' IDENTIFIED BY 'sel-pw'", "GRANT SELECT ON "+s.Table()+" TO '"+user+"'@'%'",
		"GRANT BINLOG MONITOR ON *.* TO '"+user+"'@'%'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DB.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	path := itest.WriteConfig(t, cfg)
	code, out := runCLI(t, []string{"KITITEST_SEL_PW=sel-pw"}, "prune", "--config", path, "--older-than", "1h", "--dry-run",
		"--user", user, "--password-env", "KITITEST_SEL_PW")
	if code != 1 || !strings.Contains(out, "may not DELETE from "+s.Table()) {
		t.Fatalf("prune --dry-run without the DELETE grant: exit %d, want 1 naming the grant", code)
	}
	if err := env.DB.Exec("GRANT DELETE ON " + s.Table() + " TO '" + user + "'@'%'"); err != nil {
		t.Fatal(err)
	}
	code, out = runCLI(t, []string{"KITITEST_SEL_PW=sel-pw"}, "prune", "--config", path, "--older-than", "1h", "--dry-run",
		"--user", user, "--password-env", "KITITEST_SEL_PW")
	if code != 0 || !strings.Contains(out, "grants checked") {
		t.Fatalf("prune --dry-run with the DELETE grant: exit %d", code)
	}
}

// covers reports whether MariaDB GTID position have contains want.
func covers(t *testing.T, have, want string) bool {
	t.Helper()
	h, err := binlog.ParseSet("mariadb", have)
	if err != nil {
		t.Fatal(err)
	}
	w, err := binlog.ParseSet("mariadb", want)
	if err != nil {
		t.Fatal(err)
	}
	return h.Contain(w)
}
