//go:build integration

package itest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// readmeBlock returns the code block of README.md after the marker
// comment <!-- marker... -->.
func readmeBlock(t *testing.T, marker string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(marker) + "[^>]*-->\\n```[a-z]*\\n(.*?)```").FindSubmatch(raw)
	if m == nil {
		t.Fatalf("README.md has no code block after <!-- %s -->", marker)
	}
	return string(m[1])
}

// TestReadmeFirstRunPassesCheck: the README's first run against your own
// server works as written: on a scratch MariaDB whose relay user has
// exactly the grants the README lists, its relay.yaml (hosts and brokers
// from the variables it names) passes `check` against the embedded broker.
func TestReadmeFirstRunPassesCheck(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(t.TempDir(), "db"), ServerID: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	stmts := []string{"CREATE DATABASE app", fmt.Sprintf(OutboxDDL, "app")}
	for _, line := range strings.Split(readmeBlock(t, "readme-grants"), "\n") {
		if stmt, _, _ := strings.Cut(line, "--"); strings.TrimSpace(stmt) != "" {
			stmts = append(stmts, strings.ReplaceAll(strings.TrimSuffix(strings.TrimSpace(stmt), ";"), "'...'", "'readme-pw'"))
		}
	}
	if err := srv.Exec(stmts...); err != nil {
		t.Fatalf("the README's grants: %v", err)
	}
	path := filepath.Join(t.TempDir(), "relay.yaml")
	if err := os.WriteFile(path, []byte(readmeBlock(t, "readme-relay-yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RELAY_MYSQL_PASSWORD", "readme-pw")
	t.Setenv("MYSQL_HOSTS", srv.Addr)
	t.Setenv("KAFKA_BROKERS", strings.Join(k.Brokers, ","))
	out, errOut, code := env.CLI(t, "check", "--config", path)
	if code != 0 || !strings.Contains(out, "table app.outbox") || strings.Contains(out, "FAIL") {
		t.Fatalf("check of the README's relay.yaml: exit %d:\n%s%s", code, out, errOut)
	}
}
