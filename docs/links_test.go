// Package docs holds the project's documentation; its tests check that the
// README and the pages here point at what exists.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// pages returns README.md and docs/*.md, by their path from the repository
// root.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	out := []string{filepath.Join("..", "README.md")}
	for _, f := range files {
		out = append(out, f)
	}
	return out
}

var (
	fence      = regexp.MustCompile("(?ms)^ *```.*?^ *```")
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	inlineLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading    = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
)

// prose returns the markdown text without code blocks, indented code and
// code spans, where a "](" is not a link.
func prose(raw string) string {
	s := fence.ReplaceAllString(raw, "")
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "    ") && !strings.HasPrefix(strings.TrimSpace(line), "-") {
			continue
		}
		b.WriteString(codeSpan.ReplaceAllString(line, "") + "\n")
	}
	return b.String()
}

// anchors returns the ids GitHub gives the headings of a markdown file:
// lower case, punctuation dropped, spaces as '-', a repeated id with -1, -2.
func anchors(raw string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(raw, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			seen[id]++
			id += "-" + string(rune('0'+n))
		} else {
			seen[id] = 1
		}
		ids[id] = true
	}
	return ids
}

// TestMarkdownLinksResolve: every relative link of README.md and docs/*.md
// names a file or directory that exists, and a link with an anchor into a
// markdown file names one of its headings.
func TestMarkdownLinksResolve(t *testing.T) {
	n := 0
	for _, page := range pages(t) {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range inlineLink.FindAllStringSubmatch(prose(string(raw)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			path, anchor, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: %s does not exist", page, target, file)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			body, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("%s: link %q: %v", page, target, err)
				continue
			}
			if !anchors(string(body))[anchor] {
				t.Errorf("%s: link %q: %s has no heading with the id %q", page, target, file, anchor)
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d relative links found: the link pattern no longer matches", n)
	}
}

// TestReadmeCitationsNameItsSections: code comments, messages and docs cite
// a section of the README by the word README and its heading in double
// quotes; each names a heading the README has (a section that moved to
// docs/ is cited by its page instead).
func TestReadmeCitationsNameItsSections(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var headings []string
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(string(raw), ""), -1) {
		headings = append(headings, m[1])
	}
	cite := regexp.MustCompile(`README,?\s+\\?"([^"\\]+)\\?"`)
	n := 0
	err = filepath.WalkDir("..", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "dist" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".service", ".sh":
		default:
			return nil
		}
		if filepath.Base(path) == "CHANGELOG.md" { // history: cites the README of its time
			return nil
		}
		body, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range cite.FindAllStringSubmatch(string(body), -1) {
			n++
			ok := false
			for _, h := range headings {
				ok = ok || strings.HasPrefix(h, m[1])
			}
			if !ok {
				t.Errorf("%s: cites README %q, which has no such section (headings: %q)", path, m[1], headings)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no README citation found: the pattern no longer matches")
	}
}

// TestCIRunsTheReadmeTestCommands: .ci/run calls every command the README
// gives for testing (the block after <!-- readme-ci-commands -->), so what
// the README promises is what CI runs.
func TestCIRunsTheReadmeTestCommands(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- readme-ci-commands[^>]*-->\\n```[a-z]*\\n(.*?)```").FindSubmatch(raw)
	if m == nil {
		t.Fatal("README.md has no code block after <!-- readme-ci-commands -->")
	}
	ci, err := os.ReadFile(filepath.Join("..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(ci), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	cmds := 0
	for _, c := range strings.Split(strings.TrimSpace(string(m[1])), "\n") {
		cmds++
		if !lines[strings.TrimSpace(c)] {
			t.Errorf(".ci/run does not run the README's %q", c)
		}
	}
	if cmds < 3 {
		t.Fatalf("the README's CI block has %d commands, want make test, make test-kafka and the demo", cmds)
	}
}
