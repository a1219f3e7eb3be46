package binlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// rawStream is a server's stream as the raw-mode syncer hands it on: each
// event's bytes with its header, undecoded but for the format description
// and rotations.
type rawStream struct {
	t        *testing.T
	e        *encoder
	checksum bool
	evs      []*replication.BinlogEvent
}

func newRawStream(t *testing.T, checksum bool) *rawStream {
	s := &rawStream{t: t, e: newEncoder(t, mysql.MySQLFlavor), checksum: checksum}
	fde := s.e.fde() // ends with the checksum algorithm and room for the checksum
	raw := s.e.raw(replication.FORMAT_DESCRIPTION_EVENT, fde)
	if checksum {
		raw[len(raw)-5] = byte(replication.BINLOG_CHECKSUM_ALG_CRC32)
		binary.LittleEndian.PutUint32(raw[len(raw)-4:], crc32.ChecksumIEEE(raw[:len(raw)-4]))
	}
	ev, err := replication.NewBinlogParser().Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	s.evs = append(s.evs, ev)
	return s
}

// seal appends a CRC32 to raw when the stream has checksums, and sets its
// size and end position.
func (s *rawStream) seal(raw []byte) []byte {
	raw = slices.Clone(raw)
	if s.checksum {
		raw = binary.LittleEndian.AppendUint32(raw, 0)
	}
	binary.LittleEndian.PutUint32(raw[9:], uint32(len(raw)))
	binary.LittleEndian.PutUint32(raw[13:], uint32(1000+len(raw)))
	if s.checksum {
		binary.LittleEndian.PutUint32(raw[len(raw)-4:], crc32.ChecksumIEEE(raw[:len(raw)-4]))
	}
	return raw
}

// add appends events (raw, without checksums) as the syncer gives them.
func (s *rawStream) add(raws ...[]byte) *rawStream {
	for _, raw := range raws {
		raw = s.seal(raw)
		h := &replication.EventHeader{}
		if err := h.Decode(raw); err != nil {
			s.t.Fatal(err)
		}
		s.evs = append(s.evs, &replication.BinlogEvent{RawData: raw, Header: h,
			Event: &replication.GenericEvent{Data: raw[replication.EventHeaderSize:]}})
	}
	return s
}

// payload is a Transaction_payload event holding events (without
// checksums): see payloadBodyOf.
func (s *rawStream) payload(events []byte, declared int64, pad int64) []byte {
	return s.e.raw(replication.TRANSACTION_PAYLOAD_EVENT, payloadBodyOf(s.t, events, declared, pad))
}

// run parses the stream with a reader of a.outbox's parser (bound: limit)
// and converts it, as Run does; it stops at the first error.
func (s *rawStream) run(limit int64) ([]string, error) {
	f := newFixture(s.t, mysql.MySQLFlavor)
	start, _ := ParseSet(mysql.MySQLFlavor, "")
	bound := func() (int64, string) { return limit, "the test's bound" }
	ep := newEventParser(mysql.MySQLFlavor, start, bound, f.r.captured)
	var batch []Event
	var err error
	for _, ev := range s.evs {
		if ev, err = ep.parse(ev); err != nil {
			break
		}
		if batch, err = f.r.convert(f.st, ev, batch); err != nil {
			break
		}
	}
	return renderAll(batch), err
}

// innerEvents are a transaction's events inside its payload: BEGIN, two
// outbox rows, a business row, an outbox delete, XID.
func innerEvents(e *encoder) []byte {
	var raw []byte
	for _, b := range [][]byte{e.raw(replication.QUERY_EVENT, e.query("", "BEGIN")), e.tableMap(testTable).RawData,
		e.rowsEvent(OpInsert, testTable, 2).RawData, e.tableMap("a.business").RawData, e.rowsEvent(OpInsert, "a.business", 1).RawData,
		e.tableMap(testTable).RawData, e.rowsEvent(OpDelete, testTable, 1).RawData, e.xidEvent().RawData} {
		raw = append(raw, b...)
	}
	return raw
}

