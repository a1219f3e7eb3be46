package binlog

import (
	"encoding/binary"

	"github.com/outbox-relay/outbox-relay/schema"
)

// sql_mode bits that change how a statement's text reads, in MySQL's and
// MariaDB's binlog alike (ANSI and ORACLE are logged expanded: they
// include ANSI_QUOTES).
const (
	modeANSIQuotes         = 1 << 2
	modeNoBackslashEscapes = 1 << 20
)

// statusSQLMode reads a query event's sql_mode from its status variables
// (Q_SQL_MODE_CODE; servers write it second, after Q_FLAGS2_CODE). A
// variable before it that it does not know the length of, or none at all,
// leaves the mode unknown.
func statusSQLMode(vars []byte) schema.SQLMode {
	for i := 0; i < len(vars); {
		code := vars[i]
		i++
		switch code {
		case 0: // Q_FLAGS2_CODE
			i += 4
		case 1: // Q_SQL_MODE_CODE
			if i+8 > len(vars) {
				return schema.SQLMode{Unknown: true}
			}
			m := binary.LittleEndian.Uint64(vars[i:])
			return schema.SQLMode{NoBackslashEscapes: m&modeNoBackslashEscapes != 0, ANSIQuotes: m&modeANSIQuotes != 0}
		default:
			return schema.SQLMode{Unknown: true}
		}
	}
	return schema.SQLMode{Unknown: true}
}
