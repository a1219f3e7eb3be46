//go:build integration

package source_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/source"
)

// On a server that is not RDS (no mysql.rds_configuration), the relay's
// user with the grants of deploy/mysql/grants.sql reads the retention from
// the server's variables: the RDS probe must not turn every ordinary server
// into "retention unknown".
func TestRetentionPlainServerRelayUser(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(t.TempDir(), "db"),
		Settings: map[string]string{"expire-logs-days": "7"}})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.Exec(
		"CREATE DATABASE app", "CREATE TABLE app.outbox (id INT PRIMARY KEY)",
		"CREATE USER 'relay'@'%' IDENTIFIED BY 'change-me'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%'",
		"GRANT SELECT ON app.outbox TO 'relay'@'%'",
	); err != nil {
		t.Fatal(err)
	}
	conn, err := binlog.Connect(ctx, binlog.Config{User: "relay", Password: "change-me", ConnectTimeout: 5 * time.Second}, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, qerr := conn.Execute("SELECT value FROM mysql.rds_configuration WHERE name = 'binlog retention hours'")
	t.Logf("relay user, no rds_configuration: %v", qerr)
	got, err := source.Retention(conn)
	if err != nil || got != 7*24*time.Hour {
		t.Fatalf("retention %v, %v; want 168h from expire_logs_days", got, err)
	}
}

// An RDS server (simulated: mysql.rds_configuration, data under
// /rdsdbdata/) and the relay's user with the managed-MySQL grant
// (docs/mysql.md): the retention is RDS's; without the grant it is
// ErrRDSRetentionDenied, never the server variables.
func TestRetentionRDSWithDocumentedGrant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(t.TempDir(), "rdsdbdata", "db"),
		Settings: map[string]string{"expire-logs-days": "7"}})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.Exec(
		"CREATE TABLE mysql.rds_configuration (name VARCHAR(100) PRIMARY KEY, value VARCHAR(100) NULL)",
		"INSERT INTO mysql.rds_configuration VALUES ('binlog retention hours', '24')",
		"CREATE USER 'relay'@'%' IDENTIFIED BY 'change-me'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%'",
		"CREATE USER 'bare'@'%' IDENTIFIED BY 'change-me'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'bare'@'%'",
		"GRANT SELECT ON mysql.rds_configuration TO 'relay'@'%'",
	); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		user string
		want time.Duration
	}{{"relay", 24 * time.Hour}, {"bare", 0}} {
		conn, err := binlog.Connect(ctx, binlog.Config{User: c.user, Password: "change-me", ConnectTimeout: 5 * time.Second}, srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		got, err := source.Retention(conn)
		conn.Close()
		t.Logf("%s: retention %v, %v", c.user, got, err)
		if c.want == 0 {
			if !errors.Is(err, source.ErrRDSRetentionDenied) {
				t.Fatalf("%s without the grant: %v, %v; want ErrRDSRetentionDenied", c.user, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Fatalf("%s with the grant: %v, %v; want %v", c.user, got, err, c.want)
		}
	}
}

// Retention with mysql.rds_configuration unreadable to the relay's user is
// an error, never the server variables taken for a plain server. The
// failure guarded against: amazon RDS / Aurora keep binlogs for
// mysql.rds_configuration's 'binlog retention hours' (NULL by default:
// purged as soon as possible). The runbook promises the relay reads it
// ("NULL shows as 1 s, and OutboxRelayPurgeMarginCritical fires"). The
// relay's user, created as deploy/mysql/grants.sql and the runbook's
// Managed MySQL section say (REPLICATION SLAVE, REPLICATION CLIENT, SELECT
// on the outbox table), has no SELECT on mysql.rds_configuration: the query
// fails with 1142, which Retention takes as "not RDS", and it returns the
// server variables (here 7 days) instead. The purge margin then says days
// where RDS purges in minutes. Simulated on MariaDB with the table RDS has.
func TestRetentionRDSTableUnreadableIsAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Real RDS keeps its data under /rdsdbdata/ (@@datadir, readable by any
	// user): without it a denied mysql.rds_configuration cannot be told
	// from an ordinary server's, which also answers 1142 to this user
	// (retention14_test.go), so the simulation places its data there too.
	srv, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(t.TempDir(), "rdsdbdata", "db"),
		Settings: map[string]string{"expire-logs-days": "7"}})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if err := srv.Exec(
		"CREATE TABLE mysql.rds_configuration (name VARCHAR(100) PRIMARY KEY, value VARCHAR(100) NULL)",
		"INSERT INTO mysql.rds_configuration VALUES ('binlog retention hours', NULL)",
		"CREATE DATABASE app", "CREATE TABLE app.outbox (id INT PRIMARY KEY)",
		"CREATE USER 'relay'@'%' IDENTIFIED BY 'change-me'",
		"GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'relay'@'%'",
		"GRANT SELECT ON app.outbox TO 'relay'@'%'",
	); err != nil {
		t.Fatal(err)
	}
	root, err := binlog.Connect(ctx, binlog.Config{User: "root", Password: devdb.RootPassword, ConnectTimeout: 5 * time.Second}, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if got, err := source.Retention(root); err != nil || got != time.Second {
		t.Fatalf("control (root): retention %v, %v; want 1s (NULL)", got, err)
	}
	cfg := binlog.Config{User: "relay", Password: "change-me", ConnectTimeout: 5 * time.Second}
	conn, err := binlog.Connect(ctx, cfg, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got, err := source.Retention(conn)
	t.Logf("relay user (grants.sql): retention %v, err %v", got, err)
	if err == nil && got != time.Second {
		t.Fatalf("RDS retention is NULL (purge at once); the relay's documented user reads %v without an error", got)
	}
}
