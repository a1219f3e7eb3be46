package binlog

import (
	"encoding/binary"
	"testing"

	"github.com/outbox-relay/outbox-relay/schema"
)

func TestStatusSQLMode(t *testing.T) {
	vars := func(mode uint64, tail ...byte) []byte {
		b := []byte{0, 0, 0, 0, 0, 1} // Q_FLAGS2_CODE, 4 bytes; Q_SQL_MODE_CODE
		b = binary.LittleEndian.AppendUint64(b, mode)
		return append(b, tail...)
	}
	for name, c := range map[string]struct {
		vars []byte
		want schema.SQLMode
	}{
		"default":              {vars(0x5000000, 4, 33, 0, 33, 0, 8, 0), schema.SQLMode{}},
		"NO_BACKSLASH_ESCAPES": {vars(1<<20 | 0x1000000), schema.SQLMode{NoBackslashEscapes: true}},
		"ANSI":                 {vars(1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<18), schema.SQLMode{ANSIQuotes: true}},
		"none":                 {nil, schema.SQLMode{Unknown: true}},
		"cut short":            {vars(1 << 20)[:9], schema.SQLMode{Unknown: true}},
		"unknown code first":   {append([]byte{200, 1, 2}, vars(0)...), schema.SQLMode{Unknown: true}},
	} {
		if got := statusSQLMode(c.vars); got != c.want {
			t.Errorf("%s: %+v, want %+v", name, got, c.want)
		}
	}
}

// sqlModeStatusVars is a query event's status variables as MariaDB 10.11 and
// MySQL 8 write them: Q_FLAGS2_CODE (4 bytes), then Q_SQL_MODE_CODE.
func sqlModeStatusVars(mode uint64) []byte {
	b := []byte{0, 0, 0, 0, 0, 1}
	return binary.LittleEndian.AppendUint64(b, mode)
}

// statusSQLMode keeps ANSI_QUOTES for the schema tracker. The failure
// guarded against: sql_mode ANSI_QUOTES (bit 1<<2; part of ANSI and of
// MariaDB's ORACLE, which the binlog logs expanded) changes how a
// statement's text reads as much as NO_BACKSLASH_ESCAPES does: "..." is an
// identifier, in which a backslash is a plain character. statusSQLMode
// drops it: the tracker is told the same for an ANSI_QUOTES statement as
// for a default one, and reads "n\" as an escape (end to end:
// TestDDLUnderSessionSQLModesKeepsSign, 4000000000 published as
// -294967296).
func TestStatusSQLModeKeepsAnsiQuotes(t *testing.T) {
	const defaultMode = 0x5000000 // STRICT_TRANS_TABLES... as the server logs its default
	for name, mode := range map[string]uint64{
		"ANSI_QUOTES": defaultMode | 1<<2,
		"ANSI":        1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<5 | 1<<18,
		"ORACLE":      1<<1 | 1<<2 | 1<<3 | 1<<9 | 1<<13 | 1<<14 | 1<<15 | 1<<33,
	} {
		if got, def := statusSQLMode(sqlModeStatusVars(mode)), statusSQLMode(sqlModeStatusVars(defaultMode)); got == def {
			t.Errorf("%s (%#x): %+v, the same as the default mode's: the tracker cannot tell \"...\" is a name without escapes", name, mode, got)
		}
	}
}
