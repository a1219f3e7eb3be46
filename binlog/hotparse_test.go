package binlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/outbox-relay/outbox-relay/schema"
)

// The stream parser's hot path (hotparse.go) against the parse it
// replaces: go-mysql's parser with the reader's rows decoder (rowsDecoder,
// held to go-mysql's own decoding by rowdecode_differential_test.go), on
// recorded binlogs, on random tables and rows events of every column type
// the fast decoder knows and of others, and on the fuzzer's rows events.

var bound64M = func() (int64, string) { return 64 << 20, "the test's bound" }

// referenceParser is the stream's parser without its hot path: every
// event through go-mysql's parser, rows by rowsDecoder.
func referenceParser(flavor string, start mysql.GTIDSet, captured func(schema, table []byte) bool) *eventParser {
	ep := newEventParser(flavor, start, bound64M, captured)
	ep.maps = nil
	ep.p = ep.newParser(rowsDecoder(captured, bound64M))
	return ep
}

// rawSyncer turns an event's bytes into what go-mysql's syncer hands on in
// raw mode.
type rawSyncer struct{ p *replication.BinlogParser }

func newRawSyncer(flavor string) *rawSyncer {
	p := replication.NewBinlogParser()
	p.SetRawMode(true)
	p.SetFlavor(flavor)
	return &rawSyncer{p: p}
}

func (s *rawSyncer) event(tb testing.TB, raw []byte) *replication.BinlogEvent {
	tb.Helper()
	ev, err := s.p.Parse(bytes.Clone(raw))
	if err != nil {
		tb.Fatalf("raw parse: %v", err)
	}
	return ev
}

// parsed is what a parser made of one event, comparable.
func parsed(ev *replication.BinlogEvent, err error) string {
	if err != nil {
		return "error"
	}
	switch e := ev.Event.(type) {
	case *replication.RowsEvent:
		if e.Rows == nil {
			// Not decoded (a table not captured, a shape the reader
			// refuses later): what the reader reads of it.
			return fmt.Sprintf("rows of table %d flags %d undecoded", e.TableID, e.Flags)
		}
		return fmt.Sprintf("rows of %s.%s (%d) flags %d cols %d bitmaps %x %x extra %d %x %d %d rows %s skipped %v",
			e.Table.Schema, e.Table.Table, e.TableID, e.Flags, e.ColumnCount, e.ColumnBitmap1, e.ColumnBitmap2,
			e.NdbFormat, e.NdbData, e.PartitionId, e.SourcePartitionId, dump(e.Rows), e.SkippedColumns)
	case *uncapturedRowsEvent:
		return fmt.Sprintf("rows of table %d flags %d undecoded", e.TableID, e.Flags)
	}
	var b strings.Builder
	ev.Event.Dump(&b)
	return fmt.Sprintf("%T %s", ev.Event, b.String())
}

