package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseWhen: the one reading of a time on the command line, an RFC
// 3339 time or an age before now, for audit, replay and prune alike.
func TestParseWhen(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.FixedZone("x", 3600))
	for _, c := range []struct {
		in  string
		at  time.Time
		age time.Duration
	}{
		{"2026-11-30T10:00:00+02:00", time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), 0},
		{"2026-11-30T10:00:00.25Z", time.Date(2026, 11, 30, 10, 0, 0, 250e6, time.UTC), 0},
		{"90m", now.Add(-90 * time.Minute).UTC(), 90 * time.Minute},
		{"2h", now.Add(-2 * time.Hour).UTC(), 2 * time.Hour},
		{"36h", now.Add(-36 * time.Hour).UTC(), 36 * time.Hour},
		{"7d", now.Add(-7 * 24 * time.Hour).UTC(), 7 * 24 * time.Hour},
		{"1.5d", now.Add(-36 * time.Hour).UTC(), 36 * time.Hour},
		{"30s", now.Add(-30 * time.Second).UTC(), 30 * time.Second},
		{"3650d", now.Add(-3650 * 24 * time.Hour).UTC(), 3650 * 24 * time.Hour},
		{"87600h", now.Add(-87600 * time.Hour).UTC(), 87600 * time.Hour},
	} {
		w, err := parseWhen("--since", c.in, now)
		if err != nil || !w.At.Equal(c.at) || w.At.Location() != time.UTC || w.Age != c.age {
			t.Errorf("parseWhen(%q) = %v %s, %v; want %v %s", c.in, w.At, w.Age, err, c.at, c.age)
		}
	}
	// Each of these once parsed to an age that is not what it says (an
	// overflow to a negative or tiny duration; NaN passing n <= 0), and
	// prune deleted every published row; the others are no time at all.
	for _, in := range []string{"", "0d", "-1d", "7 days", "d", "-5m", "0s",
		"NaNd", "nand", "Infd", "+Infd", "-Infd", "infinityd", "200000d", "1e6d", "1e400d", "0x1p3d", "1_0d", "+7d", " 7d", "7d ",
		"3651d", "87601h", "9999999999h", "2562048h", "106751d", "1.d", ".5d",
		"yesterday", "2026-11-30 10:00:00", "2026-11-30", "2026-11-31T00:00:00Z", "1w"} {
		_, err := parseWhen("--older-than", in, now)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), `--older-than "`+in+`"`) {
			t.Errorf("parseWhen(%q): %v, want a usage error naming --older-than and the value", in, err)
		}
	}
}

// Every command that takes a time reads the same forms: an age is refused
// by none (replay --since 2h was), an RFC 3339 time by none (prune
// --older-than took only ages), and a mistake is a usage error (exit 2)
// before anything is read.
func TestTimeFlagsReadTheSameForms(t *testing.T) {
	cmds := [][]string{
		{"audit", "--since"},
		{"replay", "--since"},
		{"replay", "--event-id", "x", "--until"},
		{"prune", "--older-than"},
	}
	for _, c := range cmds {
		for _, v := range []string{"2h", "7d", "2026-11-30T10:00:00Z"} {
			var o, e bytes.Buffer
			// The file does not exist: a time that is read gets that far (78).
			if code := execute(append(append([]string{}, c...), v, "--config", "/nonexistent/relay.yaml"), &o, &e); code != 78 {
				t.Errorf("%s %s: exit %d, want 78 (the missing file, after the time was read): %s", strings.Join(c, " "), v, code, e.String())
			}
		}
		var o, e bytes.Buffer
		if code := execute(append(append([]string{}, c...), "soon", "--config", "/nonexistent/relay.yaml"), &o, &e); code != 2 {
			t.Errorf("%s soon: exit %d, want 2: %s", strings.Join(c, " "), code, e.String())
		}
	}
	var o, e bytes.Buffer
	if code := execute([]string{"prune", "--older-than", "2099-01-01T00:00:00Z", "--config", "/nonexistent/relay.yaml"}, &o, &e); code != 2 ||
		!strings.Contains(e.String(), "not in the past") {
		t.Errorf("prune --older-than a future time: exit %d, want 2 saying it is not in the past: %s", code, e.String())
	}
}