// The reader decodes a compressed transaction itself, as go-mysql would
// have, GTID set included (it no longer comes from the syncer), with and
// without checksums.
func TestParserDecodesACompressedTransaction(t *testing.T) {
	plain := &script{encoder: newEncoder(t, mysql.MySQLFlavor)}
	plain.begin(1).insert(testTable, 2).insert("a.business", 1).rows(OpDelete, testTable, 1).xid()
	want, err := newFixture(t, mysql.MySQLFlavor).run(plain.evs)
	if err != nil {
		t.Fatal(err)
	}
	for _, checksum := range []bool{false, true} {
		s := newRawStream(t, checksum)
		inner := innerEvents(s.e)
		s.add(s.e.mysqlGTID(testSID, 1).RawData, s.payload(inner, int64(len(inner)), 0))
		got, err := s.run(1 << 20)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("checksum %v: got %q, %v\nwant %q", checksum, got, err, want)
		}
	}
}

// allocated is what f allocated on the heap, in bytes.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A compressed transaction that inflates past the bound, by its own word
// or by the bytes it produces, is refused with a named error, having
// allocated next to nothing: not the GiB it inflates to.
func TestPayloadBombIsRefusedWithinTheBound(t *testing.T) {
	const gib = 1 << 30
	for name, tt := range map[string]struct {
		declared, pad int64
		want          error
		says          string
	}{
		"declares a GiB":             {gib + 1024, gib, ErrPayloadBound, "declares 1073742848 bytes uncompressed, over the bound of 4194304 (the test's bound)"},
		"declares its events only":   {-2, gib, ErrPayloadCorrupt, "inflates past the"},
		"declares no size":           {-1, gib, ErrPayloadBound, "inflates past the bound of 4194304 bytes"},
		"declares more than it has":  {-3, 0, ErrPayloadCorrupt, "not the"},
		"declares a size it matches": {-2, 1 << 20, nil, ""},
	} {
		t.Run(name, func(t *testing.T) {
			s := newRawStream(t, true)
			inner := innerEvents(s.e)
			declared := tt.declared
			switch declared {
			case -2:
				declared = int64(len(inner))
				if tt.want == nil {
					declared += tt.pad
				}
			case -3:
				declared = int64(len(inner)) + 10
			}
			s.add(s.e.mysqlGTID(testSID, 1).RawData, s.payload(inner, declared, tt.pad))
			var err error
			n := allocated(func() { _, err = s.run(4 << 20) })
			if tt.want == nil {
				// the events, then zeros: an event of length 0
				if !errors.Is(err, ErrPayloadCorrupt) || !strings.Contains(err.Error(), "runs past") {
					t.Fatalf("%v, want the zeros after the events refused as events", err)
				}
				return
			}
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("%v, want %v saying %q", err, tt.want, tt.says)
			}
			if !strings.Contains(err.Error(), "decode binlog event TransactionPayloadEvent") || len(err.Error()) > 1000 {
				t.Errorf("error names no event, or is long: %s", err)
			}
			if n > 24<<20 {
				t.Errorf("allocated %d MB refusing it", n>>20)
			}
		})
	}
}

// go-mysql's errors quote the whole event (its row decoder adds every row
// decoded and the table map): the reader's quote 32 bytes.
func TestEventErrorsQuoteOnlyAShortPrefix(t *testing.T) {
	s := newRawStream(t, false)
	tm := s.e.tableMap(testTable).RawData
	// 20,000 rows of row data, then a row cut inside its INT: go-mysql's
	// decoder panics, and its message quotes the event and every row
	// decoded.
	body := binary.LittleEndian.AppendUint64(nil, s.e.tables[testTable])[:6]
	body = binary.LittleEndian.AppendUint16(body, replication.RowsEventStmtEndFlag)
	body = binary.LittleEndian.AppendUint16(body, 2)
	body = append(body, 2, 0b11)
	for i := range 20000 {
		body = append(body, 0)
		body = binary.LittleEndian.AppendUint32(body, uint32(i))
		body = append(body, 64)
		body = append(body, strings.Repeat("secret-row-data ", 4)...)
	}
	body = append(body, 0, 1, 0)
	rows := s.e.raw(replication.WRITE_ROWS_EVENTv2, body)
	s.add(s.e.mysqlGTID(testSID, 1).RawData, s.e.raw(replication.QUERY_EVENT, s.e.query("", "BEGIN")), tm, rows)
	_, err := s.run(1 << 30)
	if err == nil {
		t.Fatal("a malformed rows event decoded")
	}
	if len(err.Error()) > 1000 || strings.Count(err.Error(), "secret-row-data") > 1 {
		t.Fatalf("error of %d bytes quotes the row data: %.300s", len(err.Error()), err)
	}
	if !strings.Contains(err.Error(), "decode binlog event WriteRowsEventV2") {
		t.Fatalf("error does not name the event: %s", err)
	}
}

