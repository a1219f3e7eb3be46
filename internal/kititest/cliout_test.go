//go:build integration

package kititest

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// cliOut runs the relay binary with args and extra environment, and returns
// its exit code, stdout and stderr apart.
func cliOut(t *testing.T, extraEnv []string, args ...string) (int, string, string) {
	t.Helper()
	for _, e := range extraEnv {
		k, v, _ := strings.Cut(e, "=")
		t.Setenv(k, v)
	}
	stdout, stderr, code := env.CLI(t, args...)
	t.Logf("$ outbox-relay %s -> exit %d\nstdout: %.2000s\nstderr: %.2000s", strings.Join(args, " "), code, stdout, stderr)
	return code, stdout, stderr
}

// TestReplayPrintsASummaryNotEveryRow: replay of thousands of rows prints
// one summary line on stdout, not a line per row (90,000 rows printed
// 90,000 lines), and its progress on stderr; the rows are listed with
// --verbose, and --json is one document with every record. --since takes
// an age, as audit's does (replay refused 2h).
func TestReplayPrintsASummaryNotEveryRow(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	const rows = 3000
	if err := s.BigInsert(rows, "sum"); err != nil {
		t.Fatal(err)
	}
	path := itest.WriteConfig(t, cfg)
	code, stdout, stderr := cliOut(t, nil, "replay", "--config", path, "--since", "2h", "--batch", "500", "--yes")
	if code != 0 {
		t.Fatalf("replay --since 2h: exit %d: %s", code, stderr)
	}
	if lines := strings.Split(strings.TrimSpace(stdout), "\n"); len(lines) != 1 ||
		!strings.HasPrefix(lines[0], fmt.Sprintf("replay: published %d records in 6 transactions (", rows)) {
		t.Fatalf("stdout is %d lines, want the summary alone:\n%.500s", len(lines), stdout)
	}
	if !strings.Contains(stderr, fmt.Sprintf("replay: %d of %d records published (", rows, rows)) {
		t.Fatalf("no final progress line on stderr:\n%s", stderr)
	}
	if n := len(itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix)); n != rows {
		t.Fatalf("%d records published, want %d", n, rows)
	}

	code, stdout, _ = cliOut(t, nil, "replay", "--config", path, "--since", "2h", "--yes", "--verbose")
	if n := strings.Count(stdout, "  topic="); code != 0 || n != rows || !strings.Contains(stdout, fmt.Sprintf("replay: published %d records", rows)) {
		t.Fatalf("--verbose: exit %d, %d row lines, want %d and the summary", code, n, rows)
	}

	code, stdout, _ = cliOut(t, nil, "replay", "--config", path, "--since", "2h", "--yes", "--json")
	var doc struct {
		DryRun    bool `json:"dry_run"`
		Selected  int  `json:"selected"`
		Published int  `json:"published"`
		Records   []struct {
			EventID string `json:"event_id"`
			Topic   string `json:"topic"`
			Key     string `json:"key"`
		} `json:"records"`
	}
	if code != 0 || strings.Count(stdout, "\n") != 1 || json.Unmarshal([]byte(stdout), &doc) != nil {
		t.Fatalf("--json: exit %d, want one JSON document on one line: %.300s", code, stdout)
	}
	if doc.DryRun || doc.Selected != rows || doc.Published != rows || len(doc.Records) != rows ||
		doc.Records[0].EventID == "" || doc.Records[0].Topic != cfg.Router.TopicPrefix+"alarm" || doc.Records[0].Key == "" {
		t.Fatalf("--json: dry_run %v selected %d published %d, %d records (first %+v)", doc.DryRun, doc.Selected, doc.Published, len(doc.Records), doc.Records[0])
	}

	code, stdout, _ = cliOut(t, nil, "replay", "--config", path, "--since", "2h", "--until", "1h", "--json", "--dry-run")
	if code != 0 || strings.TrimSpace(stdout) != `{"dry_run":true,"selected":0,"published":0,"records":[]}` {
		t.Fatalf("--json of an empty selection: exit %d: %s", code, stdout)
	}
}

