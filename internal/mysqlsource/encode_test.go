package mysqlsource

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
	vtbinlog "vitess.io/vitess/go/mysql/binlog"
)

// jsonCases are payloads real applications store: objects from Jackson,
// encoding/json and ORMs, nested arrays, unicode, large and negative
// numbers, doubles, literals, empty containers, a document over 64 KiB.
var jsonCases = []string{
	`{"deviceId":"dev-1","level":"CRITICAL","temperature":93,"seq":7}`,
	`{"a":1,"bb":[1,2,3],"c":{"d":null,"e":true,"f":false}}`,
	`[]`, `{}`, `"just a string"`, `12`, `-40000`, `3000000000`, `18446744073709551615`, `1.5`, `-2.25e-3`,
	`{"name":"Zoë 🙂 \"quoted\" \\ back","n":-1,"big":9007199254740993,"neg32":-2147483648}`,
	`{"nested":{"deeper":{"deepest":[{"x":1},{"y":[true,false,null]}]}},"k":"` + strings.Repeat("v", 300) + `"}`,
	`{"big":"` + strings.Repeat("x", 70000) + `","n":1}`,
	`[` + strings.Repeat(`"0123456789",`, 7000) + `1]`,
}

// TestJSONMatchesVitess decodes the double's binary JSON with Vitess's
// decoder (an implementation the relay does not use) and compares the
// documents.
func TestJSONMatchesVitess(t *testing.T) {
	for _, text := range jsonCases {
		b, err := EncodeJSON(text)
		if err != nil {
			t.Fatalf("encode %.60s: %v", text, err)
		}
		v, err := vtbinlog.ParseBinaryJSON(b)
		if err != nil {
			t.Fatalf("vitess decode %.60s: %v", text, err)
		}
		if !sameJSON(t, text, string(v.MarshalTo(nil))) {
			t.Errorf("vitess reads %.80s back as %.80s", text, v.MarshalTo(nil))
		}
	}
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	da, db := json.NewDecoder(strings.NewReader(a)), json.NewDecoder(strings.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if err := da.Decode(&x); err != nil {
		t.Fatal(err)
	}
	if err := db.Decode(&y); err != nil {
		t.Fatalf("decode %q: %v", b, err)
	}
	return reflect.DeepEqual(normalize(x), normalize(y))
}

// normalize makes numbers comparable across renderings (1.5 vs 1.5E0).
func normalize(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = normalize(x[k])
		}
	}
	return v
}

func TestJSONKeyOrderIsMySQLs(t *testing.T) {
	b, err := EncodeJSON(`{"ccc":1,"a":2,"bb":3,"b":4}`)
	if err != nil {
		t.Fatal(err)
	}
	v, err := vtbinlog.ParseBinaryJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	// Vitess keeps the stored order: MySQL sorts by length, then bytes.
	if got := strings.ReplaceAll(string(v.MarshalTo(nil)), " ", ""); got != `{"a":2,"b":4,"bb":3,"ccc":1}` {
		t.Fatalf("stored order %s", got)
	}
}

// parse runs go-mysql's binlog parser over a format description and evs.
func parse(t *testing.T, w *writer, evs ...event) []*replication.BinlogEvent {
	t.Helper()
	p := replication.NewBinlogParser()
	p.SetRenderJSONAsMySQLText(true)
	var out []*replication.BinlogEvent
	for _, ev := range append([]event{w.stamp(event(fde(w)), 0, 0)}, evs...) {
		e, err := p.Parse(ev)
		if err != nil {
			t.Fatalf("go-mysql parse event type %d: %v", ev[4], err)
		}
		out = append(out, e)
	}
	return out[1:]
}

