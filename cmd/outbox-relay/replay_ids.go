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
	if len(missing) > 0 {
		return fmt.Errorf("replay: no row of %s has event id %s; nothing was published (check the ids, or leave out the ones that are gone)", strings.Join(tables, ", "), strings.Join(missing, ", "))
	}
	if o.aggregID != "" && len(recs) == 0 {
		return fmt.Errorf("replay: no row of %s matches aggregate %s id %s; nothing was published", strings.Join(tables, ", "), printable(o.aggregateType), printable(o.aggregID))
	}
	return nil
}
