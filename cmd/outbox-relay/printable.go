package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// printable returns s, text from a row or a record (an event id, a key, a
// header, an error naming them), safe to print on a terminal: control
// characters (CR, LF, ESC, ...), other non-printable runes and invalid
// UTF-8 are written as Go escapes (\r, \n, \x1b, \u2028), and a backslash
// as \\, so a forged value can neither move the cursor, recolour the
// screen, nor pass for a line of its own. Plain text comes back unchanged.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || r != ' ' && !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ' || unicode.IsPrint(r):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	return b.String()
}

// printableErr is an error whose message may quote row data: printed
// through printable; errors.Is and errors.As see the error.
type printableErr struct{ err error }

func (e printableErr) Error() string { return printable(e.err.Error()) }
func (e printableErr) Unwrap() error { return e.err }
