package binlog

import (
	"reflect"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/replication"
)

// A rows event's decode options, which go-mysql's parser keeps unexported
// in each RowsEvent it makes: decodeInsertRows follows them as go-mysql's
// own decoder would (rowdecode.go).

// rowsEventField is the index of one of go-mysql's unexported RowsEvent
// fields of kind k, read with reflect; -1 when go-mysql has no such field,
// and then every event goes to go-mysql.
func rowsEventField(name string, k reflect.Kind) int {
	f, ok := reflect.TypeFor[replication.RowsEvent]().FieldByName(name)
	if !ok || f.Type.Kind() != k || len(f.Index) != 1 {
		return -1
	}
	return f.Index[0]
}

// The decode options go-mysql keeps in each RowsEvent: compressed (a
// MariaDB *_COMPRESSED_EVENT_V1, whose row images are zlib data),
// parseTime (DATETIME and TIMESTAMP as time.Time, not text: not decoded
// here) and timestampStringLocation (the zone TIMESTAMP text is rendered
// in). decodeInsertRows follows the event's own options, never a copy.
var (
	rowsEventCompressed = rowsEventField("compressed", reflect.Bool)
	rowsEventParseTime  = rowsEventField("parseTime", reflect.Bool)
	rowsEventTSLocation = func() int {
		i := rowsEventField("timestampStringLocation", reflect.Pointer)
		if i < 0 || reflect.TypeFor[replication.RowsEvent]().Field(i).Type != reflect.TypeFor[*time.Location]() {
			return -1
		}
		return i
	}()
	// rowsEventOptions: where those fields sit in a RowsEvent, found once
	// by reflect (read per rows event, reflect cost a fiftieth of the
	// relay's CPU in one-row catch-up); ok false when one is missing.
	rowsEventOptions = func() (o struct {
		compressed, parseTime, location uintptr
		ok                              bool
	}) {
		if rowsEventCompressed < 0 || rowsEventParseTime < 0 || rowsEventTSLocation < 0 {
			return o
		}
		t := reflect.TypeFor[replication.RowsEvent]()
		o.compressed = t.Field(rowsEventCompressed).Offset
		o.parseTime = t.Field(rowsEventParseTime).Offset
		o.location = t.Field(rowsEventTSLocation).Offset
		o.ok = true
		return o
	}()
)

// eventOptions reads e's decode options: ok false when go-mysql lacks one
// of them, or would give time.Time values (parseTime).
func eventOptions(e *replication.RowsEvent) (compressed bool, loc *time.Location, ok bool) {
	o := &rowsEventOptions
	if !o.ok {
		return false, nil, false
	}
	p := unsafe.Pointer(e)
	if *(*bool)(unsafe.Add(p, o.parseTime)) {
		return false, nil, false
	}
	return *(*bool)(unsafe.Add(p, o.compressed)), *(**time.Location)(unsafe.Add(p, o.location)), true
}