// TestHotPathReadsRecordedBinlogsAsGoMySQL: every event of the binlogs
// MariaDB 10.11 wrote decodes to the same event through the hot path as
// through go-mysql's parser, and the reader makes the same Events of
// them (rows, commits with their GTID sets and digests, DDL notes).
func TestHotPathReadsRecordedBinlogsAsGoMySQL(t *testing.T) {
	for _, c := range []struct {
		path   string
		tables []string
	}{{shapesBinlog, []string{"a.outbox", "a.alarm"}}, {outboxBinlog, []string{"b.outbox"}}} {
		t.Run(c.path, func(t *testing.T) {
			newReader := func() *Reader {
				return NewReader(Config{Tables: c.tables}, &Server{Flavor: mysql.MariaDBFlavor, ColumnNames: true},
					schema.New(c.tables, nil, nil), nil)
			}
			hotR, refR := newReader(), newReader()
			start, _ := ParseSet(mysql.MariaDBFlavor, "")
			hot := newEventParser(mysql.MariaDBFlavor, start, bound64M, hotR.captured)
			ref := referenceParser(mysql.MariaDBFlavor, start.Clone(), refR.captured)
			hotSt := &streamState{tableCache: map[uint64]*cachedTable{}, frame: hotR.newFramer()}
			refSt := &streamState{tableCache: map[uint64]*cachedTable{}, frame: refR.newFramer()}
			syncer := newRawSyncer(mysql.MariaDBFlavor)
			var hotBatch, refBatch []Event
			decoded := 0
			for i, ev := range rawEvents(t, c.path) {
				if ev.Header.EventType == replication.MARIADB_ANNOTATE_ROWS_EVENT {
					continue // not sent to the relay
				}
				h, herr := hot.parse(syncer.event(t, ev.RawData))
				gotHot := parsed(h, herr)
				if herr == nil {
					if _, rows := h.Event.(*replication.RowsEvent); rows {
						decoded++
					}
					hotBatch, herr = hotR.step(hotSt, h, hotBatch)
				}
				r, rerr := ref.parse(syncer.event(t, ev.RawData))
				gotRef := parsed(r, rerr)
				if rerr == nil {
					refBatch, rerr = refR.step(refSt, r, refBatch)
				}
				if gotHot != gotRef {
					t.Fatalf("event %d (%s):\n hot path: %s\n go-mysql: %s", i, ev.Header.EventType, gotHot, gotRef)
				}
				if (herr == nil) != (rerr == nil) {
					t.Fatalf("event %d (%s): the reader's error %v through the hot path, %v through go-mysql's", i, ev.Header.EventType, herr, rerr)
				}
				if herr != nil {
					break // the relay stops here either way
				}
			}
			if decoded == 0 {
				t.Fatal("no rows event of a captured table decoded")
			}
			got, want := renderAll(hotBatch), renderAll(refBatch)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("the reader's events differ\n hot path: %q\n go-mysql: %q", got, want)
			}
			digests := 0
			for i := range hotBatch {
				if !reflect.DeepEqual(hotBatch[i].Digest, refBatch[i].Digest) {
					t.Fatalf("event %d: digest %+v through the hot path, %+v through go-mysql's", i, hotBatch[i].Digest, refBatch[i].Digest)
				}
				if hotBatch[i].Digest != nil {
					digests++
				}
			}
			if digests == 0 {
				t.Fatal("no transaction with a digest")
			}
		})
	}
}

// streamRowsOutcome parses fde, table maps and one rows event (each a
// whole event's bytes) with parser ep, as the syncer hands them on, and
// renders the rows event; then, unless that failed, the table maps and the
// rows event once more (the hot path decodes a rows event of a type it has
// met into a copy of its template) and renders it too.
func streamRowsOutcome(t testing.TB, ep *eventParser, fde []byte, before [][]byte, rows []byte) string {
	t.Helper()
	syncer := newRawSyncer(mysql.MariaDBFlavor)
	if _, err := ep.parse(syncer.event(t, fde)); err != nil {
		return "setup: error"
	}
	var out []string
	for range 2 {
		for _, raw := range before {
			if _, err := ep.parse(syncer.event(t, raw)); err != nil {
				return strings.Join(append(out, "setup: error"), " / then ")
			}
		}
		ev, err := ep.parse(syncer.event(t, rows))
		if out = append(out, parsed(ev, err)); err != nil {
			break
		}
	}
	return strings.Join(out, " / then ")
}

func outboxOnly(db, table []byte) bool { return string(db) == "app" && string(table) == "outbox" }

