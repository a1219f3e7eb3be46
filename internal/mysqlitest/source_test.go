//go:build integration

package mysqlitest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
	"github.com/outbox-relay/outbox-relay/source"
)

// A purged prefix: start `earliest` begins at gtid_purged and publishes
// what the binlogs still hold; a checkpoint from before the purge stops
// the relay with ErrPurged (exit 66) instead of skipping silently.
func TestMySQLPurgedPrefix(t *testing.T) {
	p := startPrimary(t, mysqlsource.Options{Version: v80})
	a := newApp(t, p)
	k := itest.StartKafka(t)
	stale := relayConfig(t, k, "mysql", p.Addr())
	r := itest.RunRelay(t, stale) // pins its checkpoint at `now`, before the purge
	r.WaitReady(t)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	gone := a.newRows(5, 2, "purged")
	a.commit(t, "", gone)
	p.Rotate()
	a.commit(t, "", a.newRows(4, 2, "kept"))
	if err := p.PurgeTo(p.Files()[1]); err != nil {
		t.Fatal(err)
	}
	for _, row := range gone {
		delete(a.rows, row[1].(string))
	}
	if p.Purged().Empty() {
		t.Fatal("gtid_purged empty after PURGE BINARY LOGS")
	}

	cfg := relayConfig(t, k, "mysql", p.Addr())
	cfg.Source.Start = "earliest"
	r = itest.RunRelay(t, cfg)
	r.WaitReady(t)
	a.commit(t, "", a.newRows(3, 2, "live"))
	waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, a)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	r = itest.RunRelay(t, stale)
	err := r.StoppedWith(t)
	if !errors.Is(err, binlog.ErrPurged) {
		t.Fatalf("a checkpoint before the purged binlogs: relay stopped with %v, want ErrPurged", err)
	}
}

