package binlog

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Each integer type read as signed (no signedness in the binlog) comes
// back as the value go-mysql gives an UNSIGNED column of that type.
func TestAsUnsigned(t *testing.T) {
	for _, c := range []struct {
		v    any
		tp   byte
		want any
	}{
		{int8(-56), mysql.MYSQL_TYPE_TINY, uint8(200)},
		{int8(5), mysql.MYSQL_TYPE_TINY, uint8(5)},
		{int16(-1), mysql.MYSQL_TYPE_SHORT, uint16(65535)},
		{int32(-1), mysql.MYSQL_TYPE_INT24, uint32(16777215)},
		{int32(-8388608), mysql.MYSQL_TYPE_INT24, uint32(8388608)},
		{int32(-294967296), mysql.MYSQL_TYPE_LONG, uint32(4000000000)},
		{int64(-1), mysql.MYSQL_TYPE_LONGLONG, uint64(18446744073709551615)},
		{nil, mysql.MYSQL_TYPE_LONG, nil},
		{uint32(7), mysql.MYSQL_TYPE_LONG, uint32(7)},     // read with signedness already
		{int32(-1), mysql.MYSQL_TYPE_LONGLONG, int32(-1)}, // not this type's value: left alone
		{"x", mysql.MYSQL_TYPE_LONG, "x"},
	} {
		if got := asUnsigned(c.v, c.tp); fmt.Sprintf("%T %v", got, got) != fmt.Sprintf("%T %v", c.want, c.want) {
			t.Errorf("asUnsigned(%T %v, %d) = %T %v, want %T %v", c.v, c.v, c.tp, got, got, c.want, c.want)
		}
	}
}

func signsTableMap() *replication.TableMapEvent {
	return &replication.TableMapEvent{ColumnCount: 4,
		ColumnType: []byte{mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_TINY}}
}

func TestPlanSigns(t *testing.T) {
	cols := []string{"id", "name", "big", "tiny"}
	tm := signsTableMap()
	// Known: only the UNSIGNED integer columns are read as unsigned, with
	// go-mysql's unsigned types for every value.
	f := planSigns(tm, cols, []string{"ID", "name", "tiny"}, true)
	rows := [][]any{{int32(-1), "a", int64(-1), int8(-1)}, {int32(7), "b", int64(7), int8(7)}}
	if err := f.apply(rows, true, "app.t", "0-1-1"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%T %[1]v %v %T %[3]v %T %[4]v", rows[0][0], rows[0][1], rows[0][2], rows[0][3]); got != "uint32 4294967295 a int64 -1 uint8 255" {
		t.Fatalf("row %s", got)
	}
	if got := fmt.Sprintf("%T %T %T", rows[1][0], rows[1][2], rows[1][3]); got != "uint32 int64 uint8" {
		t.Fatalf("row %s", got)
	}
	// A partial image's rows hold the columns present only (name and
	// tiny): each is read by its own column's signedness.
	partial := [][]any{{"c", int8(-2)}}
	if err := f.applyAt(partial, []int{1, 3}, false, "app.t", "0-1-1"); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%v %T %[2]v", partial[0][0], partial[0][1]); got != "c uint8 254" {
		t.Fatalf("partial row %s", got)
	}
	// Known with no UNSIGNED integer column, or signedness in the binlog: nothing to do.
	if f := planSigns(tm, cols, nil, true); f != nil {
		t.Fatalf("plan %+v for a table without unsigned columns", f)
	}
	withBits := signsTableMap()
	withBits.SignednessBitmap = []byte{0x80}
	if f := planSigns(withBits, cols, nil, false); f != nil {
		t.Fatalf("plan %+v though the binlog gives signedness", f)
	}
	// Unknown: non-negative values pass as they are; a negative one stops.
	f = planSigns(tm, cols, nil, false)
	ok := [][]any{{int32(1), "a", int64(2), int8(3)}, {nil, nil, nil, nil}}
	if err := f.apply(ok, true, "app.t", "0-1-1"); err != nil || ok[0][0] != int32(1) {
		t.Fatalf("apply: %v, row %v", err, ok[0])
	}
	// Deleted or updated rows are not published: their values do not stop the relay.
	if err := f.apply([][]any{{int32(1), "a", int64(-3), int8(3)}}, false, "app.t", "0-1-2"); err != nil {
		t.Fatalf("a deleted row of unknown signedness: %v", err)
	}
	err := f.apply([][]any{{int32(1), "a", int64(-3), int8(3)}}, true, "app.t", "0-1-2")
	if !errors.Is(err, ErrNoSignedness) {
		t.Fatalf("error %v, want ErrNoSignedness", err)
	}
	for _, want := range []string{"app.t at 0-1-2", "column big holds -3, or 18446744073709551613 if it is UNSIGNED"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || len(s) >= len(sub) && (s[:len(sub)] == sub || contains(s[1:], sub))
}
