//go:build failpoint

package relay

import "testing"

func TestParseFailpoint(t *testing.T) {
	for _, tc := range []struct {
		in    string
		name  string
		count int64
		term  bool
	}{
		{"after-commit", "after-commit", 1, false},
		{"after-commit:3", "after-commit", 3, false},
		{"after-commit:3:term", "after-commit", 3, true},
		{"any-commit:1:term", "any-commit", 1, true},
		{"after-flush:x:kill", "after-flush", 1, false},
	} {
		f := parseFailpoint(tc.in)
		if f.name != tc.name || f.left.Load() != tc.count || f.term != tc.term {
			t.Errorf("%q: got %s/%d/%v, want %s/%d/%v", tc.in, f.name, f.left.Load(), f.term, tc.name, tc.count, tc.term)
		}
	}
	if parseFailpoint("") != nil {
		t.Error("an unset failpoint is not nil")
	}
	any := parseFailpoint("any-commit")
	if !any.matches("after-commit") || !any.matches("after-partial") || any.matches("after-flush") {
		t.Error("any-commit matches the wrong points")
	}
	if parseFailpoint("after-commit").matches("after-partial") {
		t.Error("after-commit matches after-partial")
	}
}
