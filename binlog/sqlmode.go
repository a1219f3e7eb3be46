package binlog

import (
	"encoding/binary"

	"github.com/outbox-relay/outbox-relay/schema"
)

// modeNoBackslashEscapes is sql_mode NO_BACKSLASH_ESCAPES's bit, in MySQL's
// and MariaDB's binlog alike.
const modeNoBackslashEscapes = 1 << 20

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
			return schema.SQLMode{NoBackslashEscapes: binary.LittleEndian.Uint64(vars[i:])&modeNoBackslashEscapes != 0}
		default:
			return schema.SQLMode{Unknown: true}
		}
	}
	return schema.SQLMode{Unknown: true}
}
