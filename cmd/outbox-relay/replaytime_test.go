package main

import "testing"

// A prepared statement's DATETIME/TIMESTAMP comes back as the binlog (and
// so the relay) renders the column: with its fsp digits.
func TestWithFraction(t *testing.T) {
	for _, c := range []struct {
		in   string
		fsp  int
		want string
	}{
		{"2026-11-30 10:00:00", 3, "2026-11-30 10:00:00.000"},
		{"2026-11-30 10:00:00.120000", 3, "2026-11-30 10:00:00.120"},
		{"2026-11-30 10:00:00.123456", 6, "2026-11-30 10:00:00.123456"},
		{"2026-11-30 10:00:00", 0, "2026-11-30 10:00:00"},
		{"2026-11-30 10:00:00.5", 1, "2026-11-30 10:00:00.5"},
		{"0000-00-00 00:00:00", 2, "0000-00-00 00:00:00.00"},
		{"2026-11-30 10:00:00", 39, "2026-11-30 10:00:00"}, // an expression: no fsp
		{"2026-11-30", 3, "2026-11-30"},
		{"not a time at all!!", 3, "not a time at all!!"},
	} {
		if got := withFraction(c.in, c.fsp); got != c.want {
			t.Errorf("withFraction(%q, %d) = %q, want %q", c.in, c.fsp, got, c.want)
		}
	}
}
