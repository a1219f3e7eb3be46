package binlog

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

func digestOf(tm *replication.TableMapEvent, op Op, rows ...[]any) *TxDigest {
	var d rowsDigest
	d.add("0-1-5", tm, op, rows)
	return d.sum("0-1-5")
}

func typedMap(db, table string, types ...byte) *replication.TableMapEvent {
	return &replication.TableMapEvent{Schema: []byte(db), Table: []byte(table), ColumnCount: uint64(len(types)), ColumnType: types}
}

// A value decoded signed (a NO_LOG table map) and the same value decoded
// UNSIGNED, a string and the same bytes, a row split over two events: the
// same digest. Another value, table or row order: another.
func TestDigestCoversRowsNotTheirDecoding(t *testing.T) {
	ints := typedMap("app", "outbox", mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BLOB)
	signed := []any{int8(-1), int16(-2), int32(-3), int32(-294967296), int64(-1), "payload", []byte("blob")}
	unsigned := []any{uint8(255), uint16(65534), uint32(0xFFFFFD), uint32(4000000000), uint64(18446744073709551615), []byte("payload"), "blob"}
	base := digestOf(ints, OpInsert, signed)
	if base == nil || base.Rows != 1 || !strings.HasPrefix(base.Sum, DigestScheme+":") || len(base.Tables) != 1 || base.Tables[0] != "app.outbox" {
		t.Fatalf("digest %+v", base)
	}
	if got := digestOf(ints, OpInsert, unsigned); got.Sum != base.Sum {
		t.Fatalf("signed and UNSIGNED readings of the same bits differ: %s, %s", base.Sum, got.Sum)
	}
	two := []any{int8(1), int16(2), int32(3), int32(4), int64(5), "x", nil}
	var split rowsDigest
	split.add("0-1-5", ints, OpInsert, [][]any{signed})
	split.add("0-1-5", ints, OpInsert, [][]any{two})
	if whole := digestOf(ints, OpInsert, signed, two); split.sum("0-1-5").Sum != whole.Sum || whole.Rows != 2 {
		t.Fatalf("rows split over two events digest otherwise than in one")
	}
	other := func(name string, d *TxDigest) {
		t.Helper()
		if d.Sum == base.Sum {
			t.Fatalf("%s: same digest", name)
		}
	}
	other("another value", digestOf(ints, OpInsert, []any{int8(-1), int16(-2), int32(-3), int32(-294967296), int64(-1), "payloaD", []byte("blob")}))
	other("NULL for empty", digestOf(ints, OpInsert, []any{int8(-1), int16(-2), int32(-3), int32(-294967296), int64(-1), "payload", nil}))
	other("another table", digestOf(typedMap("app", "outbox2", ints.ColumnType...), OpInsert, signed))
	if got := digestOf(typedMap("App", "OUTBOX", ints.ColumnType...), OpInsert, signed); got.Sum != base.Sum {
		t.Fatal("the table's names in another letter case (lower_case_table_names) digest otherwise")
	}
	other("a wider column", digestOf(typedMap("app", "outbox", mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_LONG,
		mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BLOB), OpInsert, signed))
	if a, b := digestOf(ints, OpInsert, signed, two), digestOf(ints, OpInsert, two, signed); a.Sum == b.Sum {
		t.Fatal("rows in another order: same digest")
	}
	// Values spilling from one column into the next are not the same row.
	strs := typedMap("app", "outbox", mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR)
	if a, b := digestOf(strs, OpInsert, []any{"ab", "c"}), digestOf(strs, OpInsert, []any{"a", "bc"}); a.Sum == b.Sum {
		t.Fatal("column boundaries are not in the digest")
	}
	floats := typedMap("app", "outbox", mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_NEWDECIMAL)
	if a, b := digestOf(floats, OpInsert, []any{float32(1.5), 2.5, "1.000"}), digestOf(floats, OpInsert, []any{float32(1.5), 2.5, "1.0"}); a.Sum == b.Sum {
		t.Fatal("decimals of another scale: same digest")
	}
}

