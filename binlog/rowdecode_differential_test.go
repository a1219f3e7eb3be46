package binlog

// The fast row decoder (decodeInsertRows) against go-mysql: synthetic TABLE_MAP + rows
// events, fed byte for byte to a go-mysql v1.16.0 parser with and without
// the reader's RowsEventDecodeFunc, and compared (rows, Go types, skipped
// columns, error or not, panics).

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// synthFDE is the FORMAT_DESCRIPTION_EVENT of the recorded MariaDB binlog.
func synthFDE(t testing.TB) []byte {
	t.Helper()
	for _, ev := range rawEvents(t.(*testing.T), "testdata/mariadb-10.11-shapes.binlog") {
		if ev.Header.EventType == replication.FORMAT_DESCRIPTION_EVENT {
			return ev.RawData
		}
	}
	t.Fatal("no FDE")
	return nil
}

// synthEvent frames body as a binlog event of type tp, with a CRC32 trailer.
func synthEvent(tp replication.EventType, body []byte) []byte {
	size := replication.EventHeaderSize + len(body) + replication.BinlogChecksumLength
	b := make([]byte, 0, size)
	b = binary.LittleEndian.AppendUint32(b, 1700000000) // timestamp
	b = append(b, byte(tp))
	b = binary.LittleEndian.AppendUint32(b, 1) // server id
	b = binary.LittleEndian.AppendUint32(b, uint32(size))
	b = binary.LittleEndian.AppendUint32(b, 0) // log pos
	b = binary.LittleEndian.AppendUint16(b, 0) // flags
	b = append(b, body...)
	return binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func lenenc(b []byte, n uint64) []byte {
	switch {
	case n < 251:
		return append(b, byte(n))
	case n < 1<<16:
		return binary.LittleEndian.AppendUint16(append(b, 0xfc), uint16(n))
	case n < 1<<24:
		return append(b, 0xfd, byte(n), byte(n>>8), byte(n>>16))
	}
	return binary.LittleEndian.AppendUint64(append(b, 0xfe), n)
}

type synthCol struct {
	tp   byte
	meta []byte // the table map's metadata bytes for the column
}

// synthTableMap is a TABLE_MAP_EVENT body for table id 77 (app.outbox).
func synthTableMap(cols []synthCol, signedness []byte) []byte {
	b := []byte{77, 0, 0, 0, 0, 0, 1, 0} // table id (6), flags
	b = append(b, 3, 'a', 'p', 'p', 0)
	b = append(b, 6, 'o', 'u', 't', 'b', 'o', 'x', 0)
	b = lenenc(b, uint64(len(cols)))
	var meta []byte
	for _, c := range cols {
		b = append(b, c.tp)
		meta = append(meta, c.meta...)
	}
	b = lenenc(b, uint64(len(meta)))
	b = append(b, meta...)
	b = append(b, bytes.Repeat([]byte{0xff}, (len(cols)+7)/8)...) // nullable
	if signedness != nil {
		b = append(b, 1) // TABLE_MAP_OPT_META_SIGNEDNESS
		b = lenenc(b, uint64(len(signedness)))
		b = append(b, signedness...)
	}
	return b
}

// synthRows is a WRITE_ROWS body (v1, or v2 with an empty extra-data
// block) for table 77 with every column present, then images.
func synthRows(v2 bool, cols int, images []byte) []byte {
	b := []byte{77, 0, 0, 0, 0, 0, 1, 0} // table id, flags: STMT_END
	if v2 {
		b = append(b, 2, 0)
	}
	b = lenenc(b, uint64(cols))
	for i := 0; i < (cols+7)/8; i++ {
		n := cols - 8*i
		if n >= 8 {
			b = append(b, 0xff)
		} else {
			b = append(b, byte(1<<n-1))
		}
	}
	return append(b, images...)
}

type synthResult struct {
	rows    [][]any
	skipped [][]int
	err     error
	fast    bool
	panic   any
}

// synthParse parses fde, the table map and the rows event with a fresh
// parser, go-mysql alone or with the reader's decode func.
func synthParse(fde, tm, rows []byte, fast bool, loc *time.Location) (res synthResult) {
	defer func() {
		if r := recover(); r != nil {
			res.panic = r
		}
	}()
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MariaDBFlavor)
	p.SetVerifyChecksum(true)
	p.SetTimestampStringLocation(loc)
	var took bool
	if fast {
		p.SetRowsEventDecodeFunc(func(e *replication.RowsEvent, data []byte) error {
			pos, err := e.DecodeHeader(data)
			if err != nil {
				return err
			}
			if took = decodeInsertRows(e, pos, data); took {
				return nil
			}
			return e.DecodeData(pos, data)
		})
	}
	for _, d := range [][]byte{fde, tm} {
		if _, err := p.Parse(d); err != nil {
			res.err = fmt.Errorf("setup: %w", err)
			return res
		}
	}
	ev, err := p.Parse(rows)
	if err != nil {
		res.err = err
		return res
	}
	re := ev.Event.(*replication.RowsEvent)
	return synthResult{rows: re.Rows, skipped: re.SkippedColumns, fast: took}
}