// The double is strict where MySQL is: a checkpoint with transactions of
// the server's own uuid that its binlog lacks (the server lost the end of
// its binlog, or it is another server with that uuid) is refused as
// diverged, never streamed from.
func TestMySQLRefusesGTIDsItLacks(t *testing.T) {
	const id = "5a5a5a5a-0000-4000-8000-0000000000aa"
	long := startPrimary(t, mysqlsource.Options{Version: v84, UUID: id})
	a := newApp(t, long)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", long.Addr())
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	for i := 0; i < 5; i++ {
		a.commit(t, "", a.newRows(1, 2, ""))
	}
	waitCheckpoint(t, cfg, long.Executed().Flat(), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	short := startPrimary(t, mysqlsource.Options{Version: v84, UUID: id})
	newApp(t, short) // the same uuid's first transaction only
	cfg.Source.Hosts = []string{short.Addr()}
	r = itest.RunRelay(t, cfg)
	err := r.StoppedWith(t)
	if !errors.Is(err, binlog.ErrPositionDiverged) {
		t.Fatalf("checkpoint ahead of the server's own uuid: relay stopped with %v, want ErrPositionDiverged", err)
	}
}

// Another server with the same server_uuid (a clone that kept auto.cnf)
// and more transactions under it, other rows: its gtid_executed holds the
// checkpoint, its transactions under those GTIDs are not the checkpoint's.
// Refused as another history, nothing of it published.
func TestMySQLRefusesCloneWithOtherHistory(t *testing.T) {
	const id = "5a5a5a5a-0000-4000-8000-0000000000bb"
	orig := startPrimary(t, mysqlsource.Options{Version: v84, UUID: id})
	a := newApp(t, orig)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", orig.Addr())
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	for i := 0; i < 5; i++ {
		a.commit(t, "", a.newRows(2, 2, "orig"))
	}
	waitCheckpoint(t, cfg, orig.Executed().Flat(), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	clone := startPrimary(t, mysqlsource.Options{Version: v84, UUID: id})
	c := newApp(t, clone)
	for i := 0; i < 8; i++ {
		c.commit(t, "", c.newRows(2, 2, "clone"))
	}
	cfg.Source.Hosts = []string{clone.Addr()}
	r = itest.RunRelay(t, cfg)
	err := r.StoppedWith(t)
	if !errors.Is(err, source.ErrForeignHistory) || !errors.Is(err, binlog.ErrPositionDiverged) {
		t.Fatalf("relay on a clone with another history: %v, want ErrForeignHistory", err)
	}
	requireExact(t, k, cfg, a)
}

// A replica that logs the checkpoint's transactions in another order (MySQL
// applying in parallel without replica_preserve_commit_order): a
// transaction after the checkpoint's last one with outbox rows comes first
// in its binlog. It still proves it holds that transaction, and the relay
// goes on there, every row once.
func TestMySQLReplicaLoggingOutOfOrderProves(t *testing.T) {
	primary, a, replica := primaryAndReplica(t)
	last := a.commitTx(t, a.newRows(2, 2, "last"))
	note := mysqlsource.Tx{Statement: "CREATE TABLE note (id INT)", DB: "app"}
	n, err := primary.Commit(note)
	if err != nil {
		t.Fatal(err)
	}
	note.GTID = n.String()
	for _, tx := range []mysqlsource.Tx{note, last} { // the other order
		if _, err := replica.Commit(tx); err != nil {
			t.Fatal(err)
		}
	}
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", primary.Addr(), replica.Addr())
	cfg.Source.Start = "earliest"
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	waitCheckpoint(t, cfg, primary.Executed().Flat(), time.Minute)
	primary.Close()
	promoted := &app{p: replica, tbl: a.tbl, seq: a.seq, rows: a.rows, value: a.value, next: a.next}
	promoted.commit(t, "", promoted.newRows(2, 2, "r"))
	waitCheckpoint(t, cfg, replica.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, promoted)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Failover between two doubles sharing history: the relay reads the
// primary; the primary dies with a transaction the replica has not
// applied yet; the relay waits for the replica to catch up, then reads it,
// also what it commits as the new primary under its own uuid.
func TestMySQLFailover(t *testing.T) {
	primary := startPrimary(t, mysqlsource.Options{Version: v80})
	a := newApp(t, primary)
	// The replica logs the primary's transactions in other bytes:
	// compressed (Transaction_payload), without column names.
	replica, err := primary.Replica(mysqlsource.Options{Version: v80, ServerID: 2, ReplicaOf: primary.Addr(),
		Compression: true, RowMetadata: "MINIMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Close)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "auto", primary.Addr(), replica.Addr())
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	for i := 0; i < 10; i++ {
		a.commit(t, "", a.newRows(2, 3, "p"))
	}
	if err := replica.Apply(primary); err != nil {
		t.Fatal(err)
	}
	a.commit(t, "", a.newRows(2, 3, "last")) // not yet on the replica
	waitCheckpoint(t, cfg, primary.Executed().Flat(), time.Minute)
	primary.Close()
	itest.Eventually(t, 30*time.Second, func() error {
		if strings.Contains(r.Logs(), replica.Addr()) {
			return nil
		}
		return errors.New("the relay has not tried the replica yet")
	})
	if err := replica.Apply(primary); err != nil { // its relay log catches up
		t.Fatal(err)
	}
	itest.Eventually(t, 30*time.Second, func() error {
		for _, line := range strings.Split(r.Logs(), "\n") {
			if strings.Contains(line, `"host":"`+replica.Addr()+`"`) && strings.Contains(line, "source host holds the checkpoint's last transaction") {
				return nil
			}
		}
		return errors.New("the replica has not proved it holds the checkpoint's last transaction")
	})
	// Promoted: new transactions under the replica's own uuid.
	promoted := &app{p: replica, tbl: a.tbl, seq: a.seq, rows: a.rows, value: a.value, next: a.next}
	for i := 0; i < 10; i++ {
		promoted.commit(t, "", promoted.newRows(2, 3, "r"))
	}
	waitCheckpoint(t, cfg, replica.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, promoted)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// The source drops every connection (a restart) while the relay streams
// and writers commit: nothing lost or duplicated.
func TestMySQLSourceRestart(t *testing.T) {
	p := startPrimary(t, mysqlsource.Options{Version: v84, Compression: true})
	a := newApp(t, p)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", p.Addr())
	cfg.Source.HeartbeatPeriod = 500 * time.Millisecond
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	for i := 0; i < 300; i++ {
		a.commit(t, "", a.newRows(1+i%3, 6, ""))
		if i%100 == 50 {
			if err := p.Restart(); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, a)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// Privileges granted through a role (MySQL 8 roles, activated by SET
// DEFAULT ROLE or activate_all_roles_on_login): SHOW GRANTS lists only the
// role; the relay must find the privileges in the role.
func TestMySQLRoleBasedGrants(t *testing.T) {
	roleGrants := []string{"GRANT USAGE ON *.* TO `relay`@`%`", "GRANT `outbox_relay`@`%` TO `relay`@`%`"}
	roles := map[string][]string{"`outbox_relay`@`%`": {"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO `relay`@`%`",
		"GRANT SELECT ON `app`.* TO `relay`@`%`"}}
	p := startPrimary(t, mysqlsource.Options{Version: v84, Grants: roleGrants, Roles: roles})
	a := newApp(t, p)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", p.Addr())
	out, errOut, code := env.CLI(t, "check", "--config", itest.WriteConfig(t, cfg))
	if code != 0 {
		t.Fatalf("check with role-based grants: exit %d\n%s\n%s", code, out, errOut)
	}
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	a.commit(t, "", a.newRows(3, 2, ""))
	waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, a)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	// The same role granted but not active: its privileges do not count.
	inactive := startPrimary(t, mysqlsource.Options{Version: v84, Grants: roleGrants[:2], Roles: roles, RolesInactive: true})
	newApp(t, inactive)
	cfg = relayConfig(t, k, "mysql", inactive.Addr())
	out, _, code = env.CLI(t, "check", "--config", itest.WriteConfig(t, cfg))
	if code == 0 || !strings.Contains(out, "refuses REPLICATION SLAVE") || !strings.Contains(out, "SET DEFAULT ROLE `outbox_relay`@`%`") {
		t.Fatalf("check with an inactive role: exit %d\n%s", code, out)
	}
}

// Two relays (two pipelines) given one server_id: MySQL 8 tells dump
// connections apart by the @replica_uuid the client sets (go-mysql draws a
// new one per connection), not by server_id (rpl_source.cc,
// find_zombie_dump_thread), so neither is dropped: both publish what is
// committed. (MariaDB drops the older one: ErrDuplicateServerID.)
func TestMySQLDuplicateServerID(t *testing.T) {
	p := startPrimary(t, mysqlsource.Options{Version: v80})
	a := newApp(t, p)
	k := itest.StartKafka(t)
	first := relayConfig(t, k, "mysql", p.Addr())
	second := relayConfig(t, k, "mysql", p.Addr())
	second.Source.ServerID = first.Source.ServerID
	r1 := itest.RunRelay(t, first)
	r1.WaitReady(t)
	r2 := itest.RunRelay(t, second)
	r2.WaitReady(t)
	a.commit(t, "", a.newRows(3, 2, "dup"))
	for _, cfg := range []config.Config{first, second} {
		waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
		requireExact(t, k, cfg, a)
	}
	for i, r := range []*itest.InProcess{r1, r2} {
		select {
		case <-r.Done():
			t.Fatalf("relay %d stopped: %v", i+1, r.Err())
		default:
		}
	}
}
