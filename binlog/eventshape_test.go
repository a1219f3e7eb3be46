package binlog

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/internal/hostiledb"
)

// withOptional appends an optional metadata field to a table map body.
func withOptional(b []byte, typ byte, v []byte) []byte {
	b = append(b, typ)
	b = mysql.AppendLengthEncodedInteger(b, uint64(len(v)))
	return append(b, v...)
}

// enumLists is an ENUM value lists field: lists lists each declaring
// count values, none given.
func enumLists(lists int, count uint64) []byte {
	var v []byte
	for range lists {
		v = mysql.AppendLengthEncodedInteger(v, count)
	}
	return v
}

// Events that make go-mysql's decoders allocate what a count says
// without bytes behind it are refused; the same shapes within what their
// bytes hold pass.
func TestCheckEventRefusesCountsTheBytesCannotHold(t *testing.T) {
	e := newEncoder(t, mysql.MariaDBFlavor)
	for _, v := range []struct {
		name string
		typ  replication.EventType
		body []byte
		bad  bool
	}{
		{"an ENUM list of 2^34 values", replication.TABLE_MAP_EVENT,
			withOptional(wideTableMap(1), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, enumLists(1, 1<<34)), true},
		{"a SET list of 3 values in 2 bytes", replication.TABLE_MAP_EVENT,
			withOptional(wideTableMap(1), replication.TABLE_MAP_OPT_META_SET_STR_VALUE, []byte{3, 1, 'a'}), true},
		{"an ENUM list of 65,535 values, then another", replication.TABLE_MAP_EVENT,
			withOptional(wideTableMap(1), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, enumLists(2, 65535)), true},
		{"ENUM('a','bc') and SET('x')", replication.TABLE_MAP_EVENT,
			withOptional(withOptional(wideTableMap(2), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, []byte{2, 1, 'a', 2, 'b', 'c'}),
				replication.TABLE_MAP_OPT_META_SET_STR_VALUE, []byte{1, 1, 'x'}), false},
		{"a table map with names, then a checksum", replication.TABLE_MAP_EVENT,
			append(wideTableMap(3), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, 2, 200, 0), false},
		{"a GTID list of 2^28-1 GTIDs in 4 bytes", replication.MARIADB_GTID_LIST_EVENT, binary.LittleEndian.AppendUint32(nil, 1<<28-1), true},
		{"a GTID list of 2 GTIDs in 32 bytes", replication.MARIADB_GTID_LIST_EVENT, append(binary.LittleEndian.AppendUint32(nil, 2), make([]byte, 32)...), false},
	} {
		t.Run(v.name, func(t *testing.T) {
			err := checkEvent(e.raw(v.typ, v.body))
			if (err != nil) != v.bad || err != nil && !errors.Is(err, ErrMalformedEvent) {
				t.Fatalf("checkEvent: %v, want refused %v", err, v.bad)
			}
		})
	}
}

// What go-mysql allocates for one of them: an ENUM list declaring 2^20
// values and holding none is 25 MB for a 60-byte event (2^34 values end
// the process: not tried here).
func TestGoMySQLAllocatesForAnEnumListWithoutValues(t *testing.T) {
	e := newEncoder(t, mysql.MySQLFlavor)
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MySQLFlavor)
	if _, err := p.Parse(e.raw(replication.FORMAT_DESCRIPTION_EVENT, e.fde())); err != nil {
		t.Fatal(err)
	}
	raw := e.raw(replication.TABLE_MAP_EVENT, withOptional(wideTableMap(1), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, enumLists(1, 1<<20)))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _ = p.Parse(raw)
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got < 20<<20 {
		t.Fatalf("go-mysql allocated %d bytes for a %d-byte event: the premise of checkEvent no longer holds", got, len(raw))
	}
	if checkEvent(raw) == nil {
		t.Fatal("checkEvent passed it")
	}
}

