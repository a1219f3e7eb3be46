package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = execute(args, &o, &e)
	return code, o.String(), e.String()
}

// TestExitCodes pins the README's exit codes: 0 for success and help, 2
// for every command-line mistake, 78 for a configuration error in every
// command, on stdout for help and stderr for errors.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "relay.yaml")
	if err := os.WriteFile(good, []byte("name: a\nsource:\n  hosts: [\"127.0.0.1:1\"]\n  user: u\n  server_id: 1\n  tables: [a.b]\nkafka:\n  brokers: [\"127.0.0.1:1\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	syntax := filepath.Join(dir, "syntax.yaml")
	if err := os.WriteFile(syntax, []byte("name: [a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args   []string
		code   int
		stdout string // part of stdout; "" checks it is empty
		stderr string // part of stderr; "" checks it is empty
	}{
		{nil, 0, "Available Commands:", ""},
		{[]string{"--help"}, 0, "Available Commands:", ""},
		{[]string{"-h"}, 0, "Available Commands:", ""},
		{[]string{"help"}, 0, "Available Commands:", ""},
		{[]string{"help", "checkpoint", "history"}, 0, "-n, --limit int", ""},
		{[]string{"--version"}, 0, "outbox-relay ", ""},
		{[]string{"version"}, 0, "github.com/twmb/franz-go", ""},
		{[]string{"version", "extra"}, 2, "", `takes no arguments, got "extra"`},
		{[]string{"bogus"}, 2, "", `unknown command "bogus" for "outbox-relay"`},
		{[]string{"chekc", "--config", good}, 2, "", `unknown command "chekc" for "outbox-relay": did you mean check?`},
		{[]string{"checkpoint", "shwo", "--config", good, "-n", "3"}, 2, "", `unknown command "shwo" for "outbox-relay checkpoint": did you mean show?`},
		{[]string{"replya", "--config", good}, 2, "", `unknown command "replya" for "outbox-relay": did you mean replay?`},
		{[]string{"dead-leter", "list"}, 2, "", `did you mean dead-letter?`},
		{[]string{"--bogus"}, 2, "", "unknown flag: --bogus"},
		{[]string{"run", "--bogus"}, 2, "", "unknown flag: --bogus"},
		{[]string{"run"}, 2, "", "--config FILE is required"},
		{[]string{"run", "--config"}, 2, "", "flag needs an argument: --config"},
		{[]string{"run", "--help"}, 0, "--print-config", ""},
		{[]string{"run", "--config", good, "extra"}, 2, "", `takes no arguments, got "extra"`},
		{[]string{"run", "--config", bad}, 78, "", "invalid configuration"},
		{[]string{"run", "--config", filepath.Join(dir, "missing.yaml")}, 78, "", "no such file"},
		{[]string{"run", "--config", good, "--print-config"}, 0, "name: a", ""},
		{[]string{"run", "--print-config", "--config", good}, 0, "name: a", ""},
		{[]string{"check", "--config", bad}, 78, "", "invalid configuration"},
		{[]string{"check", "--config", syntax}, 78, "", "fix the YAML syntax"},
		{[]string{"check", "--config", filepath.Join(dir, "missing.yaml")}, 78, "", "no such file"},
		{[]string{"checkpoint", "show", "--config", syntax}, 78, "", "fix the YAML syntax"},
		{[]string{"schema", "--config", filepath.Join(dir, "missing.yaml")}, 78, "", "no such file"},
		{[]string{"replay", "--config", syntax, "--event-id", "x"}, 78, "", "fix the YAML syntax"},
		{[]string{"prune", "--config", bad, "--older-than", "7d"}, 78, "", "invalid configuration"},
		{[]string{"dead-letter", "list", "--config", bad}, 78, "", "invalid configuration"},
		{[]string{"dead-letter", "replay", "--config", syntax, "--yes"}, 78, "", "fix the YAML syntax"},
		{[]string{"audit", "--config", bad, "--since", "1h"}, 78, "", "invalid configuration"},
		{[]string{"audit", "--config", syntax, "--since", "1h"}, 78, "", "fix the YAML syntax"},
		{[]string{"checkpoint", "history", "--config", bad}, 78, "", "invalid configuration"},
		{[]string{"checkpoint", "set", "--config", syntax, "--to", "now"}, 78, "", "fix the YAML syntax"},
		{[]string{"checkpoint", "skip", "--config", bad, "--gtid", "0-1-1"}, 78, "", "invalid configuration"},
		{[]string{"checkpoint", "reset", "--config", syntax, "--yes"}, 78, "", "fix the YAML syntax"},
		{[]string{"checkpoint", "tables", "--config", bad, "--yes"}, 78, "", "invalid configuration"},
		{[]string{"check", "--help"}, 0, "--json", ""},
		{[]string{"checkpoint"}, 0, "Available Commands:", ""},
		{[]string{"checkpoint", "--help"}, 0, "Available Commands:", ""},
		{[]string{"checkpoint", "bogus"}, 2, "", `unknown command "bogus" for "outbox-relay checkpoint"`},
		{[]string{"checkpoint", "show", "extra", "--config", good}, 2, "", `takes no arguments, got "extra"`},
		{[]string{"checkpoint", "history", "--config", good, "-n", "-5"}, 2, "", "-n -5: want a count of 1 or more"},
		{[]string{"checkpoint", "history", "--config", good, "-n", "0"}, 2, "", "-n 0: want a count of 1 or more"},
		{[]string{"checkpoint", "history", "--config", good, "-n", "abc"}, 2, "", `invalid argument "abc" for "-n, --limit" flag`},
		{[]string{"checkpoint", "show", "--config", good, "--wait", "soon"}, 2, "", `invalid argument "soon" for "--wait" flag`},
		{[]string{"checkpoint", "set", "--config", good}, 2, "", "give exactly one of --gtid SET, --to now|earliest and --from-debezium"},
		{[]string{"checkpoint", "set", "--config", good, "--to", "later"}, 2, "", `--to "later": want now or earliest`},
		{[]string{"checkpoint", "set", "--config", good, "--to", "now", "--offsets-file", "o.dat", "--json"}, 2, "", "--json, --offsets-file: only with --from-debezium"},
		{[]string{"checkpoint", "set", "--config", good, "--from-debezium", "--gtid", "0-1-1"}, 2, "", "--from-debezium takes no --gtid, --to or --schema"},
		{[]string{"checkpoint", "set", "--config", good, "--from-debezium", "--offsets-file", "o.dat", "--offsets-topic", "t"}, 2, "",
			"give --offsets-file, or --offsets-topic/--offsets-brokers, not both"},
		{[]string{"checkpoint", "set", "--config", good, "--from-debezium", "--walk-max-rows", "0"}, 2, "", "--walk-max-rows 0: want 1 or more"},
		{[]string{"checkpoint", "set", "--config", good, "--from-debezium", "--offsets-file", dbzFixture("offsets-snapshot.dat")}, 1, "",
			"records a snapshot in progress (snapshot=INITIAL)"},
		{[]string{"checkpoint", "set", "--config", good, "--from-debezium", "--offsets-file", dbzFixture("offsets-several.dat")}, 1, "",
			"several Debezium connector offsets in file " + dbzFixture("offsets-several.dat") + ": connector billing-outbox (server billing), " +
				"connector billing-outbox (server old) (deleted), connector orders-outbox (server orders); choose one with --connector"},
		{[]string{"checkpoint", "set", "--config", good, "--from-debezium", "--offsets-file", dbzFixture("hostile-strings.dat")}, 1, "",
			"not a Kafka Connect offsets file: at byte 81: entry 0's key: want a byte array (0x75), found 0x74"},
		{[]string{"checkpoint", "skip", "--config", good}, 2, "", "--gtid GTID is required"},
		{[]string{"checkpoint", "reset", "--help"}, 0, "--yes", ""},
		{[]string{"dev"}, 0, "Available Commands:", ""},
		{[]string{"dev", "kafka", "--listen", "nope"}, 2, "", `--listen "nope": want host:port`},
		{[]string{"dev", "mariadb"}, 2, "", "--data-dir DIR is required"},
		{[]string{"completion", "bash"}, 0, "bash completion", ""},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := run(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			for _, c := range []struct{ name, got, want string }{{"stdout", stdout, tc.stdout}, {"stderr", stderr, tc.stderr}} {
				if c.want == "" && c.got != "" {
					t.Errorf("%s not empty: %s", c.name, c.got)
				}
				if !strings.Contains(c.got, c.want) {
					t.Errorf("%s lacks %q:\n%s", c.name, c.want, c.got)
				}
			}
		})
	}
	// Every command that reads --config has a case above for a bad file.
	pinned := map[string]bool{}
	for _, tc := range tests {
		if tc.code == 78 {
			pinned[strings.Join(tc.args[:slices.Index(tc.args, "--config")], " ")] = true
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		name := strings.TrimPrefix(c.CommandPath(), "outbox-relay ")
		if c.Runnable() && c.Flags().Lookup("config") != nil && !pinned[name] {
			t.Errorf("%s reads --config and has no case for a bad file (exit 78): add one", name)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}

// TestHelpGolden pins the help of every command: each has a description,
// and examples where it runs something.
func TestHelpGolden(t *testing.T) {
	cmds := [][]string{{}}
	root := newRootCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" || c.Name() == "help" {
			continue
		}
		cmds = append(cmds, []string{c.Name()})
		for _, s := range c.Commands() {
			cmds = append(cmds, []string{c.Name(), s.Name()})
		}
	}
	for _, args := range cmds {
		name := strings.Join(append([]string{"root"}, args...), "_")
		t.Run(name, func(t *testing.T) {
			code, stdout, stderr := run(t, append(args, "--help")...)
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			if len(args) > 0 && !strings.Contains(stdout, "Examples:") {
				t.Errorf("no examples in the help of %v", args)
			}
			golden := filepath.Join("testdata", "help", name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/outbox-relay/ -run TestHelpGolden -args -update to write it)", err)
			}
			if string(want) != stdout {
				t.Errorf("help of %v changed (go test ./cmd/outbox-relay/ -run TestHelpGolden -args -update when intended):\n%s", args, stdout)
			}
		})
	}
}

// Command-line mistakes exit 2. The failure guarded against: command-line
// mistakes that exit 0 or 1 instead of 2 (README "Exit codes": 2 a
// command-line mistake, an unknown command among them). A CI step
// `outbox-relay completion zhs > _outbox-relay` succeeds and writes the
// help text into the completion file.
func TestUsageMistakesExit2(t *testing.T) {
	for _, args := range [][]string{
		{"completion", "zhs"},
		{"completion", "bash", "extra"},
		{"help", "nosuch"},
		{"completion", "bash", "--bogus"},
	} {
		code, stdout, stderr := run(t, args...)
		if code != 2 {
			n := min(len(stdout), 80)
			t.Errorf("%q: exit %d, want 2 (stdout %q…, stderr %q)", args, code, stdout[:n], stderr)
		}
	}
}

// Each command's help says its own truth: --host of audit and replay said
// "prune needs the primary" (text shared with prune), although they only
// read and a replica does.
func TestHostFlagHelpIsEachCommandsOwn(t *testing.T) {
	for _, c := range []struct {
		args      []string
		want, not string
	}{
		{[]string{"prune", "--help"}, "prune needs the primary", "replica is fine"},
		{[]string{"audit", "--help"}, "a replica is fine: audit only reads", "prune"},
		{[]string{"replay", "--help"}, "a replica is fine: replay only reads", "prune"},
		{[]string{"dead-letter", "replay", "--help"}, "a replica is fine: dead-letter replay only reads", "prune"},
	} {
		_, stdout, _ := run(t, c.args...)
		var host string
		for _, l := range strings.Split(stdout, "\n") {
			if strings.Contains(l, "--host string") {
				host = l
			}
		}
		if !strings.Contains(host, c.want) || strings.Contains(host, c.not) {
			t.Errorf("%v: --host says %q, want %q and no %q", c.args, strings.TrimSpace(host), c.want, c.not)
		}
	}
}

// dbzFixture is a Kafka Connect offsets file of internal/debezium's tests.
func dbzFixture(name string) string {
	return filepath.Join("..", "..", "internal", "debezium", "testdata", name)
}
