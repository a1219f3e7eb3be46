package binlog

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Partial row images, hand-built as the server writes them under
// binlog_row_image MINIMAL or NOBLOB: the columns-present bitmap with a
// hole, the NULL bitmap and the values over the present columns only.

// An INSERT image of a captured table that lacks a column is reported with
// its rows, whichever column it lacks (Event.Absent), in the transaction
// and in an XA transaction alike, the rows holding the columns present
// only (Event.Image): the relay decides where the transaction's fate is
// known (its commit), audit keys the rows by what they hold. A whole image,
// NULL values included, reports none; UPDATE and DELETE images (the
// router's invalid operations) and other tables' images pass as before.
func TestFramerPartialRowImages(t *testing.T) {
	partial := func(s *script, op Op, table string, present byte) {
		s.add(s.tableMap(table), s.imageEvent(op, table, present, 1, false))
	}
	runFrameCases(t, []frameCase{{
		name: "every column present, v NULL: whole",
		build: func(s *script) {
			s.begin(1).add(s.tableMap(testTable), s.imageEvent(OpInsert, testTable, 0b11, 2, true)).xid()
		},
		want: []string{"rows #1 a.outbox insert 2", "commit #1 set=#1"},
	}, {
		name: "insert without v (MINIMAL, a defaulted column)",
		build: func(s *script) {
			s.begin(1).insert(testTable, 1).xid()
			s.begin(2)
			partial(s, OpInsert, testTable, 0b01)
			s.xid()
		},
		want: []string{"rows #1 a.outbox insert 1", "commit #1 set=#1", "rows #2 a.outbox insert 1 absent=v image=[0][[1]]", "commit #2 set=#2"},
	}, {
		name: "insert without id",
		build: func(s *script) {
			s.begin(1)
			partial(s, OpInsert, testTable, 0b10)
			s.xid()
		},
		want: []string{"rows #1 a.outbox insert 1 absent=id image=[1][[r1]]", "commit #1 set=#1"},
	}, {
		name: "a partial image after a whole one in the same transaction",
		build: func(s *script) {
			s.begin(1).insert(testTable, 3)
			partial(s, OpInsert, testTable, 0b01)
			s.xid()
		},
		want: []string{"rows #1 a.outbox insert 3", "rows #1 a.outbox insert 1 absent=v image=[0][[1]]", "commit #1 set=#1"},
	}, {
		name: "update with a minimal image, delete with the key only",
		build: func(s *script) {
			s.begin(1)
			partial(s, OpUpdate, testTable, 0b10)
			partial(s, OpDelete, testTable, 0b01)
			s.xid()
		},
		want: []string{"rows #1 a.outbox update 1", "rows #1 a.outbox delete 1", "commit #1 set=#1"},
	}, {
		name: "an update logged with binlog_row_value_options=PARTIAL_JSON",
		only: mysql.MySQLFlavor,
		build: func(s *script) {
			s.begin(1).add(s.tableMap(testTable), s.partialUpdateEvent(testTable, 2)).insert(testTable, 1).xid()
		},
		want: []string{"rows #1 a.outbox update 2", "rows #1 a.outbox insert 1", "commit #1 set=#1"},
	}, {
		name: "another table's partial insert",
		build: func(s *script) {
			s.begin(1)
			partial(s, OpInsert, "a.business", 0b01)
			s.insert(testTable, 1).xid()
		},
		want: []string{"rows #1 a.outbox insert 1", "commit #1 set=#1"},
	}, {
		name: "rollback to a savepoint with a partial image after it: its rows count",
		build: func(s *script) {
			s.begin(1).insert(testTable, 1).q("", "SAVEPOINT `s1`")
			partial(s, OpInsert, testTable, 0b01)
			s.q("", "ROLLBACK TO `s1`").xid()
		},
		want:    []string{"rows #1 a.outbox insert 1", "rows #1 a.outbox insert 1 absent=v image=[0][[1]]"},
		err:     ErrRolledBackRows,
		errGTID: 1,
	}, {
		name: "MariaDB non-transactional group: ROLLBACK TO drops a held partial image after the savepoint, not a row before it",
		only: mysql.MariaDBFlavor,
		build: func(s *script) {
			s.beginNonTrans(1)
			partial(s, OpInsert, testTable, 0b01)
			s.q("", "SAVEPOINT `s1`").insert(testTable, 2).insert("a.m", 1)
			s.q("", "ROLLBACK TO `s1`").xid()
		},
		want: []string{"rows #1 a.outbox insert 1 absent=v image=[0][[1]]", "commit #1 set=#1"},
	}, {
		name: "a partial insert inside an XA transaction",
		build: func(s *script) {
			s.xaStart(1, x1)
			partial(s, OpInsert, testTable, 0b01)
			s.xaEnd(x1).xaPrepare(false, x1)
		},
		want: []string{"rows #1 a.outbox insert 1 absent=v image=[0][[1]] xid=7831,,1", "prepare #1 xid=7831,,1 set=#1"},
	}})
}

