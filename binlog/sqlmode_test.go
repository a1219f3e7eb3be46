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