func TestEventsDecodeWithGoMySQL(t *testing.T) {
	for _, version := range []string{"8.0.40", "8.4.3"} {
		t.Run(version, func(t *testing.T) {
			w := newWriter(version, 7, true)
			sid := mustUUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")
			at := time.Date(2026, 11, 30, 12, 34, 56, 789_000_000, time.UTC)
			tbl := &Table{DB: "app", Name: "outbox", Columns: OutboxColumns, id: 42}
			row := []any{int64(5), "ev-1", "alarm", "dev-1", "AlarmCreated", `{"seq":1,"t":93.5}`, at}
			rows, err := w.writeRowsEvent(tbl, [][]any{row}, nil, true)
			if err != nil {
				t.Fatal(err)
			}
			evs := parse(t, w,
				w.stamp(w.gtidEvent(GTID{SID: sid, GNO: 9}, 3, uint64(at.UnixMicro()), 500, 80040), 1, 100),
				w.stamp(w.tableMapEvent(tbl, true), 1, 200),
				w.stamp(rows, 1, 300),
				w.stamp(w.tableMapEvent(tbl, false), 1, 400),
				w.stamp(w.xaPrepareEvent(XID{GTRID: "g1", BQual: "b", FormatID: 1}, false), 1, 500),
				w.stamp(w.previousGTIDsEvent(MustParseSet(sid.String()+":1-5:7")), 1, 600))
			g := evs[0].Event.(*replication.GTIDEvent)
			if g.GNO != 9 || g.ImmediateCommitTimestamp != uint64(at.UnixMicro()) || g.SequenceNumber != 3 || g.TransactionLength != 500 {
				t.Errorf("gtid event decoded as %+v", g)
			}
			full := evs[1].Event.(*replication.TableMapEvent)
			if got := full.ColumnNameString(); !reflect.DeepEqual(got, []string{"id", "event_id", "aggregate_type",
				"aggregate_id", "event_type", "payload", "created_at"}) {
				t.Errorf("FULL table map column names %v", got)
			}
			if cm := full.CollationMap(); cm[1] != collationUTF8MB4 {
				t.Errorf("collations %v", cm)
			}
			r := evs[2].Event.(*replication.RowsEvent)
			if len(r.Rows) != 1 || r.Rows[0][0] != int64(5) || r.Rows[0][1] != "ev-1" {
				t.Fatalf("rows %v", r.Rows)
			}
			if !sameJSON(t, `{"seq":1,"t":93.5}`, fmt.Sprint(r.Rows[0][5])) {
				t.Errorf("json cell %s", r.Rows[0][5])
			}
			if got := r.Rows[0][6]; got != "2026-11-30 12:34:56.789" {
				t.Errorf("datetime(3) cell %v", got)
			}
			if minimal := evs[3].Event.(*replication.TableMapEvent); len(minimal.ColumnName) != 0 {
				t.Errorf("MINIMAL table map carries names %v", minimal.ColumnNameString())
			}
			if ge, ok := evs[4].Event.(*replication.GenericEvent); !ok || evs[4].Header.EventType != replication.XA_PREPARE_LOG_EVENT ||
				len(ge.Data) != 13+3 {
				t.Errorf("xa prepare %T %v", evs[4].Event, evs[4].Header.EventType)
			}
			if pg := evs[5].Event.(*replication.PreviousGTIDsEvent); pg.GTIDSets != sid.String()+":1-5:7" {
				t.Errorf("previous gtids %q", pg.GTIDSets)
			}
		})
	}
}

// Partial images as MySQL logs them (a session's binlog_row_image MINIMAL:
// an INSERT without its defaulted columns; an UPDATE with the key before
// and the changed column after, plain and under
// binlog_row_value_options=PARTIAL_JSON) decode with go-mysql to the
// logged values, the columns-present bitmaps saying which.
func TestPartialImagesDecodeWithGoMySQL(t *testing.T) {
	w := newWriter("8.0.40", 7, true)
	at := time.Date(2026, 11, 30, 12, 34, 56, 0, time.UTC)
	tbl := &Table{DB: "app", Name: "outbox", Columns: OutboxColumns, id: 42}
	row := []any{int64(5), "ev-1", "alarm", "dev-1", "AlarmCreated", `{"seq":1}`, at}
	changed := []any{int64(5), "ev-1", "alarm", "dev-1", "AlarmCreated", `{"seq":2}`, at}
	minimal := []bool{true, true, true, true, false, false, true} // event_type and payload left to their defaults
	key := []bool{true, false, false, false, false, false, false}
	payload := []bool{false, false, false, false, false, true, false}
	ins, err := w.writeRowsEvent(tbl, [][]any{row}, minimal, true)
	if err != nil {
		t.Fatal(err)
	}
	up, err := w.updateRowsEvent(Update{Table: tbl, Rows: [][2][]any{{row, changed}}, Before: key, After: payload}, true)
	if err != nil {
		t.Fatal(err)
	}
	partial, err := w.updateRowsEvent(Update{Table: tbl, Rows: [][2][]any{{row, changed}}, PartialJSON: true}, true)
	if err != nil {
		t.Fatal(err)
	}
	// Each statement's end (STMT_END_F) ends its table maps: one each.
	tm := func(pos uint32) event { return w.stamp(w.tableMapEvent(tbl, true), 1, pos) }
	evs := parse(t, w, tm(100), w.stamp(ins, 1, 200), tm(300), w.stamp(up, 1, 400), tm(500), w.stamp(partial, 1, 600))
	evs = []*replication.BinlogEvent{evs[0], evs[1], evs[3], evs[5]}
	r := evs[1].Event.(*replication.RowsEvent)
	if r.ColumnBitmap1[0] != 0b1001111 || len(r.Rows) != 1 || r.Rows[0][1] != "ev-1" || r.Rows[0][4] != nil || r.Rows[0][5] != nil ||
		r.Rows[0][6] != "2026-11-30 12:34:56.000" {
		t.Errorf("MINIMAL insert: bitmap %08b, rows %v", r.ColumnBitmap1, r.Rows)
	}
	r = evs[2].Event.(*replication.RowsEvent)
	if evs[2].Header.EventType != replication.UPDATE_ROWS_EVENTv2 || r.ColumnBitmap1[0] != 1 || r.ColumnBitmap2[0] != 1<<5 ||
		len(r.Rows) != 2 || r.Rows[0][0] != int64(5) || !sameJSON(t, `{"seq":2}`, fmt.Sprint(r.Rows[1][5])) {
		t.Errorf("MINIMAL update: %v bitmaps %08b %08b, rows %v", evs[2].Header.EventType, r.ColumnBitmap1, r.ColumnBitmap2, r.Rows)
	}
	r = evs[3].Event.(*replication.RowsEvent)
	if evs[3].Header.EventType != replication.PARTIAL_UPDATE_ROWS_EVENT || len(r.Rows) != 2 || r.Rows[1][1] != "ev-1" ||
		!sameJSON(t, `{"seq":2}`, fmt.Sprint(r.Rows[1][5])) {
		t.Errorf("partial JSON update: %v, rows %v", evs[3].Header.EventType, r.Rows)
	}
}

