package main

import (
	"strings"
	"testing"
)

func TestParseAge(t *testing.T) {
	for in, want := range map[string]string{"7d": "168h0m0s", "1.5d": "36h0m0s", "90m": "1h30m0s", "30s": "30s",
		"3650d": "87600h0m0s", "87600h": "87600h0m0s"} {
		d, err := parseAge(in)
		if err != nil || d.String() != want {
			t.Errorf("parseAge(%q) = %v, %v; want %s", in, d, err, want)
		}
	}
	// Each of these once parsed to an age that is not what it says (an
	// overflow to a negative or tiny duration; NaN passing n <= 0), and
	// prune deleted every published row.
	for _, in := range []string{"", "0d", "-1d", "7 days", "d", "-5m", "0s",
		"NaNd", "nand", "Infd", "+Infd", "-Infd", "infinityd", "200000d", "1e6d", "1e400d", "0x1p3d", "1_0d", "+7d", " 7d", "7d ",
		"3651d", "87601h", "9999999999h", "2562048h", "106751d", "1.d", ".5d"} {
		if _, err := parseAge(in); err == nil {
			t.Errorf("parseAge(%q) accepted", in)
		}
	}
}

func TestWithoutOwnDelete(t *testing.T) {
	for _, c := range []struct{ head, own, want string }{
		{"0-1-23", "", "0-1-23"},
		{"0-1-23", "0-1-23", "0-1-22"},
		{"0-1-24", "0-1-23", "0-1-24"}, // another transaction came after prune's DELETE
		{"0-1-9,1-1-5", "1-1-5", "0-1-9,1-1-4"},
		{"0-1-1", "0-1-1", ""},
		{"0-1-12", "0-1-11,0-1-12,0-1-9", "0-1-10"}, // two DELETEs in a row; 10 was another transaction
		{"0-1-12", "0-1-10,0-1-11,0-1-12", "0-1-9"},
	} {
		own := map[string]bool{}
		for _, g := range strings.Split(c.own, ",") {
			if g != "" {
				own[g] = true
			}
		}
		if got := withoutOwnDelete(c.head, own); got != c.want {
			t.Errorf("withoutOwnDelete(%q, %q) = %q, want %q", c.head, c.own, got, c.want)
		}
	}
}