// randomColumn is a column type with metadata, mostly ones the fast
// decoder recognises, at their edges.
func randomColumn(rng *rand.Rand) synthCol {
	u16 := func(v int) []byte { return binary.LittleEndian.AppendUint16(nil, uint16(v)) }
	pickInt := func(vs ...int) int { return vs[rng.IntN(len(vs))] }
	switch rng.IntN(14) {
	case 0:
		return synthCol{mysql.MYSQL_TYPE_TINY, nil}
	case 1:
		return synthCol{mysql.MYSQL_TYPE_SHORT, nil}
	case 2:
		return synthCol{mysql.MYSQL_TYPE_INT24, nil}
	case 3:
		return synthCol{mysql.MYSQL_TYPE_LONG, nil}
	case 4:
		return synthCol{mysql.MYSQL_TYPE_LONGLONG, nil}
	case 5:
		return synthCol{mysql.MYSQL_TYPE_VARCHAR, u16(pickInt(0, 1, 10, 255, 256, 257, 1020, 65535, rng.IntN(65536)))}
	case 6:
		return synthCol{mysql.MYSQL_TYPE_VAR_STRING, u16(pickInt(0, 1, 255, 256, rng.IntN(65536)))}
	case 7, 8:
		// real type byte, then the length byte, as MySQL packs CHAR/BINARY/ENUM/SET
		rt := byte(pickInt(0xfe, 0xfe, 0xee, 0xde, 0xce, 0xf7, 0xf8, 0xfd, 0x0f, 0x00, rng.IntN(256)))
		return synthCol{mysql.MYSQL_TYPE_STRING, []byte{rt, byte(pickInt(0, 1, 36, 255, rng.IntN(256)))}}
	case 9:
		return synthCol{mysql.MYSQL_TYPE_BLOB, []byte{byte(pickInt(1, 2, 3, 4, 1, 2, 3, 4, 0, 5))}}
	case 10:
		return synthCol{mysql.MYSQL_TYPE_DATETIME2, []byte{byte(pickInt(0, 1, 2, 3, 4, 5, 6, 7))}}
	case 11:
		return synthCol{mysql.MYSQL_TYPE_TIMESTAMP2, []byte{byte(pickInt(0, 1, 2, 3, 4, 5, 6, 7))}}
	case 12:
		ts := []byte{mysql.MYSQL_TYPE_YEAR, mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NULL, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_DATETIME}
		tp := ts[rng.IntN(len(ts))]
		return synthCol{tp, nil}
	default:
		ts := []byte{mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_TIME2}
		tp := ts[rng.IntN(len(ts))]
		return synthCol{tp, []byte{byte(pickInt(1, 2, 3, 4, 8))}}
	}
}

