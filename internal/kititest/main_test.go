//go:build integration

package kititest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
)

var env *itest.Env

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(consumerHelper())
	}
	os.Exit(itest.Main(m, &env))
}

// dsn is a database/sql (go-sql-driver) DSN for db on the test MariaDB.
func dsn(addr, db string) string {
	return fmt.Sprintf("root:%s@tcp(%s)/%s?parseTime=true", devdb.RootPassword, addr, db)
}

// openDB opens the schema's database as root with database/sql.
func openDB(t testing.TB, db string) *sql.DB {
	t.Helper()
	d, err := sql.Open("mysql", dsn(env.DB.Addr, db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// runCLI runs the relay binary with args and returns its exit code and
// combined output.
func runCLI(t testing.TB, extraEnv []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.Binary, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	t.Logf("$ outbox-relay %s -> exit %d\n%s", strings.Join(args, " "), code, out)
	return code, string(out)
}

// count runs a COUNT(*) query.
func count(t testing.TB, db *sql.DB, q string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}
