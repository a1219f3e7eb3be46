package binlog

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// The values a captured table's columns last had (lastValues) point into
// the event they were decoded from: a row with a large payload (here 8
// MiB) that brings a new value to another column, which the rows after it
// repeat (the same aggregate type, row after row), must not keep that
// event in memory once the stream has moved on.
func TestRepeatedValuesDoNotHoldALargeEvent(t *testing.T) {
	cols := []synthCol{{mysql.MYSQL_TYPE_VARCHAR, binary.LittleEndian.AppendUint16(nil, 20)}, {mysql.MYSQL_TYPE_BLOB, []byte{4}}}
	tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, nil))
	row := func(kind string, payload []byte) []byte {
		b := append([]byte{0, byte(len(kind))}, kind...)
		return append(binary.LittleEndian.AppendUint32(b, uint32(len(payload))), payload...)
	}
	ep, parse := hotStream(t, outboxOnly)
	syncer := newRawSyncer(mysql.MariaDBFlavor)
	small := func(kind string) []byte {
		return synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 2, row(kind, []byte("{}"))))
	}
	parse(tm)
	parse(small("order")) // the first of its type: go-mysql's parser makes the hot path's template
	var freed atomic.Bool
	func() {
		parse(tm)
		ev := syncer.event(t, synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 2, row("refund", bytes.Repeat([]byte("x"), 8<<20)))))
		runtime.SetFinalizer(&ev.RawData[0], func(*byte) { freed.Store(true) })
		out, err := ep.parse(ev)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Event.(*replication.RowsEvent).Rows[0][0]; got != "refund" {
			t.Fatalf("the large event's row: %v", got)
		}
	}()
	for range 3 {
		parse(tm)
		if got := parse(small("refund")).Event.(*replication.RowsEvent).Rows[0][0]; got != "refund" {
			t.Fatalf("a small event's row: %v", got)
		}
	}
	for deadline := time.Now().Add(5 * time.Second); !freed.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the 8 MiB event is still held after the stream moved on")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	runtime.KeepAlive(ep) // the stream goes on
}
