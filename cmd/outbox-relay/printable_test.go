package main

import "testing"

func TestPrintableEscapesControlCharacters(t *testing.T) {
	for in, want := range map[string]string{
		"evt-1":                    "evt-1",
		"ünïcode ok 事件":            "ünïcode ok 事件",
		"a\r\nb":                   `a\r\nb`,
		"\x1b[2K\rpending  forged": `\x1b[2K\rpending  forged`,
		"tab\there":                `tab\there`,
		"nul\x00del\x7f":           `nul\x00del\x7f`,
		"bad\xffutf8":              `bad\xffutf8`,
		"line\u2028sep\u202eRTL":   `line\u2028sep\u202eRTL`,
		`back\slash`:               `back\\slash`,
		"c1\u009bcsi":              `c1\u009bcsi`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %q, want %q", in, got, want)
		}
	}
}