// Only INSERTs count: an UPDATE's or DELETE's images are as the server
// that logged them chose (binlog_row_image: a session's MINIMAL DELETE is
// the primary key alone on the primary and whole rows on a FULL replica).
// A group of DELETEs has no digest; DELETEs beside INSERTs change nothing.
func TestDigestCountsInsertsOnly(t *testing.T) {
	tm := typedMap("app", "outbox", mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR)
	row := []any{int64(7), "payload"}
	if d := digestOf(tm, OpDelete, row); d != nil {
		t.Fatalf("a group of DELETEs digests %+v", d)
	}
	if d := digestOf(tm, OpUpdate, row); d != nil {
		t.Fatalf("a group of UPDATEs digests %+v", d)
	}
	inserts := digestOf(tm, OpInsert, row)
	for _, images := range [][]any{{int64(7), nil}, row} { // MINIMAL, FULL
		var d rowsDigest
		d.add("0-1-5", tm, OpInsert, [][]any{row})
		d.add("0-1-5", tm, OpDelete, [][]any{images})
		d.add("0-1-5", tm, OpUpdate, [][]any{images})
		if got := d.sum("0-1-5"); got.Sum != inserts.Sum || got.Rows != 1 {
			t.Fatalf("INSERT and other images %v digest %+v, want the INSERT's %+v", images, got, inserts)
		}
	}
	other := digestOf(typedMap("app", "other", tm.ColumnType...), OpInsert, row)
	var d rowsDigest
	d.add("0-1-5", typedMap("app", "other", tm.ColumnType...), OpDelete, [][]any{row})
	d.add("0-1-5", tm, OpInsert, [][]any{row})
	if got := d.sum("0-1-5"); len(got.Tables) != 1 || got.Tables[0] != "app.outbox" || got.Sum == other.Sum {
		t.Fatalf("a table with DELETEs alone is among the digest's tables: %+v", got)
	}
}

// A group without captured rows has no digest; the digest of one group is
// not carried into the next.
func TestDigestIsPerGroup(t *testing.T) {
	tm := typedMap("app", "outbox", mysql.MYSQL_TYPE_LONG)
	var d rowsDigest
	if d.sum("0-1-1") != nil {
		t.Fatal("digest of a group without rows")
	}
	d.add("0-1-1", tm, OpInsert, [][]any{{int32(1)}})
	if d.sum("0-1-2") != nil {
		t.Fatal("the digest of 0-1-1 given for 0-1-2")
	}
	d.add("0-1-2", tm, OpInsert, [][]any{{int32(1)}})
	first := digestOf(tm, OpInsert, []any{int32(1)})
	if got := d.sum("0-1-2"); got.Sum != first.Sum || got.Rows != 1 {
		t.Fatalf("0-1-2 digests %+v, want %+v (nothing of 0-1-1)", got, first)
	}
}

// BenchmarkDigestOutboxRow: the digest's cost per row of the article's
// outbox table (a 36-byte id, a 200-byte payload), as the reader pays it
// for every captured row.
func BenchmarkDigestOutboxRow(b *testing.B) {
	tm := typedMap("app", "outbox", mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR,
		mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_DATETIME2)
	row := []any{int64(123456), "0b6f1c3e-8a2d-4c1e-9f3a-2b7d5e6c8a90", "alarm", "dev-42", "AlarmCreated",
		[]byte(`{"deviceId":"dev-42","level":"CRITICAL","temperature":97.5,"seq":1234,"note":"` + strings.Repeat("x", 120) + `"}`),
		"2026-01-02 03:04:05.678"}
	rows := [][]any{row}
	var d rowsDigest
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%200 == 0 {
			d.sum("0-1-1")
			d.reset("0-1-1")
		}
		d.add("0-1-1", tm, OpInsert, rows)
	}
}