// A NULL and an absent column decode to the same value with go-mysql's
// own decoder (it fills an absent column with nil): the reader tells them
// apart by the image's columns-present bitmap, reporting the absent one
// (Event.Absent) and the rows without it (Event.Image), never the NULL.
// The relay's fast decoder takes the whole image, not the partial one.
func TestNullAndAbsentColumnDecodeAlikeButOnlyNullPasses(t *testing.T) {
	for _, flavor := range flavors {
		t.Run(flavor, func(t *testing.T) {
			e := newEncoder(t, flavor)
			// A rows event ending a statement ends its table maps: one each.
			nullMap, null := e.tableMap(testTable), e.imageEvent(OpInsert, testTable, 0b11, 1, true)
			absentMap, absent := e.tableMap(testTable), e.imageEvent(OpInsert, testTable, 0b01, 1, false)
			tableMap := map[*replication.BinlogEvent]*replication.BinlogEvent{null: nullMap, absent: absentMap}
			goMySQL := func(ev *replication.BinlogEvent) [][]any { // go-mysql's own decoder
				p := replication.NewBinlogParser()
				p.SetFlavor(flavor)
				var last *replication.BinlogEvent
				for _, raw := range [][]byte{e.raw(replication.FORMAT_DESCRIPTION_EVENT, e.fde()), tableMap[ev].RawData, ev.RawData} {
					var err error
					if last, err = p.Parse(raw); err != nil {
						t.Fatal(err)
					}
				}
				return last.Event.(*replication.RowsEvent).Rows
			}
			if want := [][]any{{int32(1), nil}}; !reflect.DeepEqual(goMySQL(null), want) || !reflect.DeepEqual(goMySQL(absent), want) {
				t.Fatalf("go-mysql decoded rows: NULL %#v, absent %#v; want both %#v", goMySQL(null), goMySQL(absent), want)
			}

			took := func(ev *replication.BinlogEvent) bool {
				var took bool
				p := replication.NewBinlogParser()
				p.SetFlavor(flavor)
				p.SetRowsEventDecodeFunc(fastDecode(&took))
				for _, raw := range [][]byte{e.raw(replication.FORMAT_DESCRIPTION_EVENT, e.fde()), tableMap[ev].RawData, ev.RawData} {
					if _, err := p.Parse(raw); err != nil {
						t.Fatal(err)
					}
				}
				return took
			}
			if !took(null) || took(absent) {
				t.Fatalf("relay's decoder took the whole image %v (want true), the partial one %v (want false)", took(null), took(absent))
			}

			for _, tc := range []struct {
				name   string
				ev     *replication.BinlogEvent
				absent string
			}{{"NULL", null, ""}, {"absent", absent, " absent=v image=[0][[1]]"}} {
				s := &script{encoder: e}
				s.begin(1).add(tableMap[tc.ev], tc.ev).xid()
				f := newFixture(t, flavor)
				got, err := f.run(s.evs)
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				want := []string{"rows " + gtidOfN(flavor, 1) + " a.outbox insert 1" + tc.absent, "commit " + gtidOfN(flavor, 1) + " set=" + setThrough(flavor, 1)}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: events %q, want %q", tc.name, got, want)
				}
			}
		})
	}
}

func TestAbsentColumns(t *testing.T) {
	for _, tc := range []struct {
		present []byte
		count   uint64
		width   int
		want    []int
	}{
		{[]byte{0b11}, 2, 2, nil},
		{[]byte{0b11111111, 0b11}, 10, 10, nil},
		{[]byte{0b11111111, 0b01}, 10, 10, []int{9}},
		{[]byte{0b11101111, 0b11}, 10, 10, []int{4}},
		{[]byte{0b11111110, 0b10}, 10, 10, []int{0, 8}},
		{[]byte{0b11111111, 0b11111111}, 10, 10, nil}, // bits past the count mean nothing
		{[]byte{0b111}, 3, 4, []int{3}},               // fewer columns than the table has
		{[]byte{0b11111111}, 8, 10, []int{8, 9}},      // a bitmap too short
		{nil, 0, 2, []int{0, 1}},
	} {
		if got := absentColumns(tc.present, tc.count, tc.width); !slices.Equal(got, tc.want) {
			t.Errorf("absentColumns(%08b, %d, %d) = %v, want %v", tc.present, tc.count, tc.width, got, tc.want)
		}
	}
}

