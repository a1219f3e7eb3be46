package mysqlsource

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/google/uuid"
	"github.com/klauspost/compress/zstd"
	vtmysql "vitess.io/vitess/go/mysql"
)

// Binlog event type codes (MySQL's Log_event_type) the double writes
// itself; the others come from Vitess's builders.
const (
	evGTID               = 33 // GTID_LOG_EVENT
	evPreviousGTIDs      = 35 // PREVIOUS_GTIDS_LOG_EVENT
	evXAPrepare          = 38 // XA_PREPARE_LOG_EVENT
	evTransactionPayload = 40 // TRANSACTION_PAYLOAD_EVENT
	evGTIDTagged         = 42 // GTID_TAGGED_LOG_EVENT (8.3+)
	evTableMap           = 19
	evFormatDescription  = 15
	evHeartbeat          = 27
)

// binlogFormat is the format description MySQL 8.0 (41 event types) or
// 8.4 (42: GTID_TAGGED_LOG_EVENT) writes at the start of every binlog:
// post-header lengths as in MySQL's Format_description_event constructor.
func binlogFormat(version string, checksum bool) vtmysql.BinlogFormat {
	sizes := []byte{
		56, 13, 0, 8, 0, 18, 0, 4, 4, 4, // START_V3 .. EXEC_LOAD
		4, 18, 0, 0, 98, 0, 4, 26, 8, 0, // DELETE_FILE .. PRE_GA_WRITE_ROWS
		0, 0, 8, 8, 8, 2, 0, 0, 0, 10, // PRE_GA_UPDATE .. WRITE_ROWS_V2
		10, 10, 42, 42, 0, 18, 52, 0, 10, 40, // UPDATE_ROWS_V2 .. TRANSACTION_PAYLOAD
		0, // HEARTBEAT_LOG_EVENT_V2
	}
	if tagged(version) {
		sizes[14] = 99
		sizes = append(sizes, 42) // GTID_TAGGED_LOG_EVENT
	}
	f := vtmysql.BinlogFormat{FormatVersion: 4, ServerVersion: version, HeaderLength: 19,
		ChecksumAlgorithm: vtmysql.BinlogChecksumAlgOff, HeaderSizes: sizes}
	if checksum {
		f.ChecksumAlgorithm = vtmysql.BinlogChecksumAlgCRC32
	}
	return f
}

// tagged reports whether version writes tagged GTIDs (MySQL 8.3 and later).
func tagged(version string) bool { return !strings.HasPrefix(version, "8.0.") }

// event is one encoded binlog event: header, body and (outside a
// Transaction_payload, with binlog_checksum CRC32) a CRC32 checksum.
type event []byte

// writer encodes events for one stream position: it sets each header's
// timestamp, server id and end position and recomputes the checksum.
type writer struct {
	f        vtmysql.BinlogFormat
	s        *vtmysql.FakeBinlogStream
	checksum bool
}

func newWriter(version string, serverID uint32, checksum bool) *writer {
	return &writer{f: binlogFormat(version, checksum), s: &vtmysql.FakeBinlogStream{ServerID: serverID, LogPosition: 4},
		checksum: checksum}
}

// raw packs body as an event of type typ (for the events Vitess has no
// builder for).
func (w *writer) raw(typ byte, flags uint16, body []byte) event {
	return event(w.s.Packetize(w.f, typ, flags, body))
}

// stamp sets ev's timestamp and end position (0 inside a payload) and
// fixes its checksum. A format description always has one: MySQL writes
// its CRC32 whatever binlog_checksum says (the algorithm byte before it
// says whether the file's other events have one).
func (w *writer) stamp(ev event, ts uint32, endPos uint32) event {
	ev = bytes.Clone(ev)
	binary.LittleEndian.PutUint32(ev[0:4], ts)
	binary.LittleEndian.PutUint32(ev[13:17], endPos)
	if w.checksum || ev[4] == evFormatDescription {
		n := len(ev)
		binary.LittleEndian.PutUint32(ev[n-4:], crc32.ChecksumIEEE(ev[:n-4]))
	}
	return ev
}

// body is ev without its header and checksum.
func (w *writer) body(ev []byte) []byte {
	end := len(ev)
	if w.checksum {
		end -= 4
	}
	return ev[19:end]
}

// gtidEvent encodes a GTID_LOG_EVENT as MySQL 8.0 writes it (sid, gno,
// logical clock, commit timestamps in microseconds, transaction length,
// server version), or for a tag on 8.4 a GTID_TAGGED_LOG_EVENT (see
// taggedGTIDEvent).
func (w *writer) gtidEvent(g GTID, seq int64, commitMicros uint64, txLen uint64, serverVersion uint32) event {
	if g.Tag != "" {
		return w.raw(evGTIDTagged, 0, taggedGTIDBody(g, seq, commitMicros, txLen, serverVersion))
	}
	b := make([]byte, 0, 64)
	b = append(b, 1) // flags: may_have_sbr false, commit flag
	b = append(b, g.SID[:]...)
	b = binary.LittleEndian.AppendUint64(b, uint64(g.GNO))
	b = append(b, 2) // LOGICAL_TIMESTAMP_TYPECODE
	b = binary.LittleEndian.AppendUint64(b, uint64(seq-1))
	b = binary.LittleEndian.AppendUint64(b, uint64(seq))
	// immediate_commit_timestamp, 7 bytes; the top bit clear: the
	// original commit timestamp is the same and not written.
	var ts [8]byte
	binary.LittleEndian.PutUint64(ts[:], commitMicros&(1<<55-1))
	b = append(b, ts[:7]...)
	b = appendPacked(b, txLen)
	b = binary.LittleEndian.AppendUint32(b, serverVersion) // immediate = original
	return w.raw(evGTID, 0, b)
}

