package binlog

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/schema"
)

// hotStream is the stream's parser of the captured tables (a MariaDB
// stream whose format description is synthFDE's, parsed) and a func that
// parses one event's bytes as the syncer hands them on, failing the test
// on an error.
func hotStream(t *testing.T, captured func(db, table []byte) bool) (*eventParser, func([]byte) *replication.BinlogEvent) {
	ep := newEventParser(mysql.MariaDBFlavor, nil, bound64M, captured)
	syncer := newRawSyncer(mysql.MariaDBFlavor)
	parse := func(raw []byte) *replication.BinlogEvent {
		t.Helper()
		ev, err := ep.parse(syncer.event(t, raw))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	parse(synthFDE(t))
	return ep, parse
}

// A server gives a table a new table id each time it opens it anew (its
// table definition cache full, FLUSH TABLES, DDL): a stream that runs for
// months meets table ids without end, each a table map the hot path has not
// seen, decoded by go-mysql's parser, its rows by the hot path. What the
// stream's parser holds of them stays bounded, go-mysql's parser's own table
// maps included (it forgets them only at the end of a statement it decodes
// itself, which the hot path no longer gives it), for captured tables and
// others.
func TestHotPathHoldsABoundedNumberOfTableMaps(t *testing.T) {
	for name, captured := range map[string]func(db, table []byte) bool{
		"captured": outboxOnly, "not captured": func(_, _ []byte) bool { return false },
	} {
		t.Run(name, func(t *testing.T) {
			ep, parse := hotStream(t, captured)
			cols := []synthCol{{mysql.MYSQL_TYPE_LONG, nil}}
			tm, rows := synthTableMap(cols, nil), synthRows(false, 1, []byte{0, 7, 0, 0, 0})
			for id := uint64(1); id <= 3*maxMappedTables; id++ {
				copy(tm, binary.LittleEndian.AppendUint64(nil, id)[:6])
				copy(rows, tm[:6])
				parse(synthEvent(replication.TABLE_MAP_EVENT, tm))
				parse(synthEvent(replication.WRITE_ROWS_EVENTv1, rows))
			}
			if n := len(ep.maps.known); n > maxMappedTables {
				t.Errorf("the hot path holds %d table maps, over %d", n, maxMappedTables)
			}
			// go-mysql's BinlogParser.tables (unexported: its length read by
			// reflection).
			if n := reflect.ValueOf(ep.p).Elem().FieldByName("tables").Len(); n > maxMappedTables {
				t.Errorf("go-mysql's parser holds %d table maps after %d table ids, over %d", n, 3*maxMappedTables, maxMappedTables)
			}
		})
	}
}

// The reader's Tables by table id (streamState.tableCache) stay bounded
// the same way, for a captured table that gets a new table id again and
// again.
func TestReaderHoldsABoundedNumberOfTables(t *testing.T) {
	tables := []string{"app.outbox"}
	r := NewReader(Config{Tables: tables}, &Server{Flavor: mysql.MariaDBFlavor, ColumnNames: true}, schema.New(tables, nil, nil), nil)
	st := &streamState{tableCache: map[uint64]*cachedTable{}, frame: r.newFramer()}
	for id := uint64(1); id <= 3*maxMappedTables; id++ {
		tm := tableMap()
		tm.TableID = id
		c, _, err := r.tableOf(st, tm, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.table.Columns; len(got) != 3 || got[1] != "event_id" {
			t.Fatalf("table id %d: columns %v", id, got)
		}
	}
	if n := len(st.tableCache); n > maxMappedTables {
		t.Errorf("the reader holds %d tables after %d table ids, over %d", n, 3*maxMappedTables, maxMappedTables)
	}
}

// Table ids are 6 bytes (a server that has opened tables 2^32 times gives
// ids above 2^32): ids that differ only above their low 32 bits are other
// tables, through the hot path as through go-mysql's parser.
func TestHotPathTellsTableIDsApartAbove32Bits(t *testing.T) {
	cols := []synthCol{{mysql.MYSQL_TYPE_LONG, nil}}
	tableMap := func(id uint64, table string) []byte {
		tm := synthTableMap(cols, nil)
		b := append(binary.LittleEndian.AppendUint64(nil, id)[:6], 0, 0, 3, 'a', 'p', 'p', 0, byte(len(table)))
		b = append(append(b, table...), 0)
		return synthEvent(replication.TABLE_MAP_EVENT, append(b, tm[8+5+8:]...))
	}
	rows := func(id uint64, v byte, end bool) []byte {
		b := synthRows(false, 1, []byte{0, v, 0, 0, 0})
		copy(b, binary.LittleEndian.AppendUint64(nil, id)[:6])
		b[6] = 0
		if end {
			b[6] = 1
		}
		return synthEvent(replication.WRITE_ROWS_EVENTv1, b)
	}
	const low, high = uint64(9), uint64(1)<<32 | 9
	var stream [][]byte
	for range 2 { // the second time through the hot path's templates and kept table maps
		stream = append(stream, tableMap(low, "other"), tableMap(high, "outbox"), rows(low, 1, false), rows(high, 2, true))
		stream = append(stream, tableMap(high, "other"), tableMap(low, "outbox"), rows(high, 3, false), rows(low, 4, true))
	}
	hot := newEventParser(mysql.MariaDBFlavor, nil, bound64M, outboxOnly)
	ref := referenceParser(mysql.MariaDBFlavor, nil, outboxOnly)
	hotSyncer, refSyncer := newRawSyncer(mysql.MariaDBFlavor), newRawSyncer(mysql.MariaDBFlavor)
	var got []string
	for i, raw := range append([][]byte{synthFDE(t)}, stream...) {
		h, herr := hot.parse(hotSyncer.event(t, raw))
		r, rerr := ref.parse(refSyncer.event(t, raw))
		if g, w := parsed(h, herr), parsed(r, rerr); g != w || herr != nil {
			t.Fatalf("event %d:\n hot path: %s\n go-mysql: %s", i, g, w)
		}
		if e, ok := h.Event.(*replication.RowsEvent); ok && e.Rows != nil {
			got = append(got, dump(e.Rows))
		}
	}
	if want := []string{"int32(2) | ", "int32(4) | ", "int32(2) | ", "int32(4) | "}; !reflect.DeepEqual(got, want) {
		t.Fatalf("rows of app.outbox decoded: %q, want %q", got, want)
	}
}
