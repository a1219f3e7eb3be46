package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Every way out of run ends with the exit code: the log's last line is
// `relay stopped` with exit_code, the code the process exits with, and
// the last line on stderr is `outbox-relay: ... (exit N)`. Ways out before
// the relay ran (its HTTP port taken, a CPU profile that cannot be
// written) said nothing in the log, and a clean stop said `stopped`
// without the code; a file that cannot be read has no log: the plain line
// carries the code.
func TestRunLastLineCarriesTheExitCode(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	cfg := func(listen string) string {
		path := filepath.Join(dir, strings.ReplaceAll(listen, ":", "_")+".yaml")
		if err := os.WriteFile(path, []byte("name: a\nsource:\n  hosts: [\"127.0.0.1:1\"]\n  user: u\n  server_id: 1\n  tables: [a.b]\n"+
			"kafka:\n  brokers: [\"127.0.0.1:1\"]\nhttp:\n  listen: \""+listen+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"http port taken", []string{"run", "--config", cfg(taken.Addr().String())}},
		{"cpu profile unwritable", []string{"run", "--config", cfg(""), "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "cpu.out")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var code int
			var stderr string
			log := stderrOf(t, func() { code, _, stderr = run(t, c.args...) })
			if code == 0 {
				t.Fatalf("exit 0, want an error")
			}
			lines := strings.Split(strings.TrimSpace(log), "\n")
			var last struct {
				Level    string `json:"level"`
				Message  string `json:"message"`
				ExitCode *int   `json:"exit_code"`
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Message != "relay stopped" ||
				last.ExitCode == nil || *last.ExitCode != code || last.Level != "error" {
				t.Fatalf("exit %d, the log's last line is %q, want relay stopped at error with exit_code %d", code, lines[len(lines)-1], code)
			}
			if !strings.HasSuffix(strings.TrimSpace(stderr), "(exit "+strconv.Itoa(code)+")") {
				t.Fatalf("stderr's last line %q does not end with (exit %d)", stderr, code)
			}
		})
	}
	var o, e bytes.Buffer
	code := execute([]string{"run", "--config", filepath.Join(dir, "missing.yaml")}, &o, &e)
	if code != 78 || !strings.HasSuffix(strings.TrimSpace(e.String()), "(exit 78)") {
		t.Fatalf("an unreadable file: exit %d, stderr %q; want 78 and the line saying it", code, e.String())
	}
}

// `relay stopped` stays the log's last line when a library's goroutine that
// outlived its client logs after it (franz-go's second LeaveGroup did, at
// one stop in ten): the final line seals the log.
func TestLastLineStaysLastWhenALibraryLogsAfterIt(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := newPipeWriter(f)
	cfg := config.Log{Level: config.LogLevel("debug"), Format: config.LogJSON}
	log := newLogger(cfg, out)
	last := &lastLine{log: newLogger(cfg, out.Final())}
	log.Debug().Msg("before")
	last.say(nil, errors.New("terminated signal received"))
	log.Debug().Str("component", "franz-go").Msg("invalidating all assignments in LeaveGroup")
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"before"`) || !strings.Contains(lines[1], `"relay stopped"`) {
		t.Fatalf("log:\n%s\nwant the line before and relay stopped last", b)
	}
}
