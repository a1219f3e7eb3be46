package docs

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

var tick = regexp.MustCompile("`([a-z0-9_.]+)`")

// keysOf returns the keys in the first column of the markdown tables of a
// page, with a short key (`key_file` after `source.tls.cert_file`) taken as
// a sibling of the full key before it in the same cell.
func keysOf(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) > 2 && strings.TrimSpace(cells[2]) == "mapping" {
			continue // a section (source.tls), not a key
		}
		cell := cells[1]
		parent := ""
		for _, m := range tick.FindAllStringSubmatch(cell, -1) {
			k := m[1]
			if i := strings.LastIndex(k, "."); i >= 0 {
				parent = k[:i+1]
			} else if parent != "" {
				k = parent + k
			}
			keys[k] = true
		}
	}
	return keys
}

// The hand-written key table of config-file.md and the generated reference
// (configuration.md) list the same keys: a key added to the code, or one
// renamed, cannot leave the hand-written page behind silently.
func TestConfigFilePageListsTheGeneratedKeys(t *testing.T) {
	hand, generated := keysOf(t, "config-file.md"), keysOf(t, "configuration.md")
	if len(generated) < 50 {
		t.Fatalf("configuration.md: %d keys read; the table format changed?", len(generated))
	}
	for k := range hand {
		if !generated[k] {
			t.Errorf("config-file.md lists %s, which configuration.md (generated from the code) does not have", k)
		}
	}
	for k := range generated {
		if !hand[k] {
			t.Errorf("config-file.md does not list %s (configuration.md has it)", k)
		}
	}
}
