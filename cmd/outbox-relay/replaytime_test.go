package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

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

// --since/--until: RFC 3339 and ages become UTC, local forms the server's
// terms; anything else (a day that does not exist included) is refused, not
// compared by the server as no time at all (an empty selection, silently).
func TestSQLTime(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in       string
		want     string
		absolute bool
	}{
		{"2026-11-30T12:00:00+02:00", "2026-11-30 10:00:00", true},
		{"2026-11-30T10:00:00.25Z", "2026-11-30 10:00:00.25", true},
		{"2026-11-30 10:00:00", "2026-11-30 10:00:00", false},
		{"2026-11-30 10:00:00.120", "2026-11-30 10:00:00.12", false},
		{"2026-11-30T10:00", "2026-11-30 10:00:00", false},
		{"2026-11-30", "2026-11-30 00:00:00", false},
		{"2h", "2026-12-01 10:00:00", true},
		{"1.5d", "2026-11-30 00:00:00", true},
	} {
		got, abs, err := sqlTime("--since", c.in, now)
		if err != nil || got != c.want || abs != c.absolute {
			t.Errorf("sqlTime(%q) = %q, %v, %v; want %q, %v", c.in, got, abs, err, c.want, c.absolute)
		}
	}
	for _, bad := range []string{"2026-11-31", "2026-13-01 00:00:00", "yesterday", "30.11.2026", "", "-2h", "0s"} {
		if _, _, err := sqlTime("--since", bad, now); !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--since") {
			t.Errorf("sqlTime(%q): error %v, want a usage error", bad, err)
		}
	}
}