// randomValue is an encoding of a value for c: well formed most of the time.
func randomValue(rng *rand.Rand, c synthCol) []byte {
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	strVal := func(declared int) []byte {
		n := rng.IntN(min(declared, 300) + 1)
		if declared < 256 {
			return append([]byte{byte(n)}, rnd(n)...)
		}
		return append(binary.LittleEndian.AppendUint16(nil, uint16(n)), rnd(n)...)
	}
	switch c.tp {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_YEAR:
		return rnd(1)
	case mysql.MYSQL_TYPE_SHORT:
		return rnd(2)
	case mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_DATE:
		return rnd(3)
	case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_FLOAT, mysql.MYSQL_TYPE_TIMESTAMP:
		return rnd(4)
	case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE, mysql.MYSQL_TYPE_DATETIME:
		return rnd(8)
	case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
		return strVal(int(binary.LittleEndian.Uint16(c.meta)))
	case mysql.MYSQL_TYPE_STRING:
		b0, b1 := c.meta[0], c.meta[1]
		length := int(b1)
		if b0&0x30 != 0x30 {
			length = int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
		}
		return strVal(length)
	case mysql.MYSQL_TYPE_BLOB, mysql.MYSQL_TYPE_GEOMETRY, mysql.MYSQL_TYPE_JSON:
		head := int(c.meta[0])
		if head < 1 || head > 4 {
			return rnd(rng.IntN(5))
		}
		n := rng.IntN(200)
		b := make([]byte, head)
		for i := range head {
			b[i] = byte(n >> (8 * i))
		}
		return append(b, rnd(n)...)
	case mysql.MYSQL_TYPE_DATETIME2:
		dec := int(c.meta[0])
		b := rnd(5 + (dec+1)/2)
		switch rng.IntN(4) {
		case 0:
			b[0], b[1], b[2], b[3], b[4] = 0x80, 0, 0, 0, 0 // zero date
		case 1:
			b[0] = 0x80 | b[0]&0x3f // plausible
		}
		return b
	case mysql.MYSQL_TYPE_TIMESTAMP2:
		dec := int(c.meta[0])
		b := rnd(4 + (dec+1)/2)
		if rng.IntN(4) == 0 {
			b[0], b[1], b[2], b[3] = 0, 0, 0, 0
		}
		return b
	case mysql.MYSQL_TYPE_TIME2:
		dec := int(c.meta[0])
		return rnd(3 + (dec+1)/2)
	}
	return nil
}

func randomImages(rng *rand.Rand, cols []synthCol) []byte {
	var out []byte
	for range 1 + rng.IntN(3) {
		nulls := make([]byte, (len(cols)+7)/8)
		var vals []byte
		for i, c := range cols {
			if rng.IntN(5) == 0 {
				nulls[i>>3] |= 1 << (i & 7)
				continue
			}
			vals = append(vals, randomValue(rng, c)...)
		}
		out = append(out, nulls...)
		out = append(out, vals...)
	}
	switch rng.IntN(8) { // damage now and then
	case 0:
		if len(out) > 0 {
			out = out[:rng.IntN(len(out))]
		}
	case 1:
		if len(out) > 0 {
			out[rng.IntN(len(out))] = byte(rng.IntN(256))
		}
	case 2:
		out = append(out, byte(rng.IntN(256)))
	}
	return out
}

func sameResult(a, b synthResult) bool {
	if (a.err == nil) != (b.err == nil) || (a.panic == nil) != (b.panic == nil) {
		return false
	}
	// dump spells type and value (%T %#v): NaN floats compare equal there.
	return (a.rows == nil) == (b.rows == nil) && len(a.rows) == len(b.rows) &&
		dump(a.rows) == dump(b.rows) && reflect.DeepEqual(a.skipped, b.skipped)
}

// TestDecodeInsertRowsMatchesGoMySQLOnRandomRows: random tables and row images, both paths.
func TestDecodeInsertRowsMatchesGoMySQLOnRandomRows(t *testing.T) {
	t.Parallel() // CPU alone: beside the tests that wait on servers
	fde := synthFDE(t)
	rng := rand.New(rand.NewPCG(differentialSeed(99), 1))
	tokyo := time.FixedZone("JST", 9*3600)
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip(err)
	}
	accepted, declined := 0, 0
	for iter := range differentialIters() {
		ncols := 1 + rng.IntN(10)
		cols := make([]synthCol, ncols)
		for i := range cols {
			cols[i] = randomColumn(rng)
		}
		var sign []byte
		if rng.IntN(3) != 0 {
			sign = []byte{byte(rng.IntN(256)), byte(rng.IntN(256))}
		}
		tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, sign))
		v2 := rng.IntN(2) == 0
		tp := replication.WRITE_ROWS_EVENTv1
		if v2 {
			tp = replication.WRITE_ROWS_EVENTv2
		}
		rows := synthEvent(tp, synthRows(v2, ncols, randomImages(rng, cols)))
		loc := []*time.Location{nil, time.UTC, tokyo, ny}[iter%4]
		want := synthParse(fde, tm, rows, false, loc)
		got := synthParse(fde, tm, rows, true, loc)
		if got.fast {
			accepted++
		} else {
			declined++
		}
		if !sameResult(want, got) {
			t.Fatalf("iteration %d, columns %v, signedness % x, v2 %v, loc %v\nrows event % x\n go-mysql: err %v panic %v rows %s skipped %v\n     fast: (took %v) err %v panic %v rows %s skipped %v",
				iter, cols, sign, v2, loc, rows, want.err, want.panic, dump(want.rows), want.skipped, got.fast, got.err, got.panic, dump(got.rows), got.skipped)
		}
	}
	t.Logf("accepted %d, declined %d", accepted, declined)
}

