package schema

import (
	"maps"
	"slices"
)

// Signs maps "db.table" to its columns declared UNSIGNED (or ZEROFILL), in
// table order; a table absent from it has signedness unknown (learned from
// the binlog's column names, or from a checkpoint written before
// signedness was tracked).
type Signs map[string][]string

// Unsigned is the signedness of the tables in Tables whose signedness is
// known; do not modify it.
func (t *Tracker) Unsigned() Signs { return t.unsigned }

// UnsignedColumns returns table's columns declared UNSIGNED, if known.
func (t *Tracker) UnsignedColumns(db, table string) ([]string, bool) {
	u, ok := t.unsigned[db+"."+table]
	return u, ok
}

func (e *edit) writeSigns() Signs {
	if !e.signsCopied {
		e.signs, e.signsCopied = maps.Clone(e.t.unsigned), true
	}
	return e.signs
}

// setSigns records n's unsigned columns (known) or that they are unknown.
func (e *edit) setSigns(n string, unsigned []string, known bool) {
	old, had := e.signs[n]
	switch {
	case known && (!had || !slices.Equal(old, unsigned)):
		e.writeSigns()[n] = slices.Clip(slices.Clone(unsigned))
	case !known && had:
		delete(e.writeSigns(), n)
	}
}
