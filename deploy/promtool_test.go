//go:build integration

package deploy

// The integration run of ./deploy/... (make test-integration, which
// requires promtool) runs these: promtool's rule tests take half a minute.

import (
	"os"
	"os/exec"
	"testing"
)

func TestAlertRulesLoadInPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("OUTBOX_RELAY_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool is not installed (make test installs it: apt-get install prometheus)")
		}
		t.Skip("promtool not installed; make test-integration requires it")
	}
	out, err := exec.Command(promtool, "check", "rules", "prometheus/alerts.yml").CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	// The rules' unit tests: each alert fires where it must, and not on an
	// idle source (prometheus/alerts_test.yml).
	cmd := exec.Command(promtool, "test", "rules", "alerts_test.yml")
	cmd.Dir = "prometheus"
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
