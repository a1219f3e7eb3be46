package router

import (
	"errors"
	"fmt"
	"strings"
)

// Trace context (router.tracing_column): the column holds the W3C trace
// context of the transaction that wrote the row, in one of two forms:
//
//   - W3C: the traceparent value itself ("00-<trace id>-<parent id>-<flags>"),
//     optionally followed by a line with the tracestate value;
//   - Debezium's serialized span context: java.util.Properties text with
//     "traceparent=..." and optional "tracestate=..." lines (what an
//     application writes for Debezium's tracing.span.context.field).
//
// A valid context becomes the record's traceparent (and tracestate)
// headers. A value that is not a valid context never stops the relay: the
// record goes out without the headers and Record.TraceInvalid says why.

// traceHeaders parses a tracing column value. It returns the traceparent
// and tracestate header values ("" for none), and a non-nil error when the
// value is not a valid context (then traceparent is "", and tracestate is
// dropped too). An invalid tracestate beside a valid traceparent keeps the
// traceparent: the W3C spec discards only the state.
func traceHeaders(v string) (parent, state string, err error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", "", nil
	}
	var rawParent, rawState string
	var hasState bool
	if looksLikeTraceparent(v) {
		rawParent, rawState, hasState = strings.Cut(v, "\n")
		rawParent = strings.TrimSpace(rawParent)
		rawState = strings.TrimSpace(rawState)
	} else {
		props := parseProperties(v)
		var ok bool
		if rawParent, ok = props["traceparent"]; !ok {
			return "", "", errors.New("no traceparent: the value is neither a W3C traceparent nor Properties text with a traceparent line")
		}
		rawState, hasState = props["tracestate"]
	}
	parent, err = validTraceparent(rawParent)
	if err != nil {
		return "", "", err
	}
	if hasState && rawState != "" {
		if err := validTracestate(rawState); err != nil {
			return parent, "", err
		}
		state = rawState
	}
	return parent, state, nil
}

// looksLikeTraceparent: two hex digits and a dash open a bare traceparent;
// Properties text opens with a key ("traceparent=", a comment, ...).
func looksLikeTraceparent(v string) bool {
	return len(v) >= 3 && isHex(v[0]) && isHex(v[1]) && v[2] == '-'
}

// validTraceparent checks a W3C traceparent (Trace Context Level 1, 3.2)
// and returns the header value to send: the value itself for version 00,
// the version 00 form of its first four fields for a later version.
func validTraceparent(v string) (string, error) {
	if len(v) < 55 {
		return "", fmt.Errorf("traceparent %q: %d characters, want 55 (00-<32 hex>-<16 hex>-<2 hex>)", clip(v), len(v))
	}
	version := v[:2]
	if !lowerHex(version) || version == "ff" {
		return "", fmt.Errorf("traceparent %q: version %q is not a valid version", clip(v), version)
	}
	if version == "00" && len(v) != 55 {
		return "", fmt.Errorf("traceparent %q: %d characters, version 00 has 55", clip(v), len(v))
	}
	if version != "00" && len(v) > 55 && v[55] != '-' {
		return "", fmt.Errorf("traceparent %q: a later version's fields must be followed by '-'", clip(v))
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return "", fmt.Errorf("traceparent %q: fields not separated by '-' at 2, 35 and 52", clip(v))
	}
	traceID, parentID, flags := v[3:35], v[36:52], v[53:55]
	for _, f := range [][2]string{{"trace id", traceID}, {"parent id", parentID}, {"flags", flags}} {
		if !lowerHex(f[1]) {
			return "", fmt.Errorf("traceparent %q: %s %q is not lower-case hex", clip(v), f[0], f[1])
		}
	}
	if strings.Trim(traceID, "0") == "" {
		return "", fmt.Errorf("traceparent %q: trace id is all zeros", clip(v))
	}
	if strings.Trim(parentID, "0") == "" {
		return "", fmt.Errorf("traceparent %q: parent id is all zeros", clip(v))
	}
	if version != "00" {
		return "00" + v[2:55], nil
	}
	return v, nil
}

// validTracestate checks a W3C tracestate (Trace Context Level 1, 3.3):
// at most 32 comma-separated key=value members of printable ASCII.
func validTracestate(v string) error {
	members := 0
	for m := range strings.SplitSeq(v, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue // empty members are allowed
		}
		members++
		key, value, ok := strings.Cut(m, "=")
		if !ok || !validStateKey(key) || !validStateValue(value) {
			return fmt.Errorf("tracestate %q: member %q is not key=value as W3C Trace Context allows", clip(v), clip(m))
		}
	}
	if members > 32 {
		return fmt.Errorf("tracestate %q: %d members, at most 32", clip(v), members)
	}
	return nil
}

func validStateKey(k string) bool {
	if k == "" || len(k) > 256 {
		return false
	}
	tenant, system, multi := strings.Cut(k, "@")
	if multi && (tenant == "" || system == "" || len(tenant) > 241 || len(system) > 14 || strings.Contains(system, "@") || !(system[0] >= 'a' && system[0] <= 'z')) {
		return false
	}
	if !multi && !(k[0] >= 'a' && k[0] <= 'z') {
		return false // a simple key starts with a lower-case letter
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '_' || c == '-' || c == '*' || c == '/' || c == '@':
		default:
			return false
		}
	}
	return true
}

func validStateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

// parseProperties reads java.util.Properties text (Properties.load): one
// key and value a logical line, separated by the first unescaped '=', ':'
// or white space; '#' and '!' open comment lines; a line ending in an odd
// number of backslashes continues on the next; backslash escapes (\t, \n,
// \r, \f, \uXXXX, \<char>) are resolved. The first occurrence of a key
// wins.
func parseProperties(s string) map[string]string {
	out := map[string]string{}
	lines := strings.FieldsFunc(strings.ReplaceAll(s, "\r\n", "\n"), func(r rune) bool { return r == '\n' || r == '\r' })
	for i := 0; i < len(lines); i++ {
		line := strings.TrimLeft(lines[i], " \t\f")
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		for trailingBackslashes(line)%2 == 1 && i+1 < len(lines) {
			i++
			line = line[:len(line)-1] + strings.TrimLeft(lines[i], " \t\f")
		}
		key, value := splitProperty(line)
		key, value = unescapeProperty(key), unescapeProperty(value)
		if _, seen := out[key]; !seen {
			out[key] = value
		}
	}
	return out
}

func trailingBackslashes(s string) int {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n
}

// splitProperty splits a logical line at its key's end.
func splitProperty(line string) (key, value string) {
	end := len(line)
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '=' || c == ':' || c == ' ' || c == '\t' || c == '\f' {
			end = i
			break
		}
	}
	key = line[:end]
	rest := strings.TrimLeft(line[end:], " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	return key, rest
}

func unescapeProperty(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			if c != '\\' {
				b.WriteByte(c)
			}
			continue
		}
		i++
		switch s[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			var r rune
			j := i + 1
			for ; j < len(s) && j < i+5 && isHex(s[j]); j++ {
				r = r<<4 | rune(hexVal(s[j]))
			}
			b.WriteRune(r)
			i = j - 1
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func hexVal(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// clip shortens a value quoted in a warning.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
