package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// unitValues returns every value of key in the unit file (comments skipped).
func unitValues(t *testing.T, key string) []string {
	t.Helper()
	raw, err := os.ReadFile("systemd/outbox-relay.service")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), key+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// The unit scores 2.5 or lower in `systemd-analyze security` (offline, on
// the file), passes secrets as credentials, and never restarts a stop that
// would stop again.
func TestSystemdUnit(t *testing.T) {
	prevent := unitValues(t, "RestartPreventExitStatus")
	if len(prevent) != 1 {
		t.Fatalf("RestartPreventExitStatus: %v", prevent)
	}
	got := strings.Fields(prevent[0])
	for _, code := range []int{relay.ExitData, relay.ExitPurged, relay.ExitConfig} {
		if !slices.Contains(got, strconv.Itoa(code)) {
			t.Errorf("RestartPreventExitStatus %v lacks %d: systemd would restart a stop that stops again", got, code)
		}
	}
	for _, code := range []int{relay.ExitError, relay.ExitTransient} {
		if slices.Contains(got, strconv.Itoa(code)) {
			t.Errorf("RestartPreventExitStatus %v holds %d, which a restart can fix", got, code)
		}
	}
	// on-failure (and on-abnormal for exit codes) would leave the relay
	// down after a death by SIGHUP or SIGPIPE, which systemd counts as clean.
	if r := unitValues(t, "Restart"); len(r) != 1 || r[0] != "always" {
		t.Errorf("Restart=%v, want always", r)
	}
	if len(unitValues(t, "LoadCredential")) == 0 {
		t.Error("no LoadCredential=: secrets must come as credentials")
	}
	if len(unitValues(t, "EnvironmentFile")) > 0 || len(unitValues(t, "Environment")) > 0 {
		t.Error("secrets in the environment are readable in /proc by the same user: use LoadCredential=")
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (apt-get install systemd): the security score is not checked")
	}
	out, err := exec.Command(analyze, "security", "--offline=true", "--no-pager", "systemd/outbox-relay.service").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Overall exposure level") {
		t.Skipf("systemd-analyze security --offline is not supported here (systemd 250+ needed): %v: %.300s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	score, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security: %.1f", score)
	if score > 2.5 {
		t.Fatalf("exposure %.1f > 2.5:\n%s", score, out)
	}

	// Every directive is one this systemd knows (an unknown one is only a
	// warning at load, and its protection silently absent). verify needs
	// the binary to exist: a copy runs /bin/true instead.
	raw, _ := os.ReadFile("systemd/outbox-relay.service")
	unit := filepath.Join(t.TempDir(), "outbox-relay.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(raw), "/usr/local/bin/outbox-relay", "/bin/true")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// A configuration error (a typo in relay.yaml) stops the unit for good:
// otherwise systemd restarts it every RestartSec, forever, on a mistake only
// an operator can fix. RestartPreventExitStatus= applies to the main
// process only, never to ExecStartPre= or ExecStartPost= (systemd.service(5);
// systemd/systemd#11868): a command there whose failure fails the start
// (no "-" prefix) restarts the unit whatever it exits with. So the main
// process, `run`, must exit with a listed status on each mistake.
func TestSystemdUnitStopsRestartingOnConfigError(t *testing.T) {
	for _, key := range []string{"ExecStartPre", "ExecStartPost"} {
		for _, v := range unitValues(t, key) {
			if !strings.HasPrefix(v, "-") {
				t.Errorf("%s=%s: its failure fails the start, and RestartPreventExitStatus= does not apply to it: systemd restarts the unit forever", key, v)
			}
		}
	}
	start := unitValues(t, "ExecStart")
	if len(start) != 1 {
		t.Fatalf("ExecStart: %v", start)
	}
	args := strings.Fields(start[0])
	if len(args) < 2 || filepath.Base(args[0]) != "outbox-relay" || args[1] != "run" {
		t.Fatalf("ExecStart=%s: want outbox-relay run", start[0])
	}
	bin := filepath.Join(t.TempDir(), "outbox-relay")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/outbox-relay").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	prevent := strings.Fields(unitValues(t, "RestartPreventExitStatus")[0])
	dir := t.TempDir()
	for name, yaml := range map[string]string{
		"yaml syntax":   "name: [a\n",
		"unknown key":   "name: a\nsoruce: {}\n",
		"missing value": "name: a\n",
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".yaml")
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		a := slices.Clone(args[1:])
		for i := range a {
			if a[i] == "--config" && i+1 < len(a) {
				a[i+1] = path
			}
		}
		// A relay that does not refuse the file runs on: the deadline ends it.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err := exec.CommandContext(ctx, bin, a...).CombinedOutput()
		cancel()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(prevent, strconv.Itoa(code)) {
			t.Errorf("%s: the main process exits %d, not in RestartPreventExitStatus %v: systemd restarts the unit forever\n%s", name, code, prevent, out)
		}
	}
}
