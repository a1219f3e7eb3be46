package binlog

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Hand-built rows events of shapes no server writes, which go-mysql's row
// decoder loops on or allocates for without bound.

const shapeTableID = 300

// wideTableMap is the body of a table map of testTable with cols INT
// columns, all nullable, named c0, c1...
func wideTableMap(cols int) []byte {
	db, tbl, _ := strings.Cut(testTable, ".")
	b := binary.LittleEndian.AppendUint64(nil, shapeTableID)[:6]
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = append(b, byte(len(db)))
	b = append(b, db...)
	b = append(b, 0, byte(len(tbl)))
	b = append(b, tbl...)
	b = append(b, 0)
	b = mysql.AppendLengthEncodedInteger(b, uint64(cols))
	for range cols {
		b = append(b, mysql.MYSQL_TYPE_LONG)
	}
	b = append(b, 0) // no metadata
	for range (cols + 7) / 8 {
		b = append(b, 0xff) // nullable
	}
	var names []byte
	for i := range cols {
		name := "c" + strconv.Itoa(i)
		names = append(append(names, byte(len(name))), name...)
	}
	b = append(b, replication.TABLE_MAP_OPT_META_COLUMN_NAME)
	b = mysql.AppendLengthEncodedInteger(b, uint64(len(names)))
	return append(b, names...)
}

// shapedRows is the body of a rows event of op on the wide table: count
// columns, the bitmaps (bitmap2 for an update), then data as it is.
func shapedRows(flavor string, op Op, count uint64, bitmap1, bitmap2, data []byte) (replication.EventType, []byte) {
	types := map[Op][2]replication.EventType{
		OpInsert: {replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2},
		OpUpdate: {replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2},
		OpDelete: {replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2},
	}[op]
	t := types[1]
	b := binary.LittleEndian.AppendUint64(nil, shapeTableID)[:6]
	b = binary.LittleEndian.AppendUint16(b, replication.RowsEventStmtEndFlag)
	if flavor == mysql.MariaDBFlavor {
		t = types[0]
	} else {
		b = binary.LittleEndian.AppendUint16(b, 2) // no extra row data
	}
	b = mysql.AppendLengthEncodedInteger(b, count)
	b = append(b, bitmap1...)
	if op == OpUpdate {
		b = append(b, bitmap2...)
	}
	return t, append(b, data...)
}

// bitmapOf marks the first present of width columns.
func bitmapOf(width, present int) []byte {
	b := make([]byte, (width+7)/8)
	for i := range present {
		b[i/8] |= 1 << (i % 8)
	}
	return b
}