// The stop names the transaction, the table, the columns, the setting and
// the way past it: for a transaction published in parts, how many of its
// rows were published and how to find the others; for an XA transaction,
// the XA transaction and its prepare.
func TestPartialImageErrorSaysWhatAndHow(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *PartialImageError
		want []string
		not  string
	}{
		{"whole", &PartialImageError{GTID: "0-1-42", Table: "app.outbox", Absent: []string{"event_type", "payload"}},
			[]string{"transaction 0-1-42 inserted into app.outbox", "event_type, payload", "binlog_row_image=FULL", "MINIMAL or NOBLOB",
				"nothing of the transaction is published", "replay --event-id", "checkpoint skip --gtid 0-1-42"}, "audit"},
		{"published in parts", &PartialImageError{GTID: "0-1-42", Table: "app.outbox", Absent: []string{"note"}, Published: 4},
			[]string{"transaction 0-1-42 inserted", "its first 4 rows were published", "checkpoint skip --gtid 0-1-42",
				"`outbox-relay audit` names them missing"}, "nothing of the transaction"},
		{"xa", &PartialImageError{GTID: "0-1-44", Table: "app.outbox", Absent: []string{"note"}, XID: "x1", PreparedAt: "0-1-42"},
			[]string{"transaction 0-1-44 (the XA COMMIT of XA transaction x1, prepared at 0-1-42) inserted", "checkpoint skip --gtid 0-1-44"}, ""},
		{"xa one phase", &PartialImageError{GTID: "0-1-44", Table: "app.outbox", Absent: []string{"note"}, XID: "x1"},
			[]string{"transaction 0-1-44 (XA transaction x1, committed in one phase) inserted"}, "prepared at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, want := range tc.want {
				if !strings.Contains(tc.err.Error(), want) {
					t.Errorf("error %q does not say %q", tc.err, want)
				}
			}
			if tc.not != "" && strings.Contains(tc.err.Error(), tc.not) {
				t.Errorf("error %q says %q", tc.err, tc.not)
			}
			if !errors.Is(tc.err, ErrPartialRowImage) {
				t.Fatalf("%v is not ErrPartialRowImage", tc.err)
			}
		})
	}
}

// A partial image's table map, narrowed to the columns present, keeps each
// one's type, metadata and signedness (go-mysql reads a numeric column's
// from the bitmap by its rank among the numeric columns, which narrowing
// changes), and says the server logged signedness even with no numeric
// column left; without signedness metadata it has none either.
func TestNarrowedTableMapKeepsTypesAndSignedness(t *testing.T) {
	tm := &replication.TableMapEvent{ColumnCount: 5,
		ColumnType: []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT},
		ColumnMeta: []uint16{0, 80, 0, 0, 0},
		// numeric columns 0, 2, 3, 4: UNSIGNED 0 and 3
		SignednessBitmap: []byte{0b1010_0000}}
	for _, tc := range []struct {
		present  []int
		types    []byte
		unsigned map[int]bool
	}{
		{[]int{2, 3}, []byte{mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_TINY}, map[int]bool{0: false, 1: true}},
		{[]int{0, 1, 4}, []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_SHORT}, map[int]bool{0: true, 2: false}},
		{[]int{1}, []byte{mysql.MYSQL_TYPE_VARCHAR}, map[int]bool{}},
	} {
		n := narrowed(tm, tc.present)
		if n.ColumnCount != uint64(len(tc.present)) || !slices.Equal(n.ColumnType, tc.types) {
			t.Errorf("narrowed to %v: %d columns of types %v, want %v", tc.present, n.ColumnCount, n.ColumnType, tc.types)
		}
		for i, c := range tc.present {
			if n.ColumnMeta[i] != tm.ColumnMeta[c] {
				t.Errorf("narrowed to %v: column %d metadata %d, want %d", tc.present, i, n.ColumnMeta[i], tm.ColumnMeta[c])
			}
		}
		if got := n.UnsignedMap(); !reflect.DeepEqual(got, tc.unsigned) {
			t.Errorf("narrowed to %v: unsigned %v, want %v", tc.present, got, tc.unsigned)
		}
	}
	tm.SignednessBitmap = nil
	if got := narrowed(tm, []int{0, 3}).UnsignedMap(); got != nil {
		t.Errorf("without signedness metadata: unsigned %v, want none", got)
	}
}