// TestHotPathDecodesRandomRowsEventsAsGoMySQL: random tables of the
// column types the fast decoder knows and others, and rows events of
// every type and shape (column counts off the table's, partial bitmaps, v2
// extra data of NDB and partitions, well formed or not, images damaged
// now and then): the hot path decodes each to what go-mysql's parser with
// the reader's rows decoder makes of it, errors alike.
func TestHotPathDecodesRandomRowsEventsAsGoMySQL(t *testing.T) {
	fde := synthFDE(t)
	rng := rand.New(rand.NewPCG(differentialSeed(46), 7))
	types := []replication.EventType{replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
		replication.UPDATE_ROWS_EVENTv0, replication.UPDATE_ROWS_EVENTv1, replication.UPDATE_ROWS_EVENTv2,
		replication.DELETE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2, replication.PARTIAL_UPDATE_ROWS_EVENT,
		replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1}
	decoded := 0
	for iter := range differentialIters() / 4 {
		ncols := 1 + rng.IntN(10)
		cols := make([]synthCol, ncols)
		for i := range cols {
			cols[i] = randomColumn(rng)
		}
		tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, []byte{byte(rng.IntN(256)), byte(rng.IntN(256))}))
		tp := types[rng.IntN(len(types))]
		v2 := tp == replication.WRITE_ROWS_EVENTv2 || tp == replication.UPDATE_ROWS_EVENTv2 || tp == replication.DELETE_ROWS_EVENTv2 ||
			tp == replication.PARTIAL_UPDATE_ROWS_EVENT
		rcols := ncols
		if rng.IntN(5) == 0 {
			rcols = max(1, ncols+rng.IntN(5)-2)
		}
		bitmap := bytes.Repeat([]byte{0xff}, (rcols+7)/8)
		if rng.IntN(4) == 0 {
			bitmap[rng.IntN(len(bitmap))] &^= 1 << rng.IntN(8)
			bitmap[0] |= 1
		}
		var extra []byte
		if v2 {
			extra = [][]byte{nil, {0, 4, 1, 0xaa, 0xbb}, {1, 3, 0}, {1, 3, 0, 4, 0}, {0, 1}, {7}}[rng.IntN(6)]
		}
		use := cols
		if rcols < ncols {
			use = cols[:rcols]
		}
		images := randomImages(rng, use)
		body := synthRowsShaped(v2, extra, rcols, bitmap, images)
		if tp == replication.UPDATE_ROWS_EVENTv1 || tp == replication.UPDATE_ROWS_EVENTv2 || tp == replication.PARTIAL_UPDATE_ROWS_EVENT {
			body = synthRowsShaped(v2, extra, rcols, append(bytes.Clone(bitmap), bitmap...), append(images, images...))
		}
		if rng.IntN(10) == 0 { // a header cut short or an extra-data length off
			cut := 8 + rng.IntN(8)
			if rng.IntN(2) == 0 && v2 {
				binary.LittleEndian.PutUint16(body[8:], uint16(rng.IntN(8)))
			} else if cut < len(body) {
				body = body[:cut]
			}
		}
		rows := synthEvent(tp, body)
		want := streamRowsOutcome(t, referenceParser(mysql.MariaDBFlavor, nil, outboxOnly), fde, [][]byte{tm}, rows)
		got := streamRowsOutcome(t, newEventParser(mysql.MariaDBFlavor, nil, bound64M, outboxOnly), fde, [][]byte{tm}, rows)
		if rowsHeaderEnd(body, tp) > len(body) {
			want = "error" // go-mysql reads the header on into the checksum
		}
		if got != want {
			t.Fatalf("iteration %d, type %v, columns %v, rows columns %d\nrows event % x\n hot path: %s\n go-mysql: %s", iter, tp, cols, rcols, rows, got, want)
		}
		if strings.Contains(got, " rows [") || strings.HasPrefix(got, "rows of app.") {
			decoded++
		}
	}
	if decoded == 0 {
		t.Fatal("no rows event decoded")
	}
}

// rowsHeaderEnd is where the header of a rows event of type tp whose body
// (6-byte table id on) is body ends, as the format gives it: table id,
// flags, (v2) the extra data's length (counting itself, as an uint16) and
// data, the column count, one column bitmap (two for an update's images).
// Past the body's end, go-mysql reads the header on into the event's
// checksum (it slices within the buffer's capacity); the reader refuses it.
func rowsHeaderEnd(body []byte, tp replication.EventType) int {
	pos := 8
	switch tp {
	case replication.WRITE_ROWS_EVENTv2, replication.UPDATE_ROWS_EVENTv2, replication.DELETE_ROWS_EVENTv2, replication.PARTIAL_UPDATE_ROWS_EVENT:
		if len(body) < pos+2 {
			return pos + 2
		}
		if end := extraInfoEnd(body, pos, tp); end > len(body) {
			return end
		}
		pos += 2 + int(uint16(binary.LittleEndian.Uint16(body[pos:])-2))
	}
	if pos >= len(body) {
		return pos
	}
	n, size := uint64(body[pos]), 1
	switch body[pos] {
	case 0xfc, 0xfd, 0xfe:
		size = map[byte]int{0xfc: 3, 0xfd: 4, 0xfe: 9}[body[pos]]
		if len(body) < pos+size {
			return pos + size
		}
		n = 0
		for i := size - 1; i >= 1; i-- {
			n = n<<8 | uint64(body[pos+i])
		}
	case 0xfb:
		n = 0
	}
	pos += size
	width := (n + 7) / 8
	if n > uint64(len(body))*8 {
		return len(body) + 1
	}
	if hasAfterImage(tp) {
		width *= 2
	}
	return pos + int(width)
}

