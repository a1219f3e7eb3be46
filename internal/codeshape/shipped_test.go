package codeshape

import (
	"bufio"
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// goFile is one parsed Go file: its package and path relative to the
// module's root.
type goFile struct {
	pkg  string // "internal/relay"
	path string // "internal/relay/loop.go"
	ast  *ast.File
	fset *token.FileSet
}

// at is n's file and line.
func (f goFile) at(n ast.Node) string {
	return f.path + ":" + strconv.Itoa(f.fset.Position(n.Pos()).Line)
}

// moduleRoot is the module's root and its module path.
func moduleRoot(t *testing.T) (dir, module string) {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "module "); ok {
			return dir, strings.TrimSpace(m)
		}
	}
	t.Fatal("go.mod names no module")
	return "", ""
}

// shipped parses the non-test Go files of every package of the module that
// the binary (cmd/outbox-relay) links in its default build, following the
// imports from the command with go/build's choice of files (no build tags:
// the failpoints are out). The test harnesses and doubles
// (internal/itest, internal/mysqlsource, internal/hostiledb,
// internal/kafkatest, the *itest packages) are never among them: the
// binary links none (cmd/outbox-relay's
// TestShippedBinaryCarriesNoTestMachinery), and test files are not read.
func shipped(t *testing.T) []goFile {
	t.Helper()
	dir, module := moduleRoot(t)
	fset := token.NewFileSet()
	ctx := build.Default
	ctx.BuildTags = nil
	seen := map[string]bool{}
	var files []goFile
	for queue := []string{"cmd/outbox-relay"}; len(queue) > 0; queue = queue[1:] {
		rel := queue[0]
		if seen[rel] {
			continue
		}
		seen[rel] = true
		bp, err := ctx.ImportDir(filepath.Join(dir, filepath.FromSlash(rel)), 0)
		if err != nil {
			t.Fatalf("package %s: %v", rel, err)
		}
		for _, imp := range bp.Imports {
			if sub, ok := strings.CutPrefix(imp, module+"/"); ok {
				queue = append(queue, sub)
			}
		}
		for _, name := range bp.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(bp.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, goFile{pkg: rel, path: rel + "/" + name, ast: f, fset: fset})
		}
	}
	for _, harness := range []string{"internal/itest", "internal/mysqlsource", "internal/hostiledb", "internal/kafkatest"} {
		if seen[harness] {
			t.Fatalf("the shipped binary links %s, test machinery", harness)
		}
	}
	if !seen["internal/relay"] || len(files) < 100 {
		t.Fatalf("read %d files of %d packages; want the relay's among them", len(files), len(seen))
	}
	return files
}

// parseDir parses the Go files of dir (testdata) as files of package pkg.
func parseDir(t *testing.T, dir, pkg string) []goFile {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var files []goFile
	for _, name := range names {
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, goFile{pkg: pkg, path: pkg + "/" + filepath.Base(name), ast: f, fset: fset})
	}
	return files
}

// importName is the name f refers to the package path by; "" when f does not
// import it.
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != path {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return path[strings.LastIndex(path, "/")+1:]
	}
	return ""
}

// packageNames are the names f's imports are referred to by.
func packageNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if name := importName(f, p); name != "_" && name != "." {
			names[name] = true
		}
	}
	return names
}

// The limits (docs/architecture.md, "The code's shape").
const (
	maxStructFields     = 16
	maxInterfaceMethods = 6
	maxKerrFiles        = 4
)

// The struct limit holds for the engine's production code, internal/,
// except the configuration (internal/config: one field per knob of the
// YAML it mirrors) and the metrics (internal/metrics: one field per
// metric); the packages outside internal/ are the library the engine
// stands on (binlog, checkpoint, router, source, schema, outbox, inbox) and
// the command, and are reported, not held to it.
func structLimitHolds(pkg string) bool {
	return strings.HasPrefix(pkg, "internal/") && pkg != "internal/config" && pkg != "internal/metrics"
}

// bigStructs lists the struct types of files (named or not) with more than
// maxStructFields fields; an embedded field counts one, a, b T two.
func bigStructs(files []goFile) []string {
	var out []string
	for _, f := range files {
		ast.Inspect(f.ast, func(n ast.Node) bool {
			if s, ok := n.(*ast.StructType); ok {
				c := 0
				for _, fl := range s.Fields.List {
					c += max(1, len(fl.Names))
				}
				if c > maxStructFields {
					out = append(out, f.at(s)+": struct of "+strconv.Itoa(c)+" fields")
				}
			}
			return true
		})
	}
	return out
}

// bigInterfaces lists the interface types of files with more than
// maxInterfaceMethods methods (an embedded interface counts one).
func bigInterfaces(files []goFile) []string {
	var out []string
	for _, f := range files {
		ast.Inspect(f.ast, func(n ast.Node) bool {
			if it, ok := n.(*ast.InterfaceType); ok && len(it.Methods.List) > maxInterfaceMethods {
				out = append(out, f.at(it)+": interface of "+strconv.Itoa(len(it.Methods.List))+" methods")
			}
			return true
		})
	}
	return out
}

// idleMethods lists the methods of files that do nothing: an empty body,
// or a body that is one return of zero values only (nil, false, 0, "",
// T{}), the shape of a method an implementation has only to satisfy an
// interface it does not need.
func idleMethods(files []goFile) []string {
	var out []string
	for _, f := range files {
		for _, d := range f.ast.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && fn.Recv != nil && fn.Body != nil && doesNothing(fn.Body) {
				out = append(out, f.at(fn)+": method "+fn.Name.Name+" does nothing")
			}
		}
	}
	return out
}