func TestTaggedGTIDDecodesWithGoMySQL(t *testing.T) {
	w := newWriter("8.4.3", 7, true)
	sid := mustUUID("3e11fa47-71ca-11e1-9e33-c80aa9429562")
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, gno := range []int64{1, 200, 1 << 40} {
		evs := parse(t, w, w.stamp(w.gtidEvent(GTID{SID: sid, Tag: "outbox_batch", GNO: gno}, 2, uint64(at.UnixMicro()), 300, 80403), 1, 100),
			w.stamp(w.previousGTIDsEvent(MustParseSet(sid.String()+":1-3:outbox_batch:1-2")), 1, 200))
		g, ok := evs[0].Event.(*replication.GtidTaggedLogEvent)
		if !ok {
			t.Fatalf("decoded as %T", evs[0].Event)
		}
		if g.GNO != gno || g.Tag.String() != "outbox_batch" || g.ImmediateCommitTimestamp != uint64(at.UnixMicro()) ||
			g.SequenceNumber != 2 || g.LastCommitted != 1 {
			t.Errorf("tagged gtid decoded as gno %d tag %q ts %d seq %d", g.GNO, g.Tag.String(), g.ImmediateCommitTimestamp, g.SequenceNumber)
		}
		if pg := evs[1].Event.(*replication.PreviousGTIDsEvent); pg.GTIDSets != sid.String()+":1-3:outbox_batch:1-2" {
			t.Errorf("previous gtids %q", pg.GTIDSets)
		}
	}
}

func TestPayloadDecodesWithGoMySQL(t *testing.T) {
	w, inner := newWriter("8.0.40", 7, true), newWriter("8.0.40", 7, false)
	tbl := &Table{DB: "app", Name: "outbox", Columns: OutboxColumns, id: 42}
	var rows [][]any
	for i := range 50 {
		rows = append(rows, []any{int64(i), "ev", "alarm", "dev", "T", `{"seq":1}`, time.Now()})
	}
	re, err := inner.writeRowsEvent(tbl, rows, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := w.payloadEvent([]event{inner.stamp(inner.tableMapEvent(tbl, true), 1, 0), inner.stamp(re, 1, 0)}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	evs := parse(t, w, w.stamp(payload, 1, 1000))
	tp := evs[0].Event.(*replication.TransactionPayloadEvent)
	if len(tp.Events) != 2 || tp.CompressionType != 0 {
		t.Fatalf("payload holds %d events, compression %d", len(tp.Events), tp.CompressionType)
	}
	if r := tp.Events[1].Event.(*replication.RowsEvent); len(r.Rows) != 50 {
		t.Fatalf("inner rows %d", len(r.Rows))
	}
}

func fde(w *writer) []byte {
	return newFDE(w)
}
