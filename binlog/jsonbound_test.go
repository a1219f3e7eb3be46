package binlog

import (
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

var jsonTexts = []string{
	`{}`, `[]`, `null`, `true`, `"text"`, `-12`, `70000`, `1.5`, `18446744073709551615`,
	`{"deviceId":"dev-1","level":"CRITICAL","temperature":80.5,"seq":7,"tags":["a","b",{"x":null}]}`,
	`[[1,[2,[3,[4]]]],{"a":{"b":{"c":"\u00e9\n"}}}]`,
	`{"big":"` + strings.Repeat("y", 70000) + `","n":[` + strings.Repeat("1,", 20000) + `1]}`, // the large format
}

func encodeJSON(t testing.TB, text string) []byte {
	t.Helper()
	b, err := mysqlsource.EncodeJSON(text)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheckJSONAcceptsWhatMySQLWrites(t *testing.T) {
	for _, text := range jsonTexts {
		if err := checkJSON(encodeJSON(t, text)); err != nil {
			t.Errorf("%.60s: %v", text, err)
		}
	}
	if err := checkJSON(mysqlsource.NestedArraysJSON(maxJSONDepth)); err != nil {
		t.Errorf("%d nested arrays (MySQL's limit): %v", maxJSONDepth, err)
	}
}

func TestCheckJSONRefusesWhatWouldOverflowOrInflateTheDecoder(t *testing.T) {
	for name, tt := range map[string]struct {
		doc  []byte
		want error
	}{
		"one level past MySQL's limit": {mysqlsource.NestedArraysJSON(maxJSONDepth + 1), errJSONDepth},
		"a million levels":             {mysqlsource.NestedArraysJSON(1_000_000), errJSONDepth},
		"an array inside itself":       {mysqlsource.SelfNestedJSON(), errJSONShared}, // each pass claims its header again
		"one string shared 1000 times": {mysqlsource.SharedStringJSON(1000, 1000), errJSONShared},
	} {
		if err := checkJSON(tt.doc); !errors.Is(err, tt.want) {
			t.Errorf("%s: %v, want %v", name, err, tt.want)
		}
	}
	// Every truncation of a valid document is refused (or is a complete
	// value), never a panic.
	doc := encodeJSON(t, jsonTexts[10])
	for n := 1; n < len(doc); n++ {
		if err := checkJSON(doc[:n]); err == nil {
			t.Errorf("the first %d of %d bytes passed", n, len(doc))
		}
	}
}

// jsonTable is a table map of a.outbox (id INT, doc JSON) with its column
// names, as MySQL 8 writes it.
func jsonTableMap(id uint64) []byte {
	b := binary.LittleEndian.AppendUint64(nil, id)[:6]
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = append(b, 1, 'a', 0, 6)
	b = append(b, "outbox"...)
	b = append(b, 0, 2, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_JSON)
	b = append(b, 1, 4) // metadata: JSON length bytes
	b = append(b, 0b10) // nullable: doc
	names := []byte{2, 'i', 'd', 3, 'd', 'o', 'c'}
	b = append(b, replication.TABLE_MAP_OPT_META_COLUMN_NAME, byte(len(names)))
	return append(b, names...)
}

// jsonRows is a rows event body (v2) of table id with one row per doc
// (nil: NULL); an update's images are the doc twice.
func jsonRows(id uint64, update bool, docs ...[]byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, id)[:6]
	b = binary.LittleEndian.AppendUint16(b, replication.RowsEventStmtEndFlag)
	b = binary.LittleEndian.AppendUint16(b, 2)
	b = append(b, 2, 0b11)
	if update {
		b = append(b, 0b11)
	}
	for i, d := range docs {
		for range map[bool]int{false: 1, true: 2}[update] {
			if d == nil {
				b = append(b, 0b10)
				b = binary.LittleEndian.AppendUint32(b, uint32(i))
				continue
			}
			b = append(b, 0)
			b = binary.LittleEndian.AppendUint32(b, uint32(i))
			b = binary.LittleEndian.AppendUint32(b, uint32(len(d)))
			b = append(b, d...)
		}
	}
	return b
}

// decodeWith parses the table map and rows event with a parser whose rows
// decoder is decode (nil: go-mysql's own).
func decodeWith(t *testing.T, decode func(*replication.RowsEvent, []byte) error, rowsType replication.EventType, body []byte) *replication.RowsEvent {
	t.Helper()
	e := newEncoder(t, mysql.MySQLFlavor)
	if decode != nil {
		e.p.SetRowsEventDecodeFunc(decode)
	} else {
		e.p.SetRowsEventDecodeFunc(nil)
	}
	e.p.SetRenderJSONAsMySQLText(true)
	e.decode(e.raw(replication.TABLE_MAP_EVENT, jsonTableMap(7)))
	ev, err := e.p.Parse(e.raw(rowsType, body))
	if err != nil {
		t.Fatal(err)
	}
	return ev.Event.(*replication.RowsEvent)
}

func readerOf(flavor string) *Reader {
	return NewReader(Config{Tables: []string{testTable}}, &Server{Flavor: flavor, ColumnNames: true}, nil, nil)
}

func unbounded() (int64, string) { return maxPacketCap, "test" }

// The reader's JSON values are go-mysql's own rendering, for every
// document MySQL writes; a document past the bounds is an Undecoded in its
// row, the other rows decoded.
func TestDecodeJSONRowsRendersAsGoMySQLAndRefusesOnlyTheBadDocument(t *testing.T) {
	r := readerOf(mysql.MySQLFlavor)
	reader := func(e *replication.RowsEvent, data []byte) error { return rowsDecoder(r.captured, unbounded)(e, data) }
	var docs [][]byte
	for _, text := range jsonTexts {
		docs = append(docs, encodeJSON(t, text))
	}
	docs = append(docs, nil, []byte{})
	body := jsonRows(7, false, docs...)
	want := decodeWith(t, nil, replication.WRITE_ROWS_EVENTv2, body)
	got := decodeWith(t, reader, replication.WRITE_ROWS_EVENTv2, body)
	if !reflect.DeepEqual(want.Rows, got.Rows) {
		t.Fatalf("rows differ\n go-mysql: %.300v\n   reader: %.300v", want.Rows, got.Rows)
	}

	bad := jsonRows(7, false, docs[0], mysqlsource.NestedArraysJSON(1000), mysqlsource.SelfNestedJSON(), docs[1])
	got = decodeWith(t, reader, replication.WRITE_ROWS_EVENTv2, bad)
	if len(got.Rows) != 4 || got.Rows[0][1] != want.Rows[0][1] || got.Rows[3][1] != want.Rows[1][1] {
		t.Fatalf("the good rows around the bad ones: %v", got.Rows)
	}
	for i, why := range map[int]string{1: "deeper than 100", 2: "claim more bytes than it has"} {
		u, ok := got.Rows[i][1].(Undecoded)
		if !ok || !strings.Contains(u.Why, why) {
			t.Errorf("row %d: %#v, want an Undecoded saying %q", i, got.Rows[i][1], why)
		}
	}
	if marks := undecodedRows(got.Rows, []string{"id", "doc"}); len(marks) != 4 || marks[0] != "" || !strings.HasPrefix(marks[1], `column "doc": JSON document nested deeper`) {
		t.Errorf("undecoded rows %q", marks)
	}

	// UPDATE rows (before and after images) are decoded alike: the digest
	// of a transaction covers them (digest.go).
	upd := jsonRows(7, true, docs[9], docs[10], mysqlsource.SelfNestedJSON())
	want = decodeWith(t, nil, replication.UPDATE_ROWS_EVENTv2, jsonRows(7, true, docs[9], docs[10]))
	got = decodeWith(t, reader, replication.UPDATE_ROWS_EVENTv2, upd)
	if len(got.Rows) != 6 || !reflect.DeepEqual(got.Rows[:4], want.Rows) {
		t.Fatalf("update rows differ\n go-mysql: %.300v\n   reader: %.300v", want.Rows, got.Rows)
	}
	for _, i := range []int{4, 5} {
		if _, ok := got.Rows[i][1].(Undecoded); !ok {
			t.Errorf("update image %d: %#v, want an Undecoded", i, got.Rows[i][1])
		}
	}
	// An UPDATE's documents render in pairs of images: an odd count too.
	if texts, err := renderJSON(got, [][]byte{docs[9]}); err != nil || len(texts) != 1 || texts[0] != want.Rows[0][1] {
		t.Fatalf("one document of an update: %v %v, want %v", texts, err, want.Rows[0][1])
	}
	// A partial JSON update is left undecoded (convert refuses it).
	got = decodeWith(t, reader, replication.PARTIAL_UPDATE_ROWS_EVENT, jsonRows(7, true, docs[0]))
	if len(got.Rows) != 0 {
		t.Fatalf("partial update decoded: %v", got.Rows)
	}
}

// The JSON bound's cost: 200 outbox rows' JSON payloads decoded by the
// reader (raw bytes, walked, then rendered by go-mysql) against go-mysql
// alone.
func BenchmarkDecodeJSONRows(b *testing.B) {
	doc := encodeJSON(b, jsonTexts[9])
	docs := make([][]byte, 200)
	for i := range docs {
		docs[i] = doc
	}
	body := jsonRows(7, false, docs...)
	r := readerOf(mysql.MySQLFlavor)
	for name, decode := range map[string]func(*replication.RowsEvent, []byte) error{
		"go-mysql": nil,
		"reader":   func(e *replication.RowsEvent, data []byte) error { return rowsDecoder(r.captured, unbounded)(e, data) },
	} {
		b.Run(name, func(b *testing.B) {
			e := newEncoder(b, mysql.MySQLFlavor)
			e.p.SetRowsEventDecodeFunc(decode)
			e.p.SetRenderJSONAsMySQLText(true)
			raw := e.raw(replication.WRITE_ROWS_EVENTv2, body)
			for b.Loop() {
				e.decode(e.raw(replication.TABLE_MAP_EVENT, jsonTableMap(7)))
				if _, err := e.p.Parse(raw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
