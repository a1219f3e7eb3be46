package binlog

import (
	"encoding/binary"
	"testing"
)

// attack25Vars is a query event's status variables as MariaDB 10.11 and
// MySQL 8 write them: Q_FLAGS2_CODE (4 bytes), then Q_SQL_MODE_CODE.
func attack25Vars(mode uint64) []byte {
	b := []byte{0, 0, 0, 0, 0, 1}
	return binary.LittleEndian.AppendUint64(b, mode)
}

// sql_mode ANSI_QUOTES (bit 1<<2; part of ANSI and of MariaDB's ORACLE,
// which the binlog logs expanded) changes how a statement's text reads as
// much as NO_BACKSLASH_ESCAPES does: "..." is an identifier, in which a
// backslash is a plain character. statusSQLMode drops it: the tracker is
// told the same for an ANSI_QUOTES statement as for a default one, and
// reads "n\" as an escape (end to end: TestAttack25AnsiQuotesBackslash-
// Identifier, 4000000000 published as -294967296).
func TestAttack25StatusSQLModeDropsAnsiQuotes(t *testing.T) {
	const defaultMode = 0x5000000 // STRICT_TRANS_TABLES... as the server logs its default
	for name, mode := range map[string]uint64{
		"ANSI_QUOTES": defaultMode | 1<<2,
		"ANSI":        1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<18,
		"ORACLE":      1<<1 | 1<<2 | 1<<3 | 1<<9 | 1<<13 | 1<<14 | 1<<15 | 1<<33,
	} {
		if got, def := statusSQLMode(attack25Vars(mode)), statusSQLMode(attack25Vars(defaultMode)); got == def {
			t.Errorf("%s (%#x): %+v, the same as the default mode's: the tracker cannot tell \"...\" is a name without escapes", name, mode, got)
		}
	}
}
