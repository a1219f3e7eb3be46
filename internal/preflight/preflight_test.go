package preflight

import (
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/source"
)

func TestOneUsableHostIsEnough(t *testing.T) {
	item := func(target, name string, st Status) Item { return Item{Target: target, Name: name, Status: st} }
	tests := []struct {
		name   string
		items  []Item
		hosts  []hostResult
		ok     bool
		usable Status
		detail string
	}{
		{"one down, one good", []Item{item("kafka", "connect", Pass), item("source a", "connect", Fail), item("source b", "connect", Pass)},
			[]hostResult{{addr: "a", position: -1}, {addr: "b", position: -1}}, true, Pass, "1 of 2 (b)"},
		{"all down", []Item{item("source a", "connect", Fail), item("source b", "connect", Fail)},
			[]hostResult{{addr: "a", position: -1}, {addr: "b", position: -1}}, false, Fail, "none of the 2"},
		{"kafka fails", []Item{item("kafka", "connect", Fail), item("source a", "connect", Pass)},
			[]hostResult{{addr: "a", position: -1}}, false, Pass, "1 of 1"},
		{"only behind", []Item{item("source a", "position", Warn)},
			[]hostResult{{addr: "a", position: 0, relation: source.Behind}}, true, Warn, "all behind"},
	}
	for _, tt := range tests {
		r := Report(tt.items)
		summarize(&r, tt.hosts)
		it, ok := r.Find("usable hosts")
		if !ok || it.Status != tt.usable || !strings.Contains(it.Detail, tt.detail) || r.OK() != tt.ok {
			t.Errorf("%s: OK %v, usable hosts %+v; want OK %v, %s %q", tt.name, r.OK(), it, tt.ok, tt.usable, tt.detail)
		}
		hosts := 0
		for _, it := range r {
			if it.Name == "host" {
				hosts++
			}
		}
		if hosts != len(tt.hosts) {
			t.Errorf("%s: %d host verdicts for %d hosts", tt.name, hosts, len(tt.hosts))
		}
	}
}
