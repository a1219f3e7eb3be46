package main

import (
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// checkpoint set keeps a layout's mark of "taken from CREATE TABLE IF NOT
// EXISTS, not checked yet" only where it keeps that layout: a layout from the
// server's definitions is certain.
func TestCheckpointSetKeepsProvisionalMarkOfKeptLayouts(t *testing.T) {
	cur := &checkpoint.Checkpoint{
		Schema:      map[string][]string{"app.outbox": {"id", "payload"}, "app.other": {"a"}},
		Provisional: map[string][]string{"app.outbox": {"integer", "text"}, "app.other": {"integer"}},
	}
	cases := []struct {
		name   string
		cur    *checkpoint.Checkpoint
		layout map[string][]string
		want   string
	}{
		{"no previous checkpoint", nil, map[string][]string{"app.outbox": {"id", "payload"}}, "map[]"},
		{"kept", cur, cur.Schema, "map[app.other:[integer] app.outbox:[integer text]]"},
		{"from the server", cur, map[string][]string{"app.outbox": {"id", "body"}, "app.other": {"a"}}, "map[app.other:[integer]]"},
		{"not stored", cur, nil, "map[]"},
	}
	for _, c := range cases {
		if got := fmt.Sprint(keptProvisional(c.cur, c.layout)); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}
