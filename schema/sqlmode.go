package schema

import tidbmysql "github.com/pingcap/tidb/pkg/parser/mysql"

// SQLMode is what of a statement's sql_mode changes how its text reads.
type SQLMode struct {
	// NoBackslashEscapes: a backslash in a string is itself, not an escape.
	NoBackslashEscapes bool
	// ANSIQuotes: "..." is a name (in which a backslash is itself), not a
	// string (sql_mode ANSI_QUOTES, also in ANSI and ORACLE).
	ANSIQuotes bool
	// Unknown: the binlog event did not give its sql_mode. A table
	// definition change whose text reads differently with and without
	// NO_BACKSLASH_ESCAPES or ANSI_QUOTES is then not followed (ErrUnparsed).
	Unknown bool
}

// escapes says whether a backslash escapes in '...' and in "...".
func (m SQLMode) escapes() (sq, dq bool) {
	return !m.NoBackslashEscapes, !m.NoBackslashEscapes && !m.ANSIQuotes
}

func (m SQLMode) tidb() tidbmysql.SQLMode {
	var out tidbmysql.SQLMode
	if m.NoBackslashEscapes {
		out |= tidbmysql.ModeNoBackslashEscapes
	}
	if m.ANSIQuotes {
		out |= tidbmysql.ModeANSIQuotes
	}
	return out
}
