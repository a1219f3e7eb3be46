package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/replication"
)

// Binlog events that size go-mysql's allocations from a count of their
// own.
//
// The reader's event parser (parse.go) decodes every event of the stream
// with go-mysql's decoders, whatever the table, and a few of them allocate
// what a count in the event says before reading anything it counts:
//
//   - a table map's ENUM and SET value lists (optional metadata): a list
//     of N values is a slice of capacity N, and a value of none is read
//     from no bytes: a 40-byte table map declaring 2^34 values ended the
//     process with a fatal "out of memory" (no recover catches it), 2^20
//     values held 25 MB;
//   - MariaDB's GTID list: up to 2^28 GTIDs of 16 bytes, 4 GiB.
//
// No server writes such an event: each value of a list takes at least a
// byte, each GTID 16. So the parser checks these events (checkEvent)
// before go-mysql decodes them, in the stream and inside a compressed
// transaction, and refuses one whose counts its bytes cannot hold
// (ErrMalformedEvent). (A MariaDB compressed event's declared size is
// checked against the packet bound the same way: checkCompressed.)
//
// checkEvent works on the event as the server sent it. With binlog
// checksums on, its last 4 bytes are a CRC that go-mysql cuts off before
// decoding; the lists are checked as far as they start before those 4
// bytes (a list starting within them holds at most 250 values, whichever
// they are), so that a checksum is never read as a list.

// ErrMalformedEvent: the source sent a binlog event whose counts would
// make the MySQL client library allocate without bound; the reader stops
// before it decodes it. Fatal: the same event comes back.
var ErrMalformedEvent = errors.New("malformed binlog event refused")

// checkEvent checks the event raw (its common header and body, as sent)
// against what its bytes can hold: table maps and MariaDB GTID lists.
func checkEvent(raw []byte) error {
	if len(raw) < replication.EventHeaderSize {
		return nil // go-mysql refuses it: no allocation
	}
	body := raw[replication.EventHeaderSize:]
	var err error
	switch replication.EventType(raw[4]) {
	case replication.TABLE_MAP_EVENT:
		err = checkTableMap(body)
	case replication.MARIADB_GTID_LIST_EVENT:
		if len(body) < 4 {
			return nil // go-mysql reads past it and fails: no allocation
		}
		if count := binary.LittleEndian.Uint32(body) & (1<<28 - 1); int64(count)*16 > int64(len(body)-4) {
			err = fmt.Errorf("a GTID list event of %d bytes declares %d GTIDs (16 bytes each)", len(raw), count)
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %v; no MySQL or MariaDB server writes it", ErrMalformedEvent, err)
	}
	return nil
}

// checkTableMap checks a table map's ENUM and SET value lists.
func checkTableMap(b []byte) error {
	pos := 6 + 2  // table id, flags
	for range 2 { // schema, table: a length, the name, a NUL
		if pos >= len(b) {
			return nil
		}
		pos += 1 + int(b[pos]) + 1
	}
	cols, _, n := readLenenc(b[min(pos, len(b)):])
	if n == 0 || uint64(len(b)-pos-n) < cols {
		return nil // go-mysql fails reading it: no allocation
	}
	pos += n + int(cols) // column types
	metaLen, _, n := readLenenc(b[pos:])
	if n == 0 || uint64(len(b)-pos-n) < metaLen {
		return nil
	}
	pos += n + int(metaLen)
	pos += int((cols + 7) / 8) // NULL bitmap
	// Optional metadata: type, length, value; those starting within the
	// last 4 bytes (maybe a checksum) go unread.
	for pos < len(b)-4 {
		t := b[pos]
		l, _, n := readLenenc(b[pos+1:])
		if n == 0 || uint64(len(b)-pos-1-n) < l {
			return nil
		}
		v := b[pos+1+n : pos+1+n+int(l)]
		pos += 1 + n + int(l)
		if t != replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE && t != replication.TABLE_MAP_OPT_META_SET_STR_VALUE {
			continue
		}
		for p := 0; p < len(v); {
			count, _, n := readLenenc(v[p:])
			if n == 0 {
				break
			}
			p += n
			if count > uint64(len(v)-p) {
				return fmt.Errorf("a table map declares an ENUM or SET column of %d values in %d bytes", count, len(v)-p)
			}
			for range count { // each value: a length and its bytes
				l, _, n := readLenenc(v[p:])
				if n == 0 || uint64(len(v)-p-n) < l {
					return nil // go-mysql fails reading it, having allocated what the bytes hold
				}
				p += n + int(l)
			}
		}
	}
	return nil
}

// readLenenc reads a length-encoded integer at the start of b; n is 0 when b
// does not hold one whole (go-mysql's reader indexes past b's end).
func readLenenc(b []byte) (v uint64, isNull bool, n int) {
	if len(b) == 0 {
		return 0, false, 0
	}
	size := 1
	switch b[0] {
	case 0xfb:
		return 0, true, 1
	case 0xfc:
		size = 3
	case 0xfd:
		size = 4
	case 0xfe:
		size = 9
	default:
		return uint64(b[0]), false, 1
	}
	if len(b) < size {
		return 0, false, 0
	}
	for i := size - 1; i >= 1; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, false, size
}