// extraInfoEnd is where the extra row info of a v2 rows event ends whose
// extra data's length is at body[pos:] (0 without one): NDB's (type 0) a
// length counting itself and a format byte, then the data; a partition's
// (type 1) its id, and an update's source partition id too. go-mysql reads
// it on past the event (within its buffer), where the server's format
// (MySQL's Rows_event extra_row_info) has no such bytes: the reader refuses
// it.
func extraInfoEnd(body []byte, pos int, tp replication.EventType) int {
	if binary.LittleEndian.Uint16(body[pos:]) <= 2 {
		return 0
	}
	start := pos + 2
	if start >= len(body) {
		return start + 1
	}
	switch body[start] {
	case replication.ENUM_EXTRA_ROW_INFO_TYPECODE_NDB:
		if start+1 >= len(body) {
			return start + 3
		}
		return start + max(3, int(body[start+1])+1)
	case replication.ENUM_EXTRA_ROW_INFO_TYPECODE_PARTITION:
		if hasAfterImage(tp) {
			return start + 5
		}
		return start + 3
	}
	return 0
}

// FuzzHotPathRowsEvent: the fuzzer's bytes as a rows event (after its
// table id) of a recorded table map: the hot path decodes it as go-mysql's
// parser with the reader's rows decoder does, errors alike.
func FuzzHotPathRowsEvent(f *testing.F) {
	raw := rawEvents(f, outboxBinlog)
	var fde, tm []byte
	for _, ev := range raw {
		switch e := ev.Event.(type) {
		case *replication.FormatDescriptionEvent:
			fde = ev.RawData
		case *replication.TableMapEvent:
			if string(e.Table) == "outbox" {
				tm = ev.RawData
			}
		case *replication.RowsEvent:
			if string(e.Table.Table) == "outbox" {
				f.Add(uint8(ev.Header.EventType), bytes.Clone(ev.RawData[replication.EventHeaderSize+6:len(ev.RawData)-replication.BinlogChecksumLength]))
			}
		}
	}
	captured := func(db, table []byte) bool { return string(db) == "b" && string(table) == "outbox" }
	f.Fuzz(func(t *testing.T, typ uint8, rest []byte) {
		tp := replication.EventType(typ)
		if !rowsEventTypes[tp] {
			tp = replication.WRITE_ROWS_EVENTv1
		}
		id := binary.LittleEndian.AppendUint64(nil, mysql.FixedLengthInt(tm[replication.EventHeaderSize:replication.EventHeaderSize+6]))[:6]
		body := append(id, rest...)
		rows := synthEvent(tp, body)
		want := "error" // go-mysql reads the header on into the checksum
		if rowsHeaderEnd(body, tp) <= len(body) {
			if protect(func() error {
				want = streamRowsOutcome(t, referenceParser(mysql.MariaDBFlavor, nil, captured), fde, [][]byte{tm}, rows)
				return nil
			}) != nil {
				t.Skip("go-mysql's parser panics past its own recover")
			}
		}
		got := streamRowsOutcome(t, newEventParser(mysql.MariaDBFlavor, nil, bound64M, captured), fde, [][]byte{tm}, rows)
		if got != want {
			t.Fatalf("type %v, rows event % x\n hot path: %s\n go-mysql: %s", tp, rows, got, want)
		}
	})
}

