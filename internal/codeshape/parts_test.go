package codeshape

import (
	"bufio"
	"bytes"
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The parts of an attempt in internal/relay and their files
// (docs/architecture.md, "The parts of an attempt"). Every production file
// of the package is on one part.
var relayParts = map[string][]string{
	"attempt":    {"relay.go", "election.go", "source.go", "stale.go", "monitor.go", "tables.go", "identity.go", "batchlimit.go", "errors.go"},
	"loop":       {"loop.go", "commit.go", "pending.go", "xalookup.go"},
	"assemble":   {"assemble.go", "xa.go", "position.go"},
	"route":      {"route.go", "recordcheck.go", "tracewarn.go"},
	"catalog":    {"catalog.go", "placement.go"},
	"batch":      {"batch.go"},
	"delivery":   {"delivery.go", "kafkarecord.go", "exactlyonce.go", "lane.go", "lanes.go", "laneproof.go", "txnsettle.go", "atleastonce.go"},
	"failpoints": {"failpoint.go", "failpoint_off.go"},    // test machinery any part may mark; empty in the shipped build
	"steptrace":  {"steptrace_on.go", "steptrace_off.go"}, // bench's latency breakdown; empty in the shipped build
}

// relayNever are the references that would run backwards along one row's
// walk (reader -> assemble -> route -> batch -> delivery -> Kafka, the
// loop taking each event through them; the catalog asked by the route
// step): the part on the left names nothing the part on the right
// declares.
var relayNever = [][2]string{
	{"delivery", "loop"}, {"delivery", "route"}, {"delivery", "assemble"}, {"delivery", "batch"}, {"delivery", "catalog"}, {"delivery", "attempt"},
	{"assemble", "loop"}, {"assemble", "route"}, {"assemble", "catalog"}, {"assemble", "batch"}, {"assemble", "delivery"}, {"assemble", "attempt"},
	{"route", "loop"}, {"route", "assemble"}, {"route", "batch"}, {"route", "attempt"},
	{"catalog", "loop"}, {"catalog", "route"}, {"catalog", "assemble"}, {"catalog", "batch"}, {"catalog", "delivery"},
	{"batch", "loop"}, {"batch", "route"}, {"batch", "assemble"}, {"batch", "catalog"}, {"batch", "attempt"},
}

// exportData lists the compiled export data of pkg's dependencies (go list
// -export), for go/types to import them.
func exportData(t *testing.T, dir, pkg string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}", pkg)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export %s: %v", pkg, err)
	}
	files := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), " "); ok && file != "" {
			files[path] = file
		}
	}
	return files
}

// relayReferences type-checks internal/relay's production files (default
// build) and returns, for each file, the files whose declarations it uses
// (a type, function, method, field, constant or variable of the package
// declared in another file), with one name used for each.
func relayReferences(t *testing.T) (refs map[string]map[string]string, files []string) {
	t.Helper()
	dir, module := moduleRoot(t)
	ctx := build.Default
	ctx.BuildTags = nil
	bp, err := ctx.ImportDir(filepath.Join(dir, "internal", "relay"), 0)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(bp.Dir, name), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
		files = append(files, name)
	}
	export := exportData(t, dir, module+"/internal/relay")
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(export[path])
	})}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	pkg, err := conf.Check(module+"/internal/relay", fset, parsed, info)
	if err != nil {
		t.Fatal(err)
	}
	refs = map[string]map[string]string{}
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() != pkg || !obj.Pos().IsValid() {
			continue
		}
		if v, ok := obj.(*types.Var); ok && !v.IsField() && v.Parent() != pkg.Scope() {
			continue // a local variable or parameter
		}
		from, to := filepath.Base(fset.Position(id.Pos()).Filename), filepath.Base(fset.Position(obj.Pos()).Filename)
		if from == to {
			continue
		}
		if refs[from] == nil {
			refs[from] = map[string]string{}
		}
		if _, ok := refs[from][to]; !ok || obj.Name() < refs[from][to] {
			refs[from][to] = obj.Name()
		}
	}
	return refs, files
}

// The parts of internal/relay reference each other one way: what a part
// names of another is what a row's walk hands on, never back (relayNever),
// and every file is on a part. Measured with go/types on the default build.
func TestRelayPartsReferenceOneWay(t *testing.T) {
	refs, files := relayReferences(t)
	partOf := map[string]string{}
	for part, fs := range relayParts {
		for _, f := range fs {
			partOf[f] = part
		}
	}
	for _, f := range files {
		if partOf[f] == "" {
			t.Errorf("internal/relay/%s is on no part: add it to relayParts (and to docs/architecture.md)", f)
		}
	}
	for _, never := range relayNever {
		for from, tos := range refs {
			if partOf[from] != never[0] {
				continue
			}
			for to, name := range tos {
				if partOf[to] == never[1] {
					t.Errorf("%s -> %s: %s names %s of %s", never[0], never[1], from, name, to)
				}
			}
		}
	}
	var edges []string
	for from, tos := range refs {
		for to := range tos {
			if a, b := partOf[from], partOf[to]; a != b {
				edges = append(edges, a+" -> "+b)
			}
		}
	}
	slices.Sort(edges)
	t.Logf("references between parts: %v", slices.Compact(edges))
}
