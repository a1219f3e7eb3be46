package binlog

import (
	"testing"

	"github.com/go-mysql-org/go-mysql/replication"
)

func tableMap() *replication.TableMapEvent {
	return &replication.TableMapEvent{
		TableID: 7, Schema: []byte("app"), Table: []byte("outbox"), ColumnCount: 3,
		ColumnType: []byte{8, 15, 245}, ColumnMeta: []uint16{0, 256, 4},
		DefaultCharset: []uint64{45}, ColumnCharset: nil,
		ColumnName: [][]byte{[]byte("id"), []byte("event_id"), []byte("payload")},
	}
}

// A table map event reuses the cached Table only when everything the
// columns and their latin1 flags are read from is the same.
func TestCachedTableMatches(t *testing.T) {
	table := &Table{Schema: "app", Name: "outbox", Columns: []string{"id", "event_id", "payload"}}
	c := newCachedTable(tableMap(), table, nil)
	if !c.matches(tableMap()) {
		t.Fatal("an identical table map event does not match")
	}
	for name, change := range map[string]func(*replication.TableMapEvent){
		"schema":          func(tm *replication.TableMapEvent) { tm.Schema = []byte("other") },
		"table":           func(tm *replication.TableMapEvent) { tm.Table = []byte("outbox2") },
		"column type":     func(tm *replication.TableMapEvent) { tm.ColumnType[2] = 252 },
		"column meta":     func(tm *replication.TableMapEvent) { tm.ColumnMeta[1] = 1024 },
		"default charset": func(tm *replication.TableMapEvent) { tm.DefaultCharset = []uint64{8} },
		"column charset":  func(tm *replication.TableMapEvent) { tm.ColumnCharset = []uint64{8, 45} },
		"column renamed":  func(tm *replication.TableMapEvent) { tm.ColumnName[1] = []byte("event_uuid") },
		"column added": func(tm *replication.TableMapEvent) {
			tm.ColumnName = append(tm.ColumnName, []byte("extra"))
		},
		"names dropped": func(tm *replication.TableMapEvent) { tm.ColumnName = nil },
		// binlog_row_metadata changed to or from NO_LOG: signedness comes or goes
		"signedness": func(tm *replication.TableMapEvent) { tm.SignednessBitmap = []byte{0x80} },
	} {
		tm := tableMap()
		change(tm)
		if c.matches(tm) {
			t.Errorf("%s changed, the cached table still matches", name)
		}
	}
	// Columns from the tracked layout (no names in the binlog): names
	// appearing is a change too.
	unnamed := tableMap()
	unnamed.ColumnName = nil
	c = newCachedTable(unnamed, table, nil)
	if c.matches(tableMap()) {
		t.Error("a table built without binlog names matches an event with names")
	}
	again := tableMap()
	again.ColumnName = nil
	if !c.matches(again) {
		t.Error("an identical event without names does not match")
	}
	// The cache holds copies: go-mysql may reuse the event's buffers.
	tm := tableMap()
	c = newCachedTable(tm, table, nil)
	tm.ColumnType[0], tm.ColumnMeta[0], tm.DefaultCharset[0] = 1, 1, 1
	if !c.matches(tableMap()) {
		t.Error("the cached table changed with the event it was built from")
	}
}