func doesNothing(b *ast.BlockStmt) bool {
	if len(b.List) == 0 {
		return true
	}
	r, ok := b.List[0].(*ast.ReturnStmt)
	if len(b.List) != 1 || !ok {
		return false
	}
	for _, e := range r.Results {
		if !isZero(e) {
			return false
		}
	}
	return true
}

func isZero(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name == "nil" || e.Name == "false"
	case *ast.BasicLit:
		v, err := strconv.Unquote(e.Value)
		if e.Kind == token.STRING {
			return err == nil && v == ""
		}
		f, err := strconv.ParseFloat(strings.ReplaceAll(e.Value, "_", ""), 64)
		return err == nil && f == 0
	case *ast.CompositeLit:
		return len(e.Elts) == 0
	case *ast.ParenExpr:
		return isZero(e.X)
	}
	return false
}

// kerrPath is franz-go's package of Kafka's error codes.
const kerrPath = "github.com/twmb/franz-go/pkg/kerr"

// kerrReaders lists the files of files that import kerr.
func kerrReaders(files []goFile) []string {
	var out []string
	for _, f := range files {
		if importName(f.ast, kerrPath) != "" {
			out = append(out, f.path)
		}
	}
	return out
}

// contextValues lists the calls of context.WithValue in files: data rides
// in types, never in a context.
func contextValues(files []goFile) []string {
	var out []string
	for _, f := range files {
		name := importName(f.ast, "context")
		if name == "" {
			continue
		}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "WithValue" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == name {
					out = append(out, f.at(sel)+": context.WithValue")
				}
			}
			return true
		})
	}
	return out
}

// contextFields lists, in files, every use of a field named Context (kgo.Record's,
// the one a mark would ride in: read, compared, assigned, or set in a
// composite literal). The method Context() (an http.Request's, an
// errgroup's) and a package's Context (context.Context) are not fields.
func contextFields(files []goFile) []string {
	var out []string
	for _, f := range files {
		pkgs := packageNames(f.ast)
		called := map[*ast.SelectorExpr]bool{}
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
					called[sel] = true
				}
			case *ast.SelectorExpr:
				if n.Sel.Name != "Context" || called[n] {
					return true
				}
				if id, ok := n.X.(*ast.Ident); ok && pkgs[id.Name] {
					return true // a package's type
				}
				out = append(out, f.at(n)+": field Context")
			case *ast.CompositeLit:
				for _, e := range n.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "Context" {
							out = append(out, f.at(kv)+": field Context set")
						}
					}
				}
			}
			return true
		})
	}
	return out
}

// The shipped binary's own code keeps the engine's limits: no struct of
// internal/ over 16 fields (but the configuration's and the metrics', see
// structLimitHolds), no interface over 6 methods and no method that does
// nothing anywhere, Kafka's error codes (kerr) read in at most 4 files, no
// context.WithValue, and no use of a field named Context (the place a
// record's placement once rode in, compared by identity, and lost when
// tracing replaced the record's context).
func TestShippedCodeKeepsTheEnginesLimits(t *testing.T) {
	files := shipped(t)
	var engine, library []goFile
	for _, f := range files {
		if structLimitHolds(f.pkg) {
			engine = append(engine, f)
		} else {
			library = append(library, f)
		}
	}
	check := func(what string, found []string, limit int) {
		t.Helper()
		if len(found) > limit {
			t.Errorf("%s: %d, at most %d:\n\t%s", what, len(found), limit, strings.Join(found, "\n\t"))
		}
	}
	check("structs over 16 fields in internal/ (config and metrics aside)", bigStructs(engine), 0)
	check("interfaces over 6 methods", bigInterfaces(files), 0)
	check("methods that do nothing", idleMethods(files), 0)
	readers := kerrReaders(files)
	check("files that read Kafka's error codes (import kerr)", readers, maxKerrFiles)
	check("calls of context.WithValue", contextValues(files), 0)
	check("uses of a field named Context", contextFields(files), 0)
	t.Logf("%d files of the shipped binary; kerr read in %v", len(files), readers)
	for _, s := range bigStructs(library) {
		t.Logf("not held to the struct limit: %s", s)
	}
}

// Each check finds what it is there to find: testdata/over holds one of
// every shape the limits refuse, and one of each that they let pass
// (testdata/over/pass.go).
func TestTheLimitsFindEachShapeTheyRefuse(t *testing.T) {
	files := parseDir(t, filepath.Join("testdata", "over"), "internal/over")
	var got []string
	for _, found := range [][]string{bigStructs(files), bigInterfaces(files), idleMethods(files),
		kerrReaders(files), contextValues(files), contextFields(files)} {
		got = append(got, found...)
	}
	want := []string{
		"internal/over/over.go:12: struct of 17 fields",
		"internal/over/over.go:23: struct of 17 fields",
		"internal/over/over.go:30: interface of 7 methods",
		"internal/over/over.go:40: method empty does nothing",
		"internal/over/over.go:42: method zeroes does nothing",
		"internal/over/over.go:44: method blank does nothing",
		"internal/over/over.go:46: method zeroValue does nothing",
		"internal/over/over.go", // imports kerr
		"internal/over/over.go:50: context.WithValue",
		"internal/over/over.go:55: field Context set",
		"internal/over/over.go:59: field Context",
		"internal/over/over.go:62: field Context",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("found:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
