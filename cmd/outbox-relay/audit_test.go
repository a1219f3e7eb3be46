package main

import (
	"bytes"
	"strings"
	"testing"
)

// audit's command-line mistakes exit 2 before anything is read: a window
// without a start, a time that is neither RFC 3339 nor an age, an end not
// after the start.
func TestAuditRefusesABadWindow(t *testing.T) {
	for _, args := range [][]string{
		{"audit", "--config", "x.yaml"},
		{"audit", "--config", "x.yaml", "--since", "yesterday"},
		{"audit", "--config", "x.yaml", "--since", "2026-11-30 10:00:00"},
		{"audit", "--config", "x.yaml", "--since", "2h", "--until", "3h"},
		{"audit", "--config", "x.yaml", "--since", "2h", "--max-ids", "0"},
	} {
		var o, e bytes.Buffer
		if code := execute(args, &o, &e); code != 2 {
			t.Errorf("%s: exit %d, want 2 (%s)", strings.Join(args, " "), code, e.String())
		}
	}
}