// synthRowsShaped is a rows body with a chosen column count and bitmap,
// and (v2) an extra-data block.
func synthRowsShaped(v2 bool, extra []byte, cols int, bitmap []byte, images []byte) []byte {
	b := []byte{77, 0, 0, 0, 0, 0, 1, 0}
	if v2 {
		b = binary.LittleEndian.AppendUint16(b, uint16(2+len(extra)))
		b = append(b, extra...)
	}
	b = lenenc(b, uint64(cols))
	b = append(b, bitmap...)
	return append(b, images...)
}

// TestDecodeInsertRowsMatchesGoMySQLOnRowsEventShapes: rows events whose column count differs
// from the table map's, partial bitmaps, v2 extra data (NDB, partition),
// rows v0, updates and deletes.
func TestDecodeInsertRowsMatchesGoMySQLOnRowsEventShapes(t *testing.T) {
	t.Parallel() // CPU alone: beside the tests that wait on servers
	fde := synthFDE(t)
	rng := rand.New(rand.NewPCG(differentialSeed(5), 6))
	accepted := 0
	for iter := range differentialIters() {
		ncols := 1 + rng.IntN(12)
		cols := make([]synthCol, ncols)
		for i := range cols {
			for {
				cols[i] = randomColumn(rng)
				if cols[i].tp != mysql.MYSQL_TYPE_STRING || cols[i].meta[0] == 0xfe {
					break
				}
			}
		}
		tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, []byte{byte(rng.IntN(256)), byte(rng.IntN(256))}))
		rcols := ncols
		switch rng.IntN(4) {
		case 0:
			rcols = max(1, ncols-1-rng.IntN(2)) // never 0: go-mysql loops forever on a 0-column rows event with data (both paths)
		case 1:
			rcols = ncols + 1 + rng.IntN(2)
		}
		bitmap := make([]byte, (rcols+7)/8)
		for i := range bitmap {
			bitmap[i] = 0xff
		}
		if rng.IntN(4) == 0 && len(bitmap) > 0 {
			bitmap[rng.IntN(len(bitmap))] &^= 1 << rng.IntN(8)
			bitmap[0] |= 1 // one column present at least: go-mysql loops forever on a row image of 0 bytes (both paths)
		}
		use := cols
		if rcols < ncols {
			use = cols[:rcols]
		}
		images := randomImages(rng, use)
		if rcols > ncols {
			images = append(images, make([]byte, rng.IntN(20))...)
		}
		types := []replication.EventType{replication.WRITE_ROWS_EVENTv0, replication.WRITE_ROWS_EVENTv1, replication.WRITE_ROWS_EVENTv2,
			replication.UPDATE_ROWS_EVENTv1, replication.DELETE_ROWS_EVENTv2, replication.PARTIAL_UPDATE_ROWS_EVENT}
		tp := types[rng.IntN(len(types))]
		v2 := tp == replication.WRITE_ROWS_EVENTv2 || tp == replication.DELETE_ROWS_EVENTv2 || tp == replication.PARTIAL_UPDATE_ROWS_EVENT
		var extra []byte
		if v2 {
			switch rng.IntN(3) {
			case 1: // NDB: type 0, length, format, data
				extra = []byte{0, 4, 1, 0xaa, 0xbb}
			case 2: // partition
				extra = []byte{1, 3, 0}
			}
		}
		var body []byte
		if tp == replication.UPDATE_ROWS_EVENTv1 || tp == replication.PARTIAL_UPDATE_ROWS_EVENT {
			body = synthRowsShaped(v2, extra, rcols, append(bytes.Clone(bitmap), bitmap...), append(images, images...))
		} else {
			body = synthRowsShaped(v2, extra, rcols, bitmap, images)
		}
		rows := synthEvent(tp, body)
		want := synthParse(fde, tm, rows, false, nil)
		got := synthParse(fde, tm, rows, true, nil)
		if got.fast {
			accepted++
		}
		if !sameResult(want, got) {
			t.Fatalf("iteration %d, type %v, table columns %v, rows columns %d, bitmap % x\nrows event % x\n go-mysql: err %v panic %v rows %s skipped %v\n     fast: (took %v) err %v panic %v rows %s skipped %v",
				iter, tp, cols, rcols, bitmap, rows, want.err, want.panic, dump(want.rows), want.skipped, got.fast, got.err, got.panic, dump(got.rows), got.skipped)
		}
	}
	t.Logf("accepted %d", accepted)
}

