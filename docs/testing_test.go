package docs

import (
	"bufio"
	"go/build/constraint"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// integrationDirs are the directories (from the repository root, slash
// separated) holding a test file that builds only with -tags integration:
// an integration test, or the switch that lets real-time tests run.
func integrationDirs(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		expr, err := buildConstraint(path)
		if err != nil || expr == nil {
			return err
		}
		with := expr.Eval(func(tag string) bool { return tag == "integration" })
		without := expr.Eval(func(string) bool { return false })
		if with && !without {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			if rel = filepath.ToSlash(rel); !slices.Contains(dirs, rel) {
				dirs = append(dirs, rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// buildConstraint is the //go:build line of a Go file, nil without one.
func buildConstraint(path string) (constraint.Expr, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if constraint.IsGoBuild(line) {
			return constraint.Parse(line)
		}
		if line != "" && !strings.HasPrefix(line, "//") {
			return nil, nil
		}
	}
	return nil, sc.Err()
}

// `make test` runs the integration tests (testing.md): every package with a
// test file built only under -tags integration is one make
// test-integration runs (INTEGRATION_PKGS, or internal/itest through
// shards.sh). A package left out has tests that `go test ./...` skips and
// no target runs.
func TestMakeTestRunsEveryIntegrationPackage(t *testing.T) {
	root := ".."
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^INTEGRATION_PKGS\s*:?=(.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no INTEGRATION_PKGS")
	}
	if !strings.Contains(string(mk), "internal/itest/shards.sh") {
		t.Fatal("Makefile: test-integration no longer runs internal/itest/shards.sh")
	}
	pkgs := append(strings.Fields(string(m[1])), "./internal/itest/")
	runs := func(dir string) bool {
		for _, p := range pkgs {
			p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/")
			if tree, ok := strings.CutSuffix(p, "/..."); ok && (dir == tree || strings.HasPrefix(dir, tree+"/")) {
				return true
			}
			if dir == p {
				return true
			}
		}
		return false
	}
	dirs := integrationDirs(t, root)
	if len(dirs) < 5 {
		t.Fatalf("found %d packages with integration tests (%v): the walk misses files", len(dirs), dirs)
	}
	for _, dir := range dirs {
		if !runs(dir) {
			t.Errorf("%s has tests built only with -tags integration, and make test-integration does not run it: add ./%s/ to INTEGRATION_PKGS in the Makefile", dir, dir)
		}
	}
}

// `make test` fuzzes every fuzz target of the tree (FUZZ_TARGETS in the
// Makefile, testing.md), and each entry names a fuzz target that exists
// in its package: a target left out is fuzzed by nothing, and an entry
// whose name matches none makes go test fuzz nothing and pass.
func TestMakeFuzzNamesEveryFuzzTarget(t *testing.T) {
	root := ".."
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?ms)^FUZZ_TARGETS\s*:?=((?:[^\n]*\\\n)*[^\n]*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no FUZZ_TARGETS")
	}
	listed := map[string]bool{}
	for _, f := range strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " ")) {
		parts := strings.Split(f, ":")
		if len(parts) != 3 {
			t.Fatalf("FUZZ_TARGETS entry %q: want package:name:executions", f)
		}
		if n, err := strconv.Atoi(parts[2]); err != nil || n <= 0 {
			t.Errorf("FUZZ_TARGETS entry %q: executions %q is not a positive count", f, parts[2])
		}
		listed[strings.TrimSuffix(strings.TrimPrefix(parts[0], "./"), "/")+"."+parts[1]] = true
	}
	found := map[string]bool{}
	fuzzFunc := regexp.MustCompile(`(?m)^func (Fuzz\w*)\(\w+ \*testing\.F\)`)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, fm := range fuzzFunc.FindAllSubmatch(src, -1) {
			found[filepath.ToSlash(rel)+"."+string(fm[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 5 {
		t.Fatalf("found %d fuzz targets (%v): the walk misses files", len(found), found)
	}
	for f := range found {
		if !listed[f] {
			t.Errorf("fuzz target %s is fuzzed by no make target: add it to FUZZ_TARGETS in the Makefile", f)
		}
	}
	for f := range listed {
		if !found[f] {
			t.Errorf("FUZZ_TARGETS names %s, which is no fuzz target (go test would fuzz nothing and pass)", f)
		}
	}
}
