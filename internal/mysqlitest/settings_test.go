//go:build integration

package mysqlitest

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

// mysqlDefaults are the MySQL 8.0 / 8.4 defaults of the settings the relay
// checks that differ from what it needs.
var mysqlDefaults = map[string]string{"gtid_mode": "OFF", "enforce_gtid_consistency": "OFF", "binlog_row_metadata": "MINIMAL"}

// cnfVariables reads deploy/mysql/mysql-8.4.cnf as the global variables
// the server shows (log_bin = a file name shows ON).
func cnfVariables(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(itest.RepoRoot(), "deploy", "mysql", "mysql-8.4.cnf"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		name = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(name)), "-", "_")
		value = strings.TrimSpace(value)
		if name == "log_bin" {
			value = "ON"
		}
		vars[name] = value
	}
	if len(vars) < 8 {
		t.Fatalf("read only %v from mysql-8.4.cnf", vars)
	}
	return vars
}

// MySQL's own defaults fail `check` (gtid_mode, enforce_gtid_consistency)
// and warn (binlog_row_metadata MINIMAL); the documented
// deploy/mysql/mysql-8.4.cnf passes on 8.0 and 8.4.
func TestMySQLDocumentedSettings(t *testing.T) {
	k := itest.StartKafka(t)
	defaults := startPrimary(t, mysqlsource.Options{Version: v84, Variables: mysqlDefaults})
	newApp(t, defaults)
	out, _, code := env.CLI(t, "check", "--config", itest.WriteConfig(t, relayConfig(t, k, "mysql", defaults.Addr())))
	status := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == "source" {
			status[f[3]] = f[0]
		}
	}
	if code == 0 || status["gtid_mode"] != "FAIL" || status["enforce_gtid_consistency"] != "FAIL" || status["binlog_row_metadata"] != "WARN" {
		t.Fatalf("check on MySQL's defaults: exit %d, items %v\n%s", code, status, out)
	}
	for _, version := range []string{v80, v84} {
		vars := cnfVariables(t)
		for k, v := range mysqlDefaults { // the cnf must override every default
			if _, ok := vars[k]; !ok {
				vars[k] = v
			}
		}
		p := startPrimary(t, mysqlsource.Options{Version: version, Variables: vars})
		newApp(t, p)
		out, errOut, code := env.CLI(t, "check", "--config", itest.WriteConfig(t, relayConfig(t, k, "mysql", p.Addr())))
		if code != 0 || strings.Contains(out, "WARN  source") {
			t.Fatalf("check on %s with mysql-8.4.cnf: exit %d\n%s\n%s", version, code, out, errOut)
		}
	}
}
