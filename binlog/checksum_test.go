package binlog

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
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

// rotation is a Rotate event to file at pos as the raw-mode syncer hands
// it on: sealed as s's binlog seals its events (with a CRC32 when it has
// checksums), decoded by the syncer from its bytes; corrupt changes a byte
// of the name first, as the wire would.
func (s *rawStream) rotation(file string, pos uint64, corrupt bool) *replication.BinlogEvent {
	body := binary.LittleEndian.AppendUint64(nil, pos)
	raw := s.seal(s.e.raw(replication.ROTATE_EVENT, append(body, file...)))
	end := len(raw)
	if s.checksum {
		end -= replication.BinlogChecksumLength
	}
	if corrupt {
		raw[end-1]++ // binlog.000002 becomes binlog.000003
	}
	h := &replication.EventHeader{}
	if err := h.Decode(raw); err != nil {
		s.t.Fatal(err)
	}
	e := &replication.RotateEvent{}
	if err := e.Decode(raw[replication.EventHeaderSize:end]); err != nil {
		s.t.Fatal(err)
	}
	return &replication.BinlogEvent{RawData: raw, Header: h, Event: e}
}

// runTracked parses and converts the stream as Run does, following its
// place in the binlog files; it returns the file the reader is in.
func (s *rawStream) runTracked() (string, error) {
	f := newFixture(s.t, mysql.MySQLFlavor)
	start, _ := ParseSet(mysql.MySQLFlavor, "")
	ep := newEventParser(mysql.MySQLFlavor, start, func() (int64, string) { return 1 << 20, "the test's bound" }, f.r.captured)
	var batch []Event
	for _, ev := range s.evs {
		ev, err := ep.parse(ev)
		if err != nil {
			return f.st.file, err
		}
		track(f.st, ev)
		if batch, err = f.r.convert(f.st, ev, batch); err != nil {
			return f.st.file, err
		}
	}
	return f.st.file, nil
}

// Once the format description says CRC32, MySQL and MariaDB checksum what
// the dump thread makes as well as what it reads: the rotation to the next
// binlog file and the heartbeats. A rotation whose bytes changed stops the
// reader with ErrChecksumMismatch before it moves to the file the changed
// bytes name; a changed heartbeat stops it too. The rotation a dump starts
// with, before any format description, carries no checksum (go-mysql
// declares NONE) and is read as it is.
func TestParserRefusesARotationOrHeartbeatWhoseChecksumDoesNotMatch(t *testing.T) {
	stream := func(corrupt string) *rawStream {
		s := newRawStream(t, true)
		fake := newRawStream(t, false).rotation("binlog.000001", 4, false) // before the format description
		s.evs = append([]*replication.BinlogEvent{fake}, s.evs...)
		s.add(s.e.mysqlGTID(testSID, 1).RawData, s.e.raw(replication.QUERY_EVENT, s.e.query("", "BEGIN")),
			s.e.tableMap(testTable).RawData, s.e.rowsEvent(OpInsert, testTable, 1).RawData, s.e.xidEvent().RawData)
		s.evs = append(s.evs, s.rotation("binlog.000002", 4, corrupt == "rotation"))
		for _, typ := range []replication.EventType{replication.HEARTBEAT_EVENT, replication.HEARTBEAT_LOG_EVENT_V2} {
			body := []byte("binlog.000002")
			if typ == replication.HEARTBEAT_LOG_EVENT_V2 { // MySQL 8.0.26+: the file name and the offset, as fields
				body = append(append([]byte{1, byte(len(body))}, body...), 2, 1, 4, 0)
			}
			s.add(s.e.raw(typ, body))
			if corrupt == typ.String() {
				raw := s.evs[len(s.evs)-1].RawData
				raw[len(raw)-replication.BinlogChecksumLength-1] ^= 0x01
			}
		}
		return s
	}
	if file, err := stream("").runTracked(); err != nil || file != "binlog.000002" {
		t.Fatalf("the stream as the server sent it: in %q, %v; want binlog.000002", file, err)
	}
	for _, corrupt := range []string{"rotation", replication.HEARTBEAT_EVENT.String(), replication.HEARTBEAT_LOG_EVENT_V2.String()} {
		t.Run(corrupt, func(t *testing.T) {
			file, err := stream(corrupt).runTracked()
			if !errors.Is(err, ErrChecksumMismatch) {
				t.Fatalf("a %s with a byte changed: %v; want %v", corrupt, err, ErrChecksumMismatch)
			}
			if file == "binlog.000003" {
				t.Fatalf("a %s with a byte changed moved the reader to %q", corrupt, file)
			}
		})
	}
}

// The error about an event that does not match its checksum shows the
// bytes of its header, and of a query's fixed part, never those of a
// statement or data it carries: a rows query event (MySQL's, MariaDB's
// annotation) holds the statement as typed, a LOAD DATA block the file's
// bytes.
func TestChecksumMismatchErrorShowsNoStatementBytes(t *testing.T) {
	secret := "/*pw-secret-1*/ INSERT INTO outbox VALUES (1)"
	for name, c := range map[string]struct {
		typ  replication.EventType
		body []byte
	}{
		"rows query":       {replication.ROWS_QUERY_EVENT, append([]byte{byte(len(secret))}, secret...)},
		"annotate rows":    {replication.MARIADB_ANNOTATE_ROWS_EVENT, []byte(secret)},
		"begin load query": {replication.BEGIN_LOAD_QUERY_EVENT, append([]byte{1, 0, 0, 0}, secret...)},
		"append block":     {replication.APPEND_BLOCK_EVENT, append([]byte{1, 0, 0, 0}, secret...)},
	} {
		s := newRawStream(t, true)
		s.add(s.e.mysqlGTID(testSID, 1).RawData, s.e.raw(replication.QUERY_EVENT, s.e.query("", "BEGIN")), s.e.raw(c.typ, c.body))
		raw := s.evs[len(s.evs)-1].RawData
		raw[len(raw)-replication.BinlogChecksumLength-1] ^= 0x01
		_, err := s.run(1 << 20)
		if !errors.Is(err, ErrChecksumMismatch) {
			t.Fatalf("%s: %v, want %v", name, err, ErrChecksumMismatch)
		}
		if msg := err.Error(); strings.Contains(msg, hex.EncodeToString([]byte("pw-s"))) || strings.Contains(msg, "pw-s") {
			t.Errorf("%s: %s", name, msg)
		}
	}
}
