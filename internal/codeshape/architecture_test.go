package codeshape

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// goName is a Go file's name as docs/architecture.md and the comments cite
// it: a whole path from the module's root, or a file's bare name.
var goName = regexp.MustCompile(`(?:[\w.-]+/)*[\w-]+\.go\b`)

// moduleGoFiles lists the module's Go files (testdata aside) by path from
// the root, and the bare names among them.
func moduleGoFiles(t *testing.T, dir string) (paths, names map[string]bool) {
	t.Helper()
	paths, names = map[string]bool{}, map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && p != dir {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			rel, _ := filepath.Rel(dir, p)
			paths[filepath.ToSlash(rel)] = true
			names[d.Name()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths, names
}

// relayMembers is, for each type internal/relay declares (test files
// aside), the names of its methods and fields, and the production files of
// the package.
func relayMembers(t *testing.T, dir string) (members map[string]map[string]bool, files []string) {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "internal", "relay", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	members = map[string]map[string]bool{}
	add := func(typ, name string) {
		if members[typ] == nil {
			members[typ] = map[string]bool{}
		}
		members[typ][name] = true
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		files = append(files, filepath.Base(name))
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					continue
				}
				recv := d.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					add(id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					add(ts.Name.Name, "")
					switch tt := ts.Type.(type) {
					case *ast.StructType:
						for _, fl := range tt.Fields.List {
							for _, n := range fl.Names {
								add(ts.Name.Name, n.Name)
							}
						}
					case *ast.InterfaceType:
						for _, m := range tt.Methods.List {
							for _, n := range m.Names {
								add(ts.Name.Name, n.Name)
							}
						}
					}
				}
			}
		}
	}
	return members, files
}

// docs/architecture.md matches the code: every Go file it names exists (a
// path whole from the module's root, or a bare name some file of the
// module bears), every production file of internal/relay is in it (the
// engine's file map leaves none out), and every `type.member` it quotes of
// a type internal/relay declares is a method or field of that type. The
// comments of internal/relay name only files that exist.
func TestArchitectureNamesWhatTheCodeHas(t *testing.T) {
	dir, _ := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(dir, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths, names := moduleGoFiles(t, dir)
	members, relayFiles := relayMembers(t, dir)
	for _, problem := range architectureProblems(string(doc), paths, names, members, relayFiles) {
		t.Error("docs/architecture.md: " + problem)
	}
	for _, name := range relayFiles {
		src, err := os.ReadFile(filepath.Join(dir, "internal", "relay", name))
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, cg := range f.Comments {
			for _, cited := range goName.FindAllString(cg.Text(), -1) {
				if strings.Contains(cited, "/") && !paths[cited] || !strings.Contains(cited, "/") && !slices.Contains(relayFiles, cited) && !paths["internal/relay/"+cited] {
					t.Errorf("internal/relay/%s: a comment names %s, which internal/relay does not have", name, cited)
				}
			}
		}
	}
}

// quotedMember is a `type.member` (or `type.member(...)`) in backquotes.
var quotedMember = regexp.MustCompile("`([A-Za-z_]\\w*)\\.([A-Za-z_]\\w*)[^`]*`")

// architectureProblems lists what doc names that the code does not have.
func architectureProblems(doc string, paths, names map[string]bool, members map[string]map[string]bool, relayFiles []string) []string {
	var out []string
	for _, cited := range goName.FindAllString(doc, -1) {
		if strings.Contains(cited, "/") && !paths[cited] {
			out = append(out, "names "+cited+", which is no file (a path is whole, from the module's root)")
		}
		if !strings.Contains(cited, "/") && !names[cited] && cited != "_test.go" {
			out = append(out, "names "+cited+", which no file of the module is named")
		}
	}
	for _, name := range relayFiles {
		if !strings.Contains(doc, name) {
			out = append(out, "does not name internal/relay/"+name)
		}
	}
	for _, m := range quotedMember.FindAllStringSubmatch(doc, -1) {
		if typ, ok := members[m[1]]; ok && m[2] != "go" && !typ[m[2]] { // loop.go is a file
			out = append(out, "quotes "+m[1]+"."+m[2]+", which "+m[1]+" (internal/relay) does not have")
		}
	}
	return out
}

// The check of docs/architecture.md finds a file that is gone, a path that
// is not whole, a file of internal/relay left out, and a member a type does
// not have; and passes what is there.
func TestArchitectureCheckFindsWhatIsNotThere(t *testing.T) {
	paths := map[string]bool{"internal/relay/loop.go": true, "internal/relay/route.go": true, "binlog/conn.go": true}
	names := map[string]bool{"loop.go": true, "route.go": true, "conn.go": true}
	members := map[string]map[string]bool{"loop": {"": true, "handle": true}}
	doc := "`loop.go` and `records.go`; `binlog/conn.go`, `relay/loop.go`; `loop.handle`, `loop.consume(ctx)`, `spans.Start`"
	got := architectureProblems(doc, paths, names, members, []string{"loop.go", "route.go"})
	want := []string{
		"names records.go, which no file of the module is named",
		"names relay/loop.go, which is no file (a path is whole, from the module's root)",
		"does not name internal/relay/route.go",
		"quotes loop.consume, which loop (internal/relay) does not have",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found:\n\t%s\nwant:\n\t%s", strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
	}
}
