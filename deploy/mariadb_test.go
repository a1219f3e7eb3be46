//go:build integration

package deploy

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/source"
)

// cnfSettings reads the [mariadb] options of an option file: name (dashes)
// -> value, inline comments dropped.
func cnfSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	group := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "["):
			group = strings.Trim(line, "[]")
		case group != "mariadb" && group != "mysqld":
			t.Fatalf("%s: option %q in group [%s], which mariadbd does not read", path, line, group)
		default:
			k, v, _ := strings.Cut(line, "=")
			out[strings.ReplaceAll(strings.TrimSpace(k), "_", "-")] = strings.TrimSpace(v)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no options", path)
	}
	return out
}

// mariadb105 lists the options of deploy/mysql/mariadb.cnf that MariaDB
// 10.5 (the oldest supported) knows; the installed server is newer, so an
// option added later (binlog_expire_logs_seconds: 10.6.1) must be caught
// here. Source: the server system variables reference, "Introduced" lines.
var mariadb105 = map[string]bool{
	"server-id": true, "log-bin": true, "binlog-format": true, "binlog-row-image": true,
	"binlog-row-metadata": true, "log-slave-updates": true, "expire-logs-days": true,
	"gtid-strict-mode": true, "gtid-domain-id": true, "binlog-checksum": true, "sync-binlog": true,
	"max-binlog-size": true, "log-bin-compress": true, "binlog-annotate-row-events": true,
}

// The server snippet is accepted by the installed MariaDB, takes effect,
// and with grants.sql the relay's user passes the relay's own start-up
// checks (settings, grants, the columns `start: now` reads) and can sample
// the binlog list and retention.
func TestMariaDBSnippetAndGrants(t *testing.T) {
	set := cnfSettings(t, "mysql/mariadb.cnf")
	for k := range set {
		if !mariadb105[k] {
			t.Errorf("mariadb.cnf: %s is not known to MariaDB 10.5", k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(t.TempDir(), "db"), Settings: set})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB is not installed (make deps)")
	}
	if err != nil {
		t.Fatalf("MariaDB refuses deploy/mysql/mariadb.cnf: %v", err)
	}
	defer srv.Stop()
	for k, want := range set {
		if k == "log-bin" {
			continue // a path, shown as ON
		}
		rows, err := srv.Query("SELECT @@GLOBAL." + strings.ReplaceAll(k, "-", "_"))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		got := rows[0][0]
		norm := map[string]string{"1": "ON", "0": "OFF"}
		if strings.EqualFold(got, want) || norm[got] == strings.ToUpper(want) || strings.HasPrefix(got, want+".") {
			continue
		}
		t.Errorf("%s = %q after start, the snippet sets %q", k, got, want)
	}

	raw, err := os.ReadFile("mysql/grants.sql")
	if err != nil {
		t.Fatal(err)
	}
	stmts := []string{"CREATE DATABASE app", `CREATE TABLE app.outbox (id BIGINT AUTO_INCREMENT PRIMARY KEY,
		event_id VARCHAR(64) NOT NULL, aggregate_type VARCHAR(64) NOT NULL, aggregate_id VARCHAR(64) NOT NULL,
		event_type VARCHAR(64) NOT NULL, payload LONGTEXT NOT NULL, created_at DATETIME(3) NOT NULL)`}
	var cur strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "--") {
			continue
		}
		cur.WriteString(line + "\n")
		if strings.HasSuffix(strings.TrimSpace(line), ";") {
			stmts = append(stmts, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	if err := srv.Exec(stmts...); err != nil {
		t.Fatalf("grants.sql: %v", err)
	}
	cfg := binlog.Config{Hosts: []string{srv.Addr}, User: "relay", Password: "change-me", Flavor: "auto",
		Tables: []string{"app.outbox"}, ConnectTimeout: 5 * time.Second, ServerID: 4242, HeartbeatPeriod: time.Second}
	info, err := source.Inspect(ctx, cfg)
	if err != nil {
		t.Fatalf("the relay's user of grants.sql fails the relay's checks: %v", err)
	}
	cols, _, err := source.CurrentColumns(ctx, cfg, srv.Addr)
	if err != nil || len(cols["app.outbox"]) != 7 {
		t.Fatalf("start: now cannot read the outbox columns with grants.sql: %v %v", cols, err)
	}
	conn, err := binlog.Connect(ctx, cfg, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ret, err := source.Retention(conn)
	if err != nil || ret != 7*24*time.Hour {
		t.Fatalf("retention %v, %v; the snippet sets 7 days", ret, err)
	}
	rows, err := binlog.Query(conn, "SHOW MASTER STATUS")
	if err != nil || len(rows) != 1 {
		t.Fatalf("show master status: %v %v", rows, err)
	}
	if n, err := source.BehindBytes(conn, rows[0][0], 4); err != nil || n <= 0 {
		t.Fatalf("behind bytes from the start of the current binlog: %d, %v", n, err)
	}
	// `check` tells a replica (which must log_replica_updates) from a
	// primary with SHOW ALL SLAVES STATUS: SLAVE MONITOR on MariaDB 10.5.9+.
	if _, err := binlog.Query(conn, "SHOW ALL SLAVES STATUS"); err != nil {
		t.Fatalf("the relay's user of grants.sql cannot read replica status (check's log_replica_updates): %v", err)
	}
	t.Logf("MariaDB %s accepts mariadb.cnf; relay user ok", info.Version)
}