// The reader stops at the transaction of a rows event no server writes,
// naming the transaction and the table, before go-mysql decodes it:
// images of no column (go-mysql appended empty rows without end), an event
// wider than its table map, a table wider than MySQL allows (go-mysql
// allocated its width for every row, each a byte); an INSERT lacking
// columns is handed on with its absent columns named, its rows decoded as
// wide as the columns they hold (a wide table's partial rows of a few bytes
// each were 100 KB decoded).
func TestReaderStopsAtMalformedRowsBeforeDecodingThem(t *testing.T) {
	oneByteRows := func(n int) []byte { return make([]byte, n) } // NULL bitmaps of one present column: NULL
	for _, v := range []struct {
		name  string
		cols  int // the table map's
		op    Op
		count uint64 // the rows event's
		b1    []byte
		b2    []byte
		data  []byte
		want  error
		has   string
	}{
		{"insert images of no column, a byte after them", 2, OpInsert, 2, []byte{0}, nil, []byte{0}, ErrMalformedRows, "hold no column"},
		{"update images of no column", 2, OpUpdate, 2, []byte{0}, []byte{0}, []byte{0, 0}, ErrMalformedRows, "hold no column"},
		{"delete images of no column", 2, OpDelete, 2, []byte{0}, nil, []byte{0}, ErrMalformedRows, "hold no column"},
		{"bits set only past the column count", 2, OpDelete, 2, []byte{0b11111100}, nil, []byte{0}, ErrMalformedRows, "hold no column"},
		{"an event wider than its table map", 2, OpDelete, 40_000, bitmapOf(40_000, 1), nil, oneByteRows(2000), ErrMalformedRows,
			"40000 columns and its table map 2"},
		{"a table of 5,000 columns", 5000, OpDelete, 5000, bitmapOf(5000, 1), nil, oneByteRows(2000), ErrMalformedRows, "5000 columns"},
		{"a table without columns", 0, OpInsert, 0, nil, nil, []byte{0}, ErrMalformedRows, "0 columns"},
		// Not malformed: handed on with its absent columns named, its rows
		// of the one column present, for the relay to stop where its
		// transaction's fate is known.
		{"an insert of one of 4,096 columns", 4096, OpInsert, 4096, bitmapOf(4096, 1), nil, oneByteRows(4000), nil, " insert 800 absent=c1,c2,"},
	} {
		for _, flavor := range flavors {
			t.Run(flavor+"/"+v.name, func(t *testing.T) {
				f := newFixture(t, flavor)
				e := newEncoder(t, flavor)
				p := replication.NewBinlogParser()
				p.SetFlavor(flavor)
				// As the reader's parser (parse.go).
				p.SetRowsEventDecodeFunc(rowsDecoder(f.r.captured, func() (int64, string) { return 1 << 20, "the test's" }))
				parse := func(raw []byte) *replication.BinlogEvent {
					ev, err := p.Parse(raw)
					if err != nil {
						t.Fatalf("parse %s: %v", replication.EventType(raw[4]), err)
					}
					return ev
				}
				parse(e.raw(replication.FORMAT_DESCRIPTION_EVENT, e.fde()))
				tm := parse(e.raw(replication.TABLE_MAP_EVENT, wideTableMap(v.cols)))
				typ, body := shapedRows(flavor, v.op, v.count, v.b1, v.b2, v.data)
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				rows := parse(e.raw(typ, body))
				runtime.ReadMemStats(&after)
				if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
					t.Fatalf("parsing the rows event allocated %d MB", got>>20)
				}
				decoded := rows.Event.(*replication.RowsEvent).Rows
				switch {
				case v.want != nil && len(decoded) != 0:
					t.Fatalf("%d rows decoded, want none", len(decoded))
				case v.want == nil && (len(decoded) == 0 || len(decoded[0]) != 1):
					t.Fatalf("decoded %d rows, the first of %d values; want rows of the one column present", len(decoded), len(decoded[0]))
				}
				s := &script{encoder: e}
				s.begin(1).add(tm, rows).xid()
				got, err := f.run(s.evs)
				if v.want == nil {
					if err != nil || len(got) != 2 || !strings.Contains(got[0], v.has) {
						t.Fatalf("run: %q, %v, want the rows event undecoded with %q and its commit", got, err, v.has)
					}
					return
				}
				if !errors.Is(err, v.want) || !strings.Contains(err.Error(), v.has) || !strings.Contains(err.Error(), gtidOfN(flavor, 1)) ||
					!strings.Contains(err.Error(), testTable) {
					t.Fatalf("run: %v, want %v naming %q, the transaction and the table", err, v.want, v.has)
				}
				if len(got) != 0 {
					t.Fatalf("events %q before the stop, want none", got)
				}
			})
		}
	}
}

// The checks pass what servers write: every column present, a key only
// (MINIMAL), an update whose before image holds the key only.
func TestRowsShapeLetsServersEventsThrough(t *testing.T) {
	for _, flavor := range flavors {
		t.Run(flavor, func(t *testing.T) {
			s := &script{encoder: newEncoder(t, flavor)}
			s.begin(1).add(s.tableMap(testTable), s.rowsEvent(OpInsert, testTable, 3))
			s.add(s.tableMap(testTable), s.imageEvent(OpUpdate, testTable, 0b01, 2, false))
			s.add(s.tableMap(testTable), s.imageEvent(OpDelete, testTable, 0b01, 1, false)).xid()
			got, err := newFixture(t, flavor).run(s.evs)
			if err != nil || len(got) != 4 {
				t.Fatalf("events %q, %v", got, err)
			}
		})
	}
}

func TestPresentCount(t *testing.T) {
	for _, tc := range []struct {
		bitmap []byte
		width  uint64
		want   uint64
	}{
		{nil, 3, 0},
		{[]byte{0b111}, 3, 3},
		{[]byte{0b11111000}, 3, 0},
		{[]byte{0xff, 0xff}, 9, 9},
		{[]byte{0xff, 0xfe}, 9, 8},
		{[]byte{0xff}, 16, 8},
		{[]byte{0xff, 0xff}, 8, 8},
	} {
		if got := presentCount(tc.bitmap, tc.width); got != tc.want {
			t.Errorf("presentCount(%08b, %d) = %d, want %d", tc.bitmap, tc.width, got, tc.want)
		}
	}
}