// differentialIters and differentialSeed: RELAY_TEST_ROWDECODE_ITERS and RELAY_TEST_ROWDECODE_SEED widen a run.
func differentialIters() int {
	if n, err := strconv.Atoi(os.Getenv("RELAY_TEST_ROWDECODE_ITERS")); err == nil {
		return n
	}
	return 40000
}

func differentialSeed(def uint64) uint64 {
	if n, err := strconv.ParseUint(os.Getenv("RELAY_TEST_ROWDECODE_SEED"), 10, 64); err == nil {
		return n
	}
	return def
}

// TestDecodeInsertRowsCompressedEventDecodesAlike: a MariaDB WRITE_ROWS_COMPRESSED_EVENT_V1
// (zlib row images) must go to go-mysql (the reflect read of
// RowsEvent.compressed), and decode the same either way.
func TestDecodeInsertRowsCompressedEventDecodesAlike(t *testing.T) {
	if rowsEventCompressed < 0 {
		t.Fatal("go-mysql's RowsEvent.compressed not found: every event goes to go-mysql")
	}
	fde := synthFDE(t)
	cols := []synthCol{{mysql.MYSQL_TYPE_LONGLONG, nil}, {mysql.MYSQL_TYPE_VARCHAR, []byte{0xff, 0}}, {mysql.MYSQL_TYPE_BLOB, []byte{4}}}
	tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, []byte{0}))
	img := []byte{0}
	img = binary.LittleEndian.AppendUint64(img, 42)
	img = append(img, 3, 'a', 'b', 'c')
	img = append(img, 2, 0, 0, 0, '{', '}')
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	w.Write(img)
	w.Close()
	comp := append([]byte{0x81, byte(len(img))}, z.Bytes()...) // header: 1 size byte
	rows := synthEvent(replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1, synthRows(false, len(cols), comp))
	want := synthParse(fde, tm, rows, false, nil)
	got := synthParse(fde, tm, rows, true, nil)
	if got.fast || !sameResult(want, got) || want.err != nil {
		t.Fatalf("compressed: go-mysql err %v rows %s; fast took %v err %v rows %s", want.err, dump(want.rows), got.fast, got.err, dump(got.rows))
	}
	t.Logf("go-mysql: %s", dump(want.rows))
}

