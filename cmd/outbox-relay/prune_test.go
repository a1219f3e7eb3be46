package main

import (
	"strings"
	"testing"
)

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