// TestHotPathKeepsARepeatedTableMap: a table map that repeats the last of
// its table id byte for byte is the same TableMapEvent (decoded once);
// one of the same id with other bytes (a column added) is decoded anew,
// and the rows after it read by it.
func TestHotPathKeepsARepeatedTableMap(t *testing.T) {
	_, parse := hotStream(t, outboxOnly)
	one := []synthCol{{mysql.MYSQL_TYPE_LONG, nil}}
	two := append(one, synthCol{mysql.MYSQL_TYPE_VARCHAR, binary.LittleEndian.AppendUint16(nil, 20)})
	int7 := []byte{0, 7, 0, 0, 0}
	first := parse(synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(one, nil))).Event
	parse(synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 1, int7)))
	again := parse(synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(one, nil))).Event
	if first != again {
		t.Fatal("a table map that repeats the last of its id was decoded again")
	}
	if got := dump(parse(synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 1, int7))).Event.(*replication.RowsEvent).Rows); got != "int32(7) | " {
		t.Fatalf("rows after the repeated table map: %s", got)
	}
	changed := parse(synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(two, nil))).Event
	if changed == first || changed.(*replication.TableMapEvent).ColumnCount != 2 {
		t.Fatal("a table map of the same id with another column was taken for the one before it")
	}
	rows := parse(synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 2, []byte{0, 7, 0, 0, 0, 2, 'h', 'i'}))).Event.(*replication.RowsEvent)
	if got := dump(rows.Rows); got != `int32(7) string("hi") | ` {
		t.Fatalf("rows after the changed table map: %s", got)
	}
}

// TestHotPathRefusesRowsOfATableItsStatementDidNotMap: a rows event names
// its table by the id of a table map of its own statement; after the
// statement's end (STMT_END) a rows event of the same id without a table
// map of its own is refused, as go-mysql's parser refuses it, though the
// hot path still knows the table map of that id: for a captured table and
// for one that is not.
func TestHotPathRefusesRowsOfATableItsStatementDidNotMap(t *testing.T) {
	fde := synthFDE(t)
	one := []synthCol{{mysql.MYSQL_TYPE_LONG, nil}}
	tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(one, nil))
	rows := synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 1, []byte{0, 7, 0, 0, 0}))
	for name, captured := range map[string]func(db, table []byte) bool{
		"captured": outboxOnly, "not captured": func(_, _ []byte) bool { return false },
	} {
		t.Run(name, func(t *testing.T) {
			for _, ep := range []*eventParser{referenceParser(mysql.MariaDBFlavor, nil, captured), newEventParser(mysql.MariaDBFlavor, nil, bound64M, captured)} {
				if got := streamRowsOutcome(t, ep, fde, [][]byte{tm, rows}, rows); !strings.HasSuffix(got, "error") {
					t.Fatalf("hot path %v: a rows event of a table id its statement did not map: %s", ep.maps != nil, got)
				}
			}
		})
	}
}

