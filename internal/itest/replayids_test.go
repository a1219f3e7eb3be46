//go:build integration

package itest

import (
	"fmt"
	"strings"
	"testing"
)

// An id named on replay's command line that matches no row is an error,
// and nothing is published: a typo in --event-id or --aggregate-id must not
// exit 0 like a replay that had nothing to do.
func TestReplayExplicitIDThatMatchesNothingFails(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, s, cfg := env.Pipeline(t)
	if err := env.DB.Exec(fmt.Sprintf(`INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('ev-1', 'order', 'o-1', 'X', '{}')`, s.Name)); err != nil {
		t.Fatal(err)
	}
	path := WriteConfig(t, cfg)
	if out, errOut, code := env.CLI(t, "replay", "--config", path, "--event-id", "ev-1", "--dry-run"); code != 0 || !strings.Contains(out, "would publish 1 records") {
		t.Fatalf("replay of an existing id: exit %d: %s%s", code, out, errOut)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--event-id", "nonexistent"}, "event id nonexistent"},
		{[]string{"--event-id", "ev-1,nonexistent"}, "event id nonexistent"},
		{[]string{"--aggregate-type", "order", "--aggregate-id", "nonexistent"}, "aggregate order id nonexistent"},
	} {
		out, errOut, code := env.CLI(t, append([]string{"replay", "--config", path, "--yes"}, tc.args...)...)
		if code != 1 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "nothing was published") || strings.Contains(out, "published") {
			t.Errorf("replay %v: exit %d, want 1 naming %q\nstdout: %s\nstderr: %s", tc.args, code, tc.want, out, errOut)
		}
	}
}
