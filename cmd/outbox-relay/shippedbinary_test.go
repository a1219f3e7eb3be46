//go:build integration

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// failpointEnv is the variable the relay's failpoints read
// (internal/relay/failpoint.go), in a build with -tags failpoint only.
const failpointEnv = "OUTBOX_RELAY_FAILPOINT"

// stepTraceEnv is the variable the relay's step trace reads
// (internal/relay/steptrace_on.go), in a build with -tags steptrace only.
const stepTraceEnv = "OUTBOX_RELAY_STEPTRACE"

// testOnlyPackages hold test machinery; the relay binary links none of them.
var testOnlyPackages = []string{
	"testing",
	"github.com/outbox-relay/outbox-relay/internal/itest",
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource",
	"github.com/outbox-relay/outbox-relay/internal/hostiledb",
	"github.com/outbox-relay/outbox-relay/internal/kafkatest",
}

// TestShippedBinaryCarriesNoTestMachinery builds the relay as `make build`
// does and requires that it holds no failpoint (no symbol of the module's
// named after one, not the variable's name), no step trace (the variable's
// name) and links no package of test machinery. The same build with -tags
// failpoint, or -tags steptrace, must show them, so the check cannot pass
// by looking in the wrong place.
func TestShippedBinaryCarriesNoTestMachinery(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the relay twice")
	}
	dir := t.TempDir()
	build := func(name string, args ...string) string {
		t.Helper()
		bin := filepath.Join(dir, name)
		cmd := exec.Command("go", append(append([]string{"build"}, args...), "-o", bin, ".")...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return bin
	}
	// failpoints lists the module's symbols named after a failpoint and
	// whether the binary holds the variable's name.
	failpoints := func(bin string) (symbols []string, env bool) {
		t.Helper()
		out, err := exec.Command("go", "tool", "nm", bin).CombinedOutput()
		if err != nil {
			t.Fatalf("go tool nm %s: %v\n%s", bin, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "outbox-relay/") && strings.Contains(strings.ToLower(line), "failpoint") {
				symbols = append(symbols, strings.TrimSpace(line))
			}
		}
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		return symbols, bytes.Contains(b, []byte(failpointEnv))
	}

	holds := func(bin, s string) bool {
		t.Helper()
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Contains(b, []byte(s))
	}

	shipped := build("outbox-relay")
	if syms, env := failpoints(shipped); len(syms) > 0 || env {
		t.Errorf("the shipped binary holds failpoints: symbols %q, %s in its bytes: %v", syms, failpointEnv, env)
	}
	if holds(shipped, stepTraceEnv) {
		t.Errorf("the shipped binary holds the step trace: %s in its bytes", stepTraceEnv)
	}
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	for _, p := range testOnlyPackages {
		for _, d := range deps {
			if d == p {
				t.Errorf("the relay binary links %s, test machinery: import it from _test files only", p)
			}
		}
	}

	tagged := build("outbox-relay-failpoint", "-tags", "failpoint")
	if syms, env := failpoints(tagged); len(syms) == 0 || !env {
		t.Errorf("a -tags failpoint build shows no failpoints (symbols %q, %s in its bytes: %v): the check above looks in the wrong place", syms, failpointEnv, env)
	}
	if traced := build("outbox-relay-steptrace", "-tags", "steptrace"); !holds(traced, stepTraceEnv) {
		t.Errorf("a -tags steptrace build does not hold %s: the check above looks in the wrong place", stepTraceEnv)
	}
}