// The reader refuses such an event by name before go-mysql decodes it: a
// hostile server (or anyone in the middle of a plaintext connection)
// registers the relay as a replica, then streams a format description and
// the event. The process survives to say so.
func TestReaderRefusesEventsSizedToExhaustMemory(t *testing.T) {
	for _, v := range []struct {
		name, flavor string
		typ          replication.EventType
		body         []byte
	}{
		{"table map: an ENUM list of 2^34 values", mysql.MySQLFlavor, replication.TABLE_MAP_EVENT,
			withOptional(wideTableMap(1), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, enumLists(1, 1<<34))},
		{"MariaDB GTID list of 2^28-1 GTIDs", mysql.MariaDBFlavor, replication.MARIADB_GTID_LIST_EVENT, binary.LittleEndian.AppendUint32(nil, 1<<28-1)},
	} {
		t.Run(v.name, func(t *testing.T) {
			e := newEncoder(t, v.flavor)
			event := func(typ replication.EventType, body []byte) []byte { return append([]byte{0}, e.raw(typ, body)...) }
			srv := hostiledb.StartScript(t, hostiledb.Script{Plugin: pluginNative, Steps: []hostiledb.Step{hostiledb.Read, hostiledb.OK},
				Binlog: [][]byte{event(replication.FORMAT_DESCRIPTION_EVENT, e.fde()), event(v.typ, v.body)}})
			cfg := guardConfig(srv.Addr)
			cfg.MaxPacketBytes = 1 << 20
			r := NewReader(cfg, &Server{Addr: srv.Addr, Flavor: v.flavor}, nil, nil)
			err := r.Run(t.Context(), "", make(chan []Event, 1))
			if !errors.Is(err, ErrMalformedEvent) {
				t.Fatalf("run: %v, want %v", err, ErrMalformedEvent)
			}
			t.Log(err)
		})
	}
}

// checkEvent runs on a hostile server's bytes before anything recovers:
// it never panics, and it agrees with go-mysql's reading of the
// length-encoded integers it reads.
func FuzzCheckEvent(f *testing.F) {
	e := newEncoder(f, mysql.MySQLFlavor)
	for _, seed := range [][]byte{
		e.raw(replication.TABLE_MAP_EVENT, withOptional(wideTableMap(2), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, []byte{2, 1, 'a', 1, 'b'})),
		e.raw(replication.TABLE_MAP_EVENT, withOptional(wideTableMap(1), replication.TABLE_MAP_OPT_META_SET_STR_VALUE, enumLists(1, 1<<34))),
		e.raw(replication.MARIADB_GTID_LIST_EVENT, binary.LittleEndian.AppendUint32(nil, 3)),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, ev []byte) {
		if len(ev) < replication.EventHeaderSize {
			return
		}
		_ = checkEvent(ev)
		if len(ev) >= 9 && ev[0] >= 0xfc && ev[0] != 0xff {
			v, _, n := readLenenc(ev)
			w, _, m := mysql.LengthEncodedInt(ev)
			if v != w || n != m {
				t.Fatalf("readLenenc(%x) = %d, %d; go-mysql %d, %d", ev[:9], v, n, w, m)
			}
		}
	})
}

// The same inside a compressed transaction (its events are decoded by the
// reader's parser too), and in a stream with checksums.
func TestParserRefusesATableMapBombAnywhere(t *testing.T) {
	bomb := func(e *encoder) []byte {
		return e.raw(replication.TABLE_MAP_EVENT, withOptional(wideTableMap(1), replication.TABLE_MAP_OPT_META_ENUM_STR_VALUE, enumLists(1, 1<<34)))
	}
	for _, checksum := range []bool{false, true} {
		for _, compressed := range []bool{false, true} {
			s := newRawStream(t, checksum)
			if compressed {
				inner := append(s.e.raw(replication.QUERY_EVENT, s.e.query("", "BEGIN")), bomb(s.e)...)
				s.add(s.e.mysqlGTID(testSID, 1).RawData, s.payload(inner, int64(len(inner)), 0))
			} else {
				s.add(s.e.mysqlGTID(testSID, 1).RawData, s.e.raw(replication.QUERY_EVENT, s.e.query("", "BEGIN")), bomb(s.e))
			}
			if _, err := s.run(1 << 20); !errors.Is(err, ErrMalformedEvent) {
				t.Errorf("checksum %v, compressed %v: %v, want %v", checksum, compressed, err, ErrMalformedEvent)
			}
		}
	}
}
