//go:build integration

package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Ctrl-C stops the demo with exit 0 and no error line, at whatever point it
// comes: while MariaDB and the broker start (the demo used to report the
// interrupted wait as "mariadb ... did not come up", exit 1) and once the
// alarms flow. `make demo` then reports no error either: it runs this
// binary, not `go run` (TestMakeDemoRunsBinaryAndNeedsOnlyMariaDB).
func TestDemoCtrlCStopsWithoutError(t *testing.T) {
	if _, err := exec.LookPath("mariadbd"); err != nil {
		if _, err := os.Stat("/usr/sbin/mariadbd"); err != nil {
			t.Skip("mariadbd not installed (make deps-demo)")
		}
	}
	dir := t.TempDir()
	relayBin, demoBin := filepath.Join(dir, "outbox-relay"), filepath.Join(dir, "demo")
	for bin, pkg := range map[string]string{relayBin: "../../cmd/outbox-relay", demoBin: "."} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	for _, tc := range []struct{ name, at string }{
		{"while starting", "== starting MariaDB"},
		{"while running", "(Ctrl-C to stop)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, demoBin, "--relay", relayBin)
			cmd.WaitDelay = 10 * time.Second
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = cmd.Stdout // one stream, in order
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			sc := bufio.NewScanner(stdout)
			sent := false
			for sc.Scan() {
				line := sc.Text()
				out.WriteString(line + "\n")
				if !sent && strings.Contains(line, tc.at) {
					if err := cmd.Process.Signal(os.Interrupt); err != nil {
						t.Fatal(err)
					}
					sent = true
				}
			}
			err = cmd.Wait()
			if !sent {
				t.Fatalf("the demo ended (%v) before printing %q:\n%s", err, tc.at, out.String())
			}
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ExitCode() == -1 {
				t.Fatalf("the demo did not stop within its deadline after Ctrl-C (%v):\n%s", err, out.String())
			}
			if err != nil {
				t.Errorf("Ctrl-C %s: %v, want exit 0:\n%s", tc.name, err, out.String())
			}
			for _, l := range strings.Split(out.String(), "\n") {
				if strings.HasPrefix(l, "demo:") {
					t.Errorf("Ctrl-C %s: an error line blames the demo: %q", tc.name, l)
				}
			}
			if !strings.Contains(out.String(), "== stopp") {
				t.Errorf("Ctrl-C %s: no \"== stopped\"/\"== stopping\" line:\n%s", tc.name, out.String())
			}
		})
	}
}
