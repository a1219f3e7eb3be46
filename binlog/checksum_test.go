package binlog

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

// checksummedTx is a stream with binlog_checksum=CRC32 holding one
// transaction inserting into a.outbox: format description, GTID, BEGIN,
// table map, rows, XID (indexes 0 to 5 of its events).
func checksummedTx(t *testing.T) *rawStream {
	s := newRawStream(t, true)
	return s.add(s.e.mysqlGTID(testSID, 1).RawData, s.e.raw(replication.QUERY_EVENT, s.e.query("", "BEGIN")),
		s.e.tableMap(testTable).RawData, s.e.rowsEvent(OpInsert, testTable, 1).RawData, s.e.xidEvent().RawData)
}

// With binlog_checksum=CRC32 every event the server sends from its binlog
// ends with the CRC32 of its bytes, and a replica refuses one that does not
// match (MySQL's ER_NETWORK_READ_EVENT_CHECKSUM_FAILURE): the reader too,
// whichever event it is (the format description's own checksum, the hot
// path's GTID, BEGIN, table map, rows and XID), before anything of its
// transaction is committed. A changed byte in a row's value must never be
// published as the row.
func TestParserRefusesAnEventWhoseChecksumDoesNotMatch(t *testing.T) {
	got, err := checksummedTx(t).run(1 << 20)
	if err != nil || len(got) != 2 || !strings.HasPrefix(got[1], "commit") {
		t.Fatalf("the stream as the server wrote it: %q, %v", got, err)
	}
	for i, name := range []string{"format description", "gtid", "begin", "table map", "rows", "xid"} {
		t.Run(name, func(t *testing.T) {
			s := checksummedTx(t)
			raw := s.evs[i].RawData
			// A byte of the body before the checksum: for the rows event,
			// the last byte of the row's value; the format description's
			// creation time (its last bytes say the checksum's algorithm).
			at := len(raw) - replication.BinlogChecksumLength - 1
			if i == 0 {
				at = replication.EventHeaderSize + 2 + 50
			}
			raw[at] ^= 0x01
			got, err := s.run(1 << 20)
			if !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("%s with a byte changed: %q, %v; want %v", name, got, err, ErrChecksumMismatch)
			}
			for _, e := range got {
				if strings.HasPrefix(e, "commit") {
					t.Fatalf("%s with a byte changed: the transaction was committed: %q", name, got)
				}
			}
		})
	}
	// Without checksums nothing is verified (there is nothing to verify).
	s := newRawStream(t, false)
	s.add(s.e.mysqlGTID(testSID, 1).RawData, s.e.raw(replication.QUERY_EVENT, s.e.query("", "BEGIN")),
		s.e.tableMap(testTable).RawData, s.e.rowsEvent(OpInsert, testTable, 1).RawData, s.e.xidEvent().RawData)
	if got, err := s.run(1 << 20); err != nil || len(got) != 2 {
		t.Fatalf("a stream without checksums: %q, %v", got, err)
	}
}