// TestHotPathRepeatedValuesDecodeAlike: values that repeat the one before
// them in their column (lastValues), within a rows event and from one to
// the next, and values that change and change back, decode as go-mysql
// decodes them.
func TestHotPathRepeatedValuesDecodeAlike(t *testing.T) {
	fde := synthFDE(t)
	cols := []synthCol{{mysql.MYSQL_TYPE_LONG, nil}, {mysql.MYSQL_TYPE_VARCHAR, binary.LittleEndian.AppendUint16(nil, 20)},
		{mysql.MYSQL_TYPE_DATETIME2, []byte{3}}}
	tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, nil))
	row := func(id int, v string, dt []byte) []byte {
		b := binary.LittleEndian.AppendUint32([]byte{0}, uint32(id))
		return append(append(append(b, byte(len(v))), v...), dt...)
	}
	t1 := []byte{0x99, 0xb8, 0x3c, 0xb1, 0x2d, 0x01, 0x2c} // 2026-01-...
	t2 := []byte{0x99, 0xb8, 0x3c, 0xb1, 0x2d, 0x01, 0x2d}
	events := [][]byte{
		synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 3, slices.Concat(row(1, "a", t1), row(2, "a", t1), row(3, "b", t1)))),
		synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 3, slices.Concat(row(4, "a", t1), row(5, "a", t2), row(6, "", t2)))),
		synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 3, slices.Concat(row(7, "", t2), row(8, "a", t1)))),
	}
	hot := newEventParser(mysql.MariaDBFlavor, nil, bound64M, outboxOnly)
	ref := referenceParser(mysql.MariaDBFlavor, nil, outboxOnly)
	hotSyncer, refSyncer := newRawSyncer(mysql.MariaDBFlavor), newRawSyncer(mysql.MariaDBFlavor)
	for _, raw := range [][]byte{fde, tm} {
		if _, err := hot.parse(hotSyncer.event(t, raw)); err != nil {
			t.Fatal(err)
		}
		if _, err := ref.parse(refSyncer.event(t, raw)); err != nil {
			t.Fatal(err)
		}
	}
	for i, raw := range events {
		if i > 0 { // each rows event ends its statement: its table map again
			for _, p := range []struct {
				ep *eventParser
				s  *rawSyncer
			}{{hot, hotSyncer}, {ref, refSyncer}} {
				if _, err := p.ep.parse(p.s.event(t, tm)); err != nil {
					t.Fatal(err)
				}
			}
		}
		h, herr := hot.parse(hotSyncer.event(t, raw))
		r, rerr := ref.parse(refSyncer.event(t, raw))
		if got, want := parsed(h, herr), parsed(r, rerr); got != want || herr != nil {
			t.Fatalf("rows event %d:\n hot path: %s\n go-mysql: %s", i, got, want)
		}
	}
}

// TestHotPathStatementOfManyTables: a statement that maps more tables than
// the hot path looks up one by one (stmtScan), rows events of several of
// them, one of the captured table among them, then a rows event of an id
// the next statement did not map: as go-mysql's parser decodes and refuses
// them.
func TestHotPathStatementOfManyTables(t *testing.T) {
	fde := synthFDE(t)
	cols := []synthCol{{mysql.MYSQL_TYPE_LONG, nil}}
	tableMap := func(id byte, table string) []byte {
		b := []byte{id, 0, 0, 0, 0, 0, 1, 0}
		b = append(b, 3, 'a', 'p', 'p', 0, byte(len(table)))
		b = append(append(b, table...), 0)
		tm := synthTableMap(cols, nil)
		return synthEvent(replication.TABLE_MAP_EVENT, append(b, tm[8+5+8:]...))
	}
	rows := func(id byte, end bool) []byte {
		b := synthRows(false, 1, []byte{0, id, 0, 0, 0})
		b[0], b[6] = id, 0
		if end {
			b[6] = 1
		}
		return synthEvent(replication.WRITE_ROWS_EVENTv1, b)
	}
	var stream [][]byte
	for id := byte(100); id < 100+3*stmtScan; id++ {
		name := "other" + strconv.Itoa(int(id))
		if id == 100+2*stmtScan {
			name = "outbox"
		}
		stream = append(stream, tableMap(id, name))
	}
	stream = append(stream, rows(101, false), rows(100+2*stmtScan, false), rows(100+3*stmtScan-1, true), rows(100+2*stmtScan, true))
	hot := newEventParser(mysql.MariaDBFlavor, nil, bound64M, outboxOnly)
	ref := referenceParser(mysql.MariaDBFlavor, nil, outboxOnly)
	hotSyncer, refSyncer := newRawSyncer(mysql.MariaDBFlavor), newRawSyncer(mysql.MariaDBFlavor)
	decoded := 0
	for i, raw := range append([][]byte{fde}, stream...) {
		h, herr := hot.parse(hotSyncer.event(t, raw))
		r, rerr := ref.parse(refSyncer.event(t, raw))
		got, want := parsed(h, herr), parsed(r, rerr)
		if got != want {
			t.Fatalf("event %d:\n hot path: %s\n go-mysql: %s", i, got, want)
		}
		if strings.HasPrefix(got, "rows of app.outbox") {
			decoded++
		}
		if i == len(stream) && herr == nil {
			t.Fatal("a rows event of a table the statement did not map was decoded")
		}
	}
	if decoded != 1 {
		t.Fatalf("%d rows events of the captured table decoded, want 1", decoded)
	}
}
