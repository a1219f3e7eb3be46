package docgen

import (
	"bytes"
	"os"
	"testing"
)

// TestConfigReferenceIsCurrent: docs/configuration.md and
// internal/config/docs_gen.go are what the generator makes of the
// configuration's definitions now.
func TestConfigReferenceIsCurrent(t *testing.T) {
	files, err := Files("..")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range files {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not current: run go generate ./internal/config/ (or make docs) and commit it", path)
		}
	}
}

// TestConfigReferenceDocumentsEveryKey: every key has a meaning and an
// example, and the enumerated ones list their choices.
func TestConfigReferenceDocumentsEveryKey(t *testing.T) {
	d, err := Parse("..")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range d.Keys() {
		n++
		if k.Doc == "" {
			t.Errorf("%s: no meaning: add a doc comment to its field (or keyDocs in reference.go)", k.Path)
		}
		if k.Example == "" && k.Type != "mapping" {
			t.Errorf("%s: no example: add one to keyExamples in reference.go", k.Path)
		}
	}
	for _, k := range []string{"Delivery", "Flavor", "Compression", "Preset", "LogLevel", "SASLMechanism", "Placement"} {
		if len(d.Enums[k]) < 2 {
			t.Errorf("no choices of %s: %q", k, d.Enums[k])
		}
	}
	if n < 80 {
		t.Errorf("%d keys: the walk misses some", n)
	}
}
