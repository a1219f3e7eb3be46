package mysqlsource

import "encoding/binary"

// taggedGTIDBody encodes a GTID_TAGGED_LOG_EVENT (MySQL 8.3+) in MySQL's
// serialization format (libs/mysql/serialization): serialization version,
// message size, last non-ignorable field id, then each field as its id and
// value, all integers variable-length (the count of trailing one bits of
// the first byte is the count of extra bytes; signed values carry the sign
// in the lowest bit), fixed-size integers byte by byte, strings as a
// length and the bytes. Fields: 0 gtid_flags, 1 uuid, 2 gno, 3 tag,
// 4 last_committed, 5 sequence_number, 6 immediate_commit_timestamp,
// (7 original_commit_timestamp, omitted: equal), 8 transaction_length,
// 9 immediate_server_version, (10 original_server_version, omitted).
func taggedGTIDBody(g GTID, seq int64, commitMicros, txLen uint64, serverVersion uint32) []byte {
	var fields []byte
	field := func(id uint64, v []byte) {
		fields = appendVarUint(fields, id)
		fields = append(fields, v...)
	}
	var fixed []byte
	for _, b := range g.SID {
		fixed = appendVarUint(fixed, uint64(b))
	}
	field(0, appendVarUint(nil, 1))
	field(1, fixed)
	field(2, appendVarInt(nil, g.GNO))
	field(3, append(appendVarUint(nil, uint64(len(g.Tag))), g.Tag...))
	field(4, appendVarInt(nil, seq-1))
	field(5, appendVarInt(nil, seq))
	field(6, appendVarUint(nil, commitMicros))
	field(8, appendVarUint(nil, txLen))
	field(9, appendVarUint(nil, uint64(serverVersion)))
	head := appendVarUint(nil, 0) // serialization format version
	last := appendVarUint(nil, 9)
	// The size covers the whole message; it has one byte for sizes below 128.
	size := uint64(len(head) + 1 + len(last) + len(fields))
	if size >= 128 {
		size++
	}
	out := append(head, appendVarUint(nil, size)...)
	out = append(out, last...)
	return append(out, fields...)
}

// appendVarUint appends v in MySQL's variable-length unsigned format.
func appendVarUint(b []byte, v uint64) []byte {
	n := 1
	for n < 9 && v >= 1<<(7*n) {
		n++
	}
	if n == 9 {
		return binary.LittleEndian.AppendUint64(append(b, 0xff), v)
	}
	x := v<<n | (1<<(n-1) - 1)
	for i := 0; i < n; i++ {
		b = append(b, byte(x>>(8*i)))
	}
	return b
}

// appendVarInt appends v in MySQL's variable-length signed format: the
// sign in the lowest bit of the unsigned value.
func appendVarInt(b []byte, v int64) []byte {
	if v >= 0 {
		return appendVarUint(b, uint64(v)<<1)
	}
	return appendVarUint(b, uint64(-(v+1))<<1|1)
}