// previousGTIDsEvent encodes the set of GTIDs in the binlogs before a
// file: number of sids (8 bytes), then per sid the uuid, the number of
// intervals (8 bytes) and each interval [start, end) as two 8-byte
// integers. Tagged GTIDs change the format: see encodeSet.
func (w *writer) previousGTIDsEvent(set *Set) event {
	return w.raw(evPreviousGTIDs, 0, set.encode())
}

// xaPrepareEvent encodes XA_PREPARE_LOG_EVENT: one_phase (1 byte),
// formatID (4), gtrid length (4), bqual length (4), gtrid+bqual.
func (w *writer) xaPrepareEvent(x XID, onePhase bool) event {
	b := make([]byte, 0, 13+len(x.GTRID)+len(x.BQual))
	if onePhase {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(x.FormatID))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.GTRID)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(x.BQual)))
	b = append(b, x.GTRID...)
	b = append(b, x.BQual...)
	return w.raw(evXAPrepare, 0, b)
}

// heartbeat is a HEARTBEAT_LOG_EVENT naming the current file; MySQL sends
// it with timestamp 0 and the position reached.
func (w *writer) heartbeat(file string, pos uint32) event {
	ev := event(vtmysql.NewHeartbeatEventWithLogFile(w.f, w.s, file).Bytes())
	return w.stamp(ev, 0, pos)
}

// payloadEvent wraps events (encoded without checksums, end positions 0)
// in a TRANSACTION_PAYLOAD_EVENT compressed with zstd: fields as
// type/length/value triples, each a packed integer (net_store_length),
// PAYLOAD_SIZE (1), COMPRESSION_TYPE (2, zstd = 0), UNCOMPRESSED_SIZE (3),
// then HEADER_END_MARK (0) and the compressed bytes.
// pad zero bytes follow the events (zeroFrames); declared, when not 0, is
// the uncompressed size the header gives.
func (w *writer) payloadEvent(inner []event, pad int64, declared uint64) (event, error) {
	var plain []byte
	for _, e := range inner {
		plain = append(plain, e...)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		return nil, fmt.Errorf("start zstd: %w", err)
	}
	compressed := enc.EncodeAll(plain, nil)
	_ = enc.Close()
	size := uint64(len(plain)) + uint64(pad)
	if pad > 0 {
		compressed = zeroFrame(compressed, pad)
	}
	if declared != 0 {
		size = declared
	}
	field := func(b []byte, typ, v uint64) []byte {
		b = appendPacked(b, typ)
		b = appendPacked(b, uint64(len(appendPacked(nil, v))))
		return appendPacked(b, v)
	}
	var b []byte
	b = field(b, 1, uint64(len(compressed)))
	b = field(b, 2, 0)
	b = field(b, 3, size)
	b = appendPacked(b, 0)
	b = append(b, compressed...)
	return w.raw(evTransactionPayload, 0, b), nil
}

// zeroFrame appends to b a zstd frame of n zero bytes (n > 0) made of RLE
// blocks of 128 KiB (RFC 8878: magic number, a frame header with a 2 MiB
// window and no content size, as MySQL's streaming compressor writes it,
// then blocks of a 3-byte header and the byte to repeat).
func zeroFrame(b []byte, n int64) []byte {
	const block = 128 << 10
	b = binary.LittleEndian.AppendUint32(b, 0xFD2FB528)
	b = append(b, 0x00, (21-10)<<3) // descriptor: no content size, no checksum; window 2^21
	for n > 0 {
		size := min(n, block)
		n -= size
		h := uint32(1<<1) | uint32(size)<<3 // RLE
		if n == 0 {
			h |= 1 // last block
		}
		b = append(b, byte(h), byte(h>>8), byte(h>>16), 0)
	}
	return b
}

// appendPacked appends v as MySQL's packed (length-encoded) integer.
func appendPacked(b []byte, v uint64) []byte {
	switch {
	case v < 251:
		return append(b, byte(v))
	case v < 1<<16:
		return append(b, 0xfc, byte(v), byte(v>>8))
	case v < 1<<24:
		return append(b, 0xfd, byte(v), byte(v>>8), byte(v>>16))
	}
	return binary.LittleEndian.AppendUint64(append(b, 0xfe), v)
}

// serverVersionNumber is MySQL's immediate_server_version: 80040 for 8.0.40.
func serverVersionNumber(version string) uint32 {
	var a, b, c uint32
	fmt.Sscanf(version, "%d.%d.%d", &a, &b, &c)
	return a*10000 + b*100 + c
}

// mustUUID parses a server_uuid.
func mustUUID(s string) uuid.UUID {
	u, err := uuid.Parse(s)
	if err != nil {
		panic(fmt.Sprintf("mysqlsource: bad uuid %q: %v", s, err))
	}
	return u
}

// newFDE is the format description event of w's format.
func newFDE(w *writer) []byte {
	return vtmysql.NewFormatDescriptionEvent(w.f, w.s).Bytes()
}