// The fast decoder follows the event's ParseTime option as go-mysql does.
// The failure guarded against: testDecodeInsertRowsFollowsParseTime
// (latent: the reader does not set ParseTime today). decodeInsertRows never
// looks at the event's own decode options: it assumes ParseTime off and
// takes the TIMESTAMP zone as a parameter, not from the event. With
// ParseTime on (a one-line config change in reader.go), go-mysql gives
// time.Time for DATETIME(n) and TIMESTAMP(n), the fast decoder still gives
// strings: the router's timestamp column, or any consumer switching on the
// Go type, sees another value.
func TestDecodeInsertRowsFollowsParseTime(t *testing.T) {
	fde := synthFDE(t)
	cols := []synthCol{{mysql.MYSQL_TYPE_LONGLONG, nil}, {mysql.MYSQL_TYPE_DATETIME2, []byte{3}}, {mysql.MYSQL_TYPE_TIMESTAMP2, []byte{0}}}
	tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, []byte{0}))
	img := []byte{0}
	img = binary.LittleEndian.AppendUint64(img, 1)
	// DATETIME(3) 2024-06-01 12:00:00.500: ((2024*13+6)<<5 | 1)<<17 | 12<<12, + 0x8000000000
	ip := uint64((2024*13+6)<<5|1)<<17 | 12<<12 + 0x8000000000
	img = append(img, byte(ip>>32), byte(ip>>24), byte(ip>>16), byte(ip>>8), byte(ip))
	img = binary.BigEndian.AppendUint16(img, 5000) // .5000 in units of 100 µs
	img = binary.BigEndian.AppendUint32(img, 1717243200)
	rows := synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, len(cols), img))

	parse := func(fast bool) synthResult {
		p := replication.NewBinlogParser()
		p.SetFlavor(mysql.MariaDBFlavor)
		p.SetParseTime(true)
		var took bool
		if fast {
			p.SetRowsEventDecodeFunc(func(e *replication.RowsEvent, data []byte) error {
				pos, err := e.DecodeHeader(data)
				if err != nil {
					return err
				}
				if took = decodeInsertRows(e, pos, data); took {
					return nil
				}
				return e.DecodeData(pos, data)
			})
		}
		for _, d := range [][]byte{fde, tm} {
			if _, err := p.Parse(d); err != nil {
				t.Fatal(err)
			}
		}
		ev, err := p.Parse(rows)
		if err != nil {
			t.Fatal(err)
		}
		re := ev.Event.(*replication.RowsEvent)
		return synthResult{rows: re.Rows, skipped: re.SkippedColumns, fast: took}
	}
	want, got := parse(false), parse(true)
	if !sameResult(want, got) {
		t.Fatalf("ParseTime on: fast decoder (took %v) does not follow the event's options\n go-mysql: %s\n     fast: %s", got.fast, dump(want.rows), dump(got.rows))
	}
}

// Two TIMESTAMP instants an hour apart at a DST change render to different
// text, in the zone the router reads. The failure guarded against:
// testTimestampRenderedUniquelyAcrossDST (not a fast/go-mysql difference:
// both paths render alike, as they should; this is the zone they share).
// The reader renders TIMESTAMP columns in the relay process's local zone
// (timestampLocation nil), as text without an offset, and the router parses
// such text as UTC (router.timestamp). Under TZ=America/New_York two
// instants an hour apart at the November DST change render to the same
// text, and every TIMESTAMP is shifted by the zone's offset.
func TestTimestampRenderedUniquelyAcrossDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip(err)
	}
	saved := time.Local
	time.Local = ny
	defer func() { time.Local = saved }()
	fde := synthFDE(t)
	cols := []synthCol{{mysql.MYSQL_TYPE_TIMESTAMP2, []byte{0}}}
	tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, nil))
	render := func(unix int64) (string, string) {
		img := binary.BigEndian.AppendUint32([]byte{0}, uint32(unix))
		rows := synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, 1, img))
		a := synthParse(fde, tm, rows, false, timestampLocation)
		b := synthParse(fde, tm, rows, true, timestampLocation)
		if !b.fast || !sameResult(a, b) {
			t.Fatalf("paths differ: %s / %s", dump(a.rows), dump(b.rows))
		}
		return a.rows[0][0].(string), b.rows[0][0].(string)
	}
	first := time.Date(2024, 11, 3, 5, 30, 0, 0, time.UTC) // 01:30 EDT
	second := first.Add(time.Hour)                         // 01:30 EST
	s1, _ := render(first.Unix())
	s2, _ := render(second.Unix())
	if s1 == s2 {
		t.Errorf("TIMESTAMP %s and %s (an hour apart) both published as %q", first, second, s1)
	}
	if want := first.Format("2006-01-02 15:04:05"); s1 != want {
		t.Errorf("TIMESTAMP %s published as %q; the router reads it as %s UTC", first, s1, s1)
	}
}
