package schema

import (
	"maps"
	"slices"
)

// Learn records cols, the binlog's own column names, as a captured table's
// layout (they are the truth when present), with its unsigned columns when
// signs says the binlog gave its signedness too. It reports whether the
// column names changed.
func (t *Tracker) Learn(db, table string, cols, unsigned []string, signs bool) bool {
	n := db + "." + table
	if !t.captured[n] {
		return false
	}
	if _, ok := t.provisional[n]; ok { // the binlog's names are the truth
		next := maps.Clone(t.provisional)
		delete(next, n)
		t.provisional = next
	}
	if u, had := t.unsigned[n]; had != signs || signs && !slices.Equal(u, unsigned) {
		next := maps.Clone(t.unsigned)
		if signs {
			next[n] = slices.Clone(unsigned)
		} else {
			delete(next, n)
		}
		t.unsigned = next
	}
	if cur, ok := t.tables[n]; ok && slices.Equal(cur, cols) {
		return false
	}
	next := maps.Clone(t.tables)
	next[n] = slices.Clone(cols)
	t.tables = next
	return true
}