// A MariaDB compressed rows or query event that declares more than the
// bound is refused before go-mysql allocates what it declares.
func TestMariaDBCompressedEventsOverTheBoundAreRefused(t *testing.T) {
	bound := func() (int64, string) { return 1 << 20, "test" }
	if err := checkCompressed([]byte{0x84, 0x40, 0, 0, 0}, bound); !errors.Is(err, ErrPayloadBound) { // 4 size bytes: 1 GiB
		t.Fatalf("%v, want ErrPayloadBound", err)
	}
	if err := checkCompressed([]byte{0x81, 0x10}, bound); err != nil {
		t.Fatal(err)
	}
	e := newEncoder(t, mysql.MariaDBFlavor)
	ep := newEventParser(mysql.MariaDBFlavor, nil, bound, nil)
	fde := e.raw(replication.FORMAT_DESCRIPTION_EVENT, e.fde())
	if _, err := ep.parse(e.decode(fde)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		size []byte
		want error
	}{{[]byte{0x84, 0x40, 0, 0, 0}, ErrPayloadBound}, {[]byte{0x87, 1, 2, 3, 4, 5, 6, 7}, ErrPayloadCorrupt}} {
		raw := e.raw(replication.MARIADB_QUERY_COMPRESSED_EVENT, append(e.query("app", ""), append(tt.size, 0x78, 0x9c)...))
		h := &replication.EventHeader{}
		if err := h.Decode(raw); err != nil {
			t.Fatal(err)
		}
		_, err := ep.parse(&replication.BinlogEvent{RawData: raw, Header: h, Event: &replication.GenericEvent{Data: raw[replication.EventHeaderSize:]}})
		if !errors.Is(err, tt.want) {
			t.Errorf("size %x: %v, want %v", tt.size, err, tt.want)
		}
	}
}

// A zstd frame whose window is over the bound is refused before its window
// is allocated, by name.
func TestPayloadWindowOverTheBoundIsRefused(t *testing.T) {
	s := newRawStream(t, false)
	inner := innerEvents(s.e)
	body := payloadBodyOf(t, inner, -1, 128<<10)
	i := bytes.LastIndex(body, []byte{0x28, 0xb5, 0x2f, 0xfd})
	body[i+5] = (27 - 10) << 3 // the pad frame's window: 128 MiB
	s.add(s.e.mysqlGTID(testSID, 1).RawData, s.e.raw(replication.TRANSACTION_PAYLOAD_EVENT, body))
	var err error
	n := allocated(func() { _, err = s.run(4 << 20) })
	if !errors.Is(err, ErrPayloadBound) || !strings.Contains(err.Error(), "zstd window is larger than 4194304 bytes") {
		t.Fatalf("%v, want ErrPayloadBound naming the window", err)
	}
	if n > 24<<20 {
		t.Errorf("allocated %d MB refusing it", n>>20)
	}
}

// The syncer's own errors about the events it decodes (format descriptions,
// rotations) and its panics are clipped too, their sentinels kept.
func TestSyncerErrorsAreClipped(t *testing.T) {
	big := bytes.Repeat([]byte("secret-row-data "), 1<<16)
	ee := &replication.EventError{Header: &replication.EventHeader{EventType: replication.FORMAT_DESCRIPTION_EVENT}, Err: "bad", Data: big}
	panicked := fmt.Errorf("panic x\nstack: %s: %w", big, ErrPacketBound)
	for _, err := range []error{ee, fmt.Errorf("parse: %w", ee), panicked} {
		if got := syncerError(err); len(got.Error()) > 1100 {
			t.Errorf("%d bytes: %.200s", len(got.Error()), got)
		}
	}
	if !errors.Is(syncerError(panicked), ErrPacketBound) {
		t.Error("the sentinel is lost")
	}
}
