package schema

import (
	"strings"
)

// NameCase is how a server compares database and table names: its
// lower_case_table_names. Column names always compare without regard to
// letter case.
type NameCase uint8

const (
	// NamesUnknown: the setting is not known. A statement naming a table
	// that differs from a captured one only in letter case is then
	// ambiguous, and the captured table's layout becomes unknown.
	NamesUnknown NameCase = iota
	// NamesExact: lower_case_table_names=0 (Linux's default): names differing
	// in letter case are different tables.
	NamesExact
	// NamesFolded: lower_case_table_names=1 (names stored in lower case) or 2
	// (stored as given): names compare without regard to letter case.
	NamesFolded
)

// ParseNameCase reads a lower_case_table_names value: 0 is NamesExact, 1
// and 2 NamesFolded, anything else (not shown) NamesUnknown.
func ParseNameCase(v string) NameCase {
	switch strings.TrimSpace(v) {
	case "0":
		return NamesExact
	case "1", "2":
		return NamesFolded
	}
	return NamesUnknown
}

func (c NameCase) String() string {
	switch c {
	case NamesExact:
		return "lower_case_table_names=0"
	case NamesFolded:
		return "lower_case_table_names=1"
	}
	return "lower_case_table_names unknown"
}

// Same reports whether the server takes names a and b ("db.table") for
// the same table. Unknown, only equal names are.
func (c NameCase) Same(a, b string) bool {
	if c == NamesFolded {
		return strings.EqualFold(a, b)
	}
	return a == b
}

// SetNameCase says how the server compares table names; call it before
// Apply. The zero value is NamesUnknown.
func (t *Tracker) SetNameCase(c NameCase) {
	t.names = c
	t.capturedDB = map[string]bool{}
	for n := range t.captured {
		db, _, _ := strings.Cut(n, ".")
		t.capturedDB[t.dbKey(db)] = true
	}
}

// dbKey is db as capturedDB holds it: lower case when names fold.
func (t *Tracker) dbKey(db string) string {
	if t.names == NamesFolded {
		return strings.ToLower(db)
	}
	return db
}

// canon is the tracker's key of table n ("db.table") as the server
// compares names: with names that fold, the captured table's configured
// name, or a tracked table's key, that n equals without regard to case,
// else n in lower case; otherwise n itself.
func (t *Tracker) canon(n string, tables Tables) string {
	if t.names != NamesFolded || t.captured[n] {
		return n
	}
	if _, ok := tables[n]; ok {
		return n
	}
	for c := range t.captured {
		if strings.EqualFold(c, n) {
			return c
		}
	}
	for k := range tables {
		if strings.EqualFold(k, n) {
			return k
		}
	}
	return strings.ToLower(n)
}
