package main

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// explicitIDsMatched fails, before anything is published, when an id named
// on the command line (--event-id, --aggregate-id) matches no row: a typo
// must not look like a replay that had nothing to do.
func explicitIDsMatched(o replayOpts, recs []*kgo.Record, tables []string) error {
	found := map[string]bool{}
	for _, r := range recs {
		found[headerValue(r, "id")] = true
	}
	var missing []string
	for _, id := range o.eventIDs {
		if !found[id] && !containsString(missing, id) {
			missing = append(missing, printable(id))
		}
	}
	window := replayWindow(o)
	if len(missing) > 0 {
		return fmt.Errorf("replay: no row of %s%s has event id %s; nothing was published (check the ids%s, or leave out the ones that are gone)",
			strings.Join(tables, ", "), window, strings.Join(missing, ", "), map[bool]string{true: " and the window", false: ""}[window != ""])
	}
	if o.aggregID != "" && len(recs) == 0 {
		return fmt.Errorf("replay: no row of %s%s matches aggregate %s id %s; nothing was published", strings.Join(tables, ", "), window, printable(o.aggregateType), printable(o.aggregID))
	}
	return nil
}

// replayWindow names the --since/--until window of a replay, "" without one.
func replayWindow(o replayOpts) string {
	switch {
	case o.since != "" && o.until != "":
		return " created between " + printable(o.since) + " and " + printable(o.until)
	case o.since != "":
		return " created since " + printable(o.since)
	case o.until != "":
		return " created before " + printable(o.until)
	}
	return ""
}
