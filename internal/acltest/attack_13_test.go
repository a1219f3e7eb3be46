//go:build integration

package acltest

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// MariaDB 10.5+ has REPLICATION SLAVE ADMIN (START/STOP SLAVE, CHANGE
// MASTER): it does not allow reading the binlog. MissingGrants matches the
// substring "REPLICATION SLAVE" in SHOW GRANTS, so the privilege the relay
// needs is taken as granted and never tried: check reports the grants as
// fine, run passes its grant check, and the replication connection is
// refused later.
func TestAttack13ReplicationSlaveAdminIsNotReplicationSlave(t *testing.T) {
	ctx := context.Background()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.Exec(
		"CREATE USER slaveadm@'%' IDENTIFIED BY 'pw'",
		"GRANT REPLICATION SLAVE ADMIN, BINLOG MONITOR ON *.* TO slaveadm@'%'",
	); err != nil {
		t.Fatal(err)
	}
	cfg := binlog.Config{User: "slaveadm", Password: "pw", ServerID: 99, ConnectTimeout: 5 * time.Second}
	conn, err := binlog.Connect(ctx, cfg, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	p, err := binlog.CheckPrivileges(conn, cfg, srv.Addr, "mariadb")
	if err != nil {
		t.Fatal(err)
	}
	ok, err := binlog.TryReplicationConnection(cfg, srv.Addr, "mariadb")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("grants %q missing %q; replication connection allowed: %v", p.Grants, p.Missing, ok)
	if !ok && len(p.Missing) == 0 {
		t.Fatalf("the server refuses replication, but CheckPrivileges reports nothing missing")
	}
}