// TestPruneReadsTimesAndAgesAndPrintsJSON: --older-than takes an RFC 3339
// time as well as an age (it took only ages), compared on a server not in
// UTC as the rows' DEFAULT CURRENT_TIMESTAMP filled them; --json is one
// document with the counts per table.
func TestPruneReadsTimesAndAgesAndPrintsJSON(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	if err := env.DB.Exec("SET GLOBAL time_zone = '+05:00'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.DB.Exec("SET GLOBAL time_zone = 'SYSTEM'") })
	db := openDB(t, s.Name) // its session is in +05:00, as the writers' are
	path := itest.WriteConfig(t, cfg)
	for _, q := range []string{
		"INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, created_at) VALUES " +
			"('o-1', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 3 HOUR), ('o-2', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 3 HOUR), " +
			"('o-3', 'alarm', 'd', 'X', '{}', NOW(3) - INTERVAL 2 HOUR), ('new', 'alarm', 'd', 'X', '{}', NOW(3))",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, errOut := cliOut(t, nil, "checkpoint", "set", "--config", path, "--to", "now", "--yes"); code != 0 {
		t.Fatalf("checkpoint set: exit %d: %s", code, errOut)
	}
	pw := []string{"KITITEST_ROOT_PW=" + devdb.RootPassword}
	args := []string{"prune", "--config", path, "--batch", "2", "--wait", "5s", "--user", "root", "--password-env", "KITITEST_ROOT_PW", "--json"}
	type doc struct {
		DryRun    bool      `json:"dry_run"`
		OlderThan string    `json:"older_than"`
		Before    time.Time `json:"before"`
		Host      string    `json:"host"`
		Rows      int       `json:"rows"`
		Tables    []struct {
			Table string `json:"table"`
			Rows  int    `json:"rows"`
		} `json:"tables"`
	}
	read := func(out string) doc {
		t.Helper()
		var d doc
		if strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &d) != nil {
			t.Fatalf("want one JSON document on one line, got %q", out)
		}
		return d
	}
	// 150 minutes ago as an RFC 3339 time in UTC: the rows of 3 hours ago.
	before := time.Now().Add(-150 * time.Minute).UTC().Truncate(time.Second)
	code, out, errOut := cliOut(t, pw, append(args, "--older-than", before.Format(time.RFC3339), "--dry-run")...)
	if d := read(out); code != 0 || !d.DryRun || d.Rows != 2 || !d.Before.Equal(before) || len(d.Tables) != 1 || d.Tables[0].Rows != 2 {
		t.Fatalf("dry run --older-than %s: exit %d, %+v; want 2 rows (the two of 3 hours ago): %s", before.Format(time.RFC3339), code, d, errOut)
	}
	code, out, errOut = cliOut(t, pw, append(args, "--older-than", "90m", "--yes")...)
	if d := read(out); code != 0 || d.DryRun || d.Rows != 3 || d.OlderThan != "90m" || d.Host != env.DB.Addr ||
		len(d.Tables) != 1 || d.Tables[0].Table != s.Table() || d.Tables[0].Rows != 3 {
		t.Fatalf("--older-than 90m: exit %d, %+v; want 3 rows deleted: %s", code, d, errOut)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM outbox"); n != 1 {
		t.Fatalf("%d rows left, want the new one", n)
	}
}

// TestSchemaAutoAsksTheSourceForItsFlavor: with source.flavor auto and no
// --flavor, schema asks the source and prints its flavor's table only, so
// the output runs in a client as it is (both flavors' tables one after the
// other failed there: ERROR 1050, table exists); without the password it
// cannot ask, and says to pass --flavor.
func TestSchemaAutoAsksTheSourceForItsFlavor(t *testing.T) {
	k, _, _ := env.Pipeline(t) // creates the relay's user, who asks the server's version
	name := env.Unique("schemaauto")
	if err := env.DB.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	cfg := env.RelayConfig(k, name+".outbox")
	path := itest.WriteConfig(t, cfg)
	code, stdout, stderr := cliOut(t, nil, "schema", "--config", path, "--consumed-event")
	if code != 0 || !strings.Contains(stderr, "runs mariadb") || strings.Count(stdout, "CREATE TABLE") != 2 || strings.Contains(stdout, "-- mysql") {
		t.Fatalf("schema with flavor auto: exit %d; want the MariaDB tables alone (outbox, consumed_event)\n%s\n%s", code, stdout, stderr)
	}
	execScript(t, openDB(t, name), stdout, "schema's output")
	if err := os.Unsetenv("RELAY_TEST_PASSWORD"); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = cliOut(t, nil, "schema", "--config", path)
	if code == 0 || stdout != "" || !strings.Contains(stderr, "pass --flavor mysql or --flavor mariadb") || !strings.Contains(stderr, "RELAY_TEST_PASSWORD") {
		t.Fatalf("schema with flavor auto and no password: exit %d, stdout %q; want an error naming the variable and --flavor:\n%s", code, stdout, stderr)
	}
	if code, stdout, _ = cliOut(t, nil, "schema", "--config", path, "--flavor", "mysql"); code != 0 || !strings.Contains(stdout, "-- mysql") {
		t.Fatalf("schema --flavor mysql without the password: exit %d", code)
	}
}
