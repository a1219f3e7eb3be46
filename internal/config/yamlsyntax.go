package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// parseYAML parses the one YAML document of a configuration file. A
// syntax error says where and how to fix it; a second document (after a
// "---" line) is refused, since only the first one would be read.
func parseYAML(raw []byte) (yaml.Node, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return doc, fmt.Errorf("%w: %s", ErrInvalid, syntaxProblem(raw, err))
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return doc, fmt.Errorf("%w: %s", ErrInvalid, syntaxProblem(raw, err))
	default:
		return doc, fmt.Errorf("%w: line %d: a second YAML document (after \"---\"): only one is read: merge its keys into the first one and remove the \"---\"", ErrInvalid, next.Line)
	}
	return doc, nil
}

var yamlErrLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the yaml.v3 parser's (not scanner's) messages: it
// reports them with the 0-based line of where the construct started.
var parserProblems = []string{
	"did not find expected <document start>",
	"did not find expected node content",
	"did not find expected key",
	"did not find expected '-' indicator",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
}

// unquotedVarInFlow matches ${VAR} written unquoted inside [ ] or { }:
// there "{" starts a mapping.
var unquotedVarInFlow = regexp.MustCompile(`[\[{,]\s*\$\{`)

// syntaxProblem turns a yaml.v3 syntax error into "line N: what: how".
func syntaxProblem(raw []byte, err error) string {
	msg := err.Error()
	m := yamlErrLine.FindStringSubmatch(msg)
	if m == nil {
		return strings.TrimPrefix(msg, "yaml: ") + ": fix the YAML syntax (quote a value that contains \": \" or \" #\")"
	}
	line, _ := strconv.Atoi(m[1])
	problem := m[2]
	for _, p := range parserProblems {
		if strings.HasPrefix(problem, p) {
			line++ // yaml.v3 reports these 0-based
			break
		}
	}
	if strings.HasPrefix(problem, "did not find expected ',' or") {
		// the flow collection starts at line and may span lines: look
		// there for an unquoted ${
		lines := strings.Split(string(raw), "\n")
		var b strings.Builder
		for i := line - 1; i >= 0 && i < len(lines) && i < line+20; i++ {
			text, _, _ := strings.Cut(lines[i], " #")
			b.WriteString(text + "\n")
		}
		if loc := unquotedVarInFlow.FindStringIndex(b.String()); loc != nil {
			at := line + strings.Count(b.String()[:loc[1]], "\n")
			return fmt.Sprintf("line %d: %s: quote ${VAR} inside [ ] and { }, such as [\"${KAFKA_BROKERS}\"] (unquoted, \"{\" starts a mapping there)", at, problem)
		}
	}
	return fmt.Sprintf("line %d: %s: fix the YAML syntax (quote a value that contains \": \" or \" #\")", line, problem)
}

// withLines adds the line of each problem's key path, found in root; a key
// the file does not set gets the line of the mapping it belongs in (the
// top level's first line for a top-level key) and "not set".
func withLines(err error, root *yaml.Node) error {
	ve, ok := errors.AsType[*ValidationError](err)
	if !ok {
		return err
	}
	out := make([]string, len(ve.Problems))
	for i, p := range ve.Problems {
		key := problemKey(p)
		n, exact := findKey(root, key)
		switch {
		case exact:
			p = fmt.Sprintf("%s (line %d)%s", key, n.Line, p[len(key):])
		case n != nil:
			p = fmt.Sprintf("%s (line %d, not set)%s", key, n.Line, p[len(key):])
		case root != nil && root.Kind == yaml.MappingNode:
			p = fmt.Sprintf("%s (line %d, not set)%s", key, root.Line, p[len(key):])
		}
		out[i] = p
	}
	return &ValidationError{Problems: out}
}

// problemKey is the key path a problem starts with.
func problemKey(p string) string { return p[:strings.IndexAny(p+" ", " :")] }

// findKey finds the key node of a dotted key path such as source.user (the
// element for source.hosts[1]; exact), or the nearest enclosing key present
// (not exact; nil when none is). A key may itself hold dots
// (router.tables.db.table): the longest run of parts that names a key wins.
func findKey(n *yaml.Node, path string) (*yaml.Node, bool) {
	var found *yaml.Node
	parts := strings.Split(path, ".")
	for len(parts) > 0 {
		if n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		if n == nil || n.Kind != yaml.MappingNode {
			return found, false
		}
		var next, key *yaml.Node
		used := 0
		for l := len(parts); l > 0 && next == nil; l-- {
			part := strings.Join(parts[:l], ".")
			name, idx := part, -1
			if i := strings.IndexByte(part, '['); i > 0 && strings.HasSuffix(part, "]") {
				name = part[:i]
				fmt.Sscanf(part[i:], "[%d]", &idx)
			}
			for j := 0; j+1 < len(n.Content); j += 2 {
				if n.Content[j].Value == name {
					key, next = n.Content[j], n.Content[j+1]
				}
			}
			if next != nil {
				used = l
				found = key
				if idx >= 0 && next.Kind == yaml.SequenceNode && idx < len(next.Content) {
					next = next.Content[idx]
					found = next
				}
			}
		}
		if next == nil {
			return found, false
		}
		parts = parts[used:]
		n = next
	}
	return found, found != nil
}
