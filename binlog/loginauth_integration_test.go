//go:build integration

package binlog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// MariaDB's logins go through the guard that holds the password (go-mysql
// logs in with a stand-in on plaintext): mysql_native_password, and
// client_ed25519 after MariaDB's auth switch; a wrong password is still
// "access denied".
func TestLoginToMariaDBNativeAndEd25519(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: t.TempDir()})
	if errors.Is(err, devdb.ErrNotInstalled) {
		t.Skip("MariaDB not installed")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	const pw = "Pw-of-the-replication-user-7731"
	if err := srv.Exec("INSTALL SONAME 'auth_ed25519'",
		"CREATE USER native@'%' IDENTIFIED BY '"+pw+"'",
		"CREATE USER ed@'%' IDENTIFIED VIA ed25519 USING PASSWORD('"+pw+"')"); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"native", "ed"} {
		cfg := binlog.Config{Hosts: []string{srv.Addr}, User: user, Password: pw, ConnectTimeout: 5 * time.Second}
		conn, err := binlog.Connect(ctx, cfg, srv.Addr)
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		rows, err := binlog.Query(conn, "SELECT CURRENT_USER()")
		conn.Close()
		if err != nil || len(rows) != 1 || rows[0][0] != user+"@%" {
			t.Fatalf("%s: logged in as %v (%v)", user, rows, err)
		}
		cfg.Password = "not-" + pw
		if _, err := binlog.Connect(ctx, cfg, srv.Addr); !errors.Is(err, binlog.ErrAccessDenied) {
			t.Fatalf("%s with a wrong password: %v, want %v", user, err, binlog.ErrAccessDenied)
		}
	}
}
