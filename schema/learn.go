package schema

import (
	"maps"
	"slices"
)

// Learn records cols, the binlog's own column names, as a captured table's
// layout (they are the truth when present). It reports whether the layout
// changed.
func (t *Tracker) Learn(db, table string, cols []string) bool {
	n := db + "." + table
	if !t.captured[n] {
		return false
	}
	if cur, ok := t.tables[n]; ok && slices.Equal(cur, cols) {
		return false
	}
	next := maps.Clone(t.tables)
	next[n] = slices.Clone(cols)
	t.tables = next
	return true
}
