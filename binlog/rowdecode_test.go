package binlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// RowsDecode is one rows event as a parser decoded it (exported for
// rowdecode_integration_test.go, package binlog_test).
type RowsDecode struct {
	Type    replication.EventType
	Table   string
	Rows    [][]any
	Skipped [][]int
	Fast    bool // decodeInsertRows decoded it
}

// DecodeFile parses a binlog file, its row images decoded by go-mysql
// alone or, with fast, by decodeInsertRows where it accepts them.
func DecodeFile(t *testing.T, path string, fast bool) []RowsDecode {
	t.Helper()
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MariaDBFlavor)
	p.SetVerifyChecksum(true)
	var took bool
	if fast {
		p.SetRowsEventDecodeFunc(fastDecode(&took))
	}
	var out []RowsDecode
	err := p.ParseFile(path, 0, func(ev *replication.BinlogEvent) error {
		if re, ok := ev.Event.(*replication.RowsEvent); ok {
			out = append(out, RowsDecode{Type: ev.Header.EventType, Table: string(re.Table.Schema) + "." + string(re.Table.Table),
				Rows: re.Rows, Skipped: re.SkippedColumns, Fast: took})
			took = false
		}
		return nil
	})
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return out
}

// fastDecode is the reader's RowsEventDecodeFunc (captured tables); took
// says whether decodeInsertRows decoded the last event.
func fastDecode(took *bool) func(*replication.RowsEvent, []byte) error {
	return func(e *replication.RowsEvent, data []byte) error {
		pos, err := e.DecodeHeader(data)
		if err != nil {
			return err
		}
		if *took = decodeInsertRows(e, pos, data); *took {
			return nil
		}
		return e.DecodeData(pos, data)
	}
}

// SameDecodes fails unless the two parses gave equal rows, event by event,
// and returns how many events (and rows) the fast decoder took.
func SameDecodes(t *testing.T, want, got []RowsDecode) (events, rows int) {
	t.Helper()
	if len(want) != len(got) {
		t.Fatalf("%d rows events with go-mysql, %d with decodeInsertRows", len(want), len(got))
	}
	for i := range want {
		w, g := want[i], got[i]
		if !reflect.DeepEqual(w.Rows, g.Rows) || !reflect.DeepEqual(w.Skipped, g.Skipped) {
			t.Errorf("event %d (%s, %s, fast %v): rows differ\n go-mysql: %s\n     fast: %s", i, g.Type, g.Table, g.Fast, dump(w.Rows), dump(g.Rows))
			continue
		}
		if g.Fast {
			events++
			rows += len(g.Rows)
		}
	}
	return events, rows
}

func dump(rows [][]any) string {
	var b bytes.Buffer
	for _, r := range rows {
		for _, v := range r {
			fmt.Fprintf(&b, "%T(%#v) ", v, v)
		}
		b.WriteString("| ")
	}
	return b.String()
}

// TestDecodeInsertRowsMatchesGoMySQL: on the binlog MariaDB 10.11 wrote for
// the transaction shapes, every rows event decodes to the same values with
// and without the fast decoder, and the fast decoder takes the outbox
// INSERTs (BIGINT, VARCHAR, JSON as LONGTEXT, DATETIME(3)).
func TestDecodeInsertRowsMatchesGoMySQL(t *testing.T) {
	const path = "testdata/mariadb-10.11-shapes.binlog"
	events, rows := SameDecodes(t, DecodeFile(t, path, false), DecodeFile(t, path, true))
	if events == 0 || rows == 0 {
		t.Fatal("the fast decoder took no event of the recorded binlog")
	}
	t.Logf("fast decoder took %d events, %d rows", events, rows)
}

// TestDecodeInsertRowsMutated feeds the recorded INSERT events with bytes
// of their row images changed or cut: whatever the fast decoder accepts it
// decodes as go-mysql does, and what go-mysql refuses it never accepts.
func TestDecodeInsertRowsMutated(t *testing.T) {
	raw := rawEvents(t, "testdata/mariadb-10.11-shapes.binlog")
	rng := rand.New(rand.NewPCG(17, 42))
	accepted, refused := 0, 0
	for i, ev := range raw {
		if ev.Header.EventType != replication.WRITE_ROWS_EVENTv1 && ev.Header.EventType != replication.WRITE_ROWS_EVENTv2 {
			continue
		}
		head := rowsHeaderLen(t, raw[:i], ev.RawData)
		for range 300 {
			data := bytes.Clone(ev.RawData)
			// The row images only: go-mysql's DecodeHeader panics on a cut header.
			images := data[replication.EventHeaderSize+head : len(data)-replication.BinlogChecksumLength]
			switch rng.IntN(3) {
			case 0: // change a byte or two
				for range 1 + rng.IntN(2) {
					images[rng.IntN(len(images))] = byte(rng.IntN(256))
				}
			case 1: // cut the images short
				cut := rng.IntN(len(images))
				data = append(data[:replication.EventHeaderSize+head+cut], data[len(data)-replication.BinlogChecksumLength:]...)
				binary.LittleEndian.PutUint32(data[9:], uint32(len(data)))
			case 2: // a length byte set high
				images[len(images)-1-rng.IntN(min(len(images), 40))] = 0xff
			}
			want, wantErr := parseOne(raw[:i], data, false)
			got, gotErr := parseOne(raw[:i], data, true)
			if got.Fast {
				accepted++
				if wantErr != nil {
					t.Fatalf("fast decoder accepted an event go-mysql refuses (%v): %s", wantErr, dump(got.Rows))
				}
				if !reflect.DeepEqual(want.Rows, got.Rows) {
					t.Fatalf("mutated event decodes differently\n go-mysql: %s\n     fast: %s", dump(want.Rows), dump(got.Rows))
				}
				continue
			}
			refused++
			if (wantErr == nil) != (gotErr == nil) || !reflect.DeepEqual(want.Rows, got.Rows) {
				t.Fatalf("declined event: go-mysql %v / %v, with the fast decoder declining %v / %v", wantErr, dump(want.Rows), gotErr, dump(got.Rows))
			}
		}
	}
	if accepted == 0 || refused == 0 {
		t.Fatalf("mutations accepted %d, refused %d: both should occur", accepted, refused)
	}
	t.Logf("mutated events: %d decoded by the fast decoder as by go-mysql, %d left to go-mysql", accepted, refused)
}

// rowsHeaderLen is where a rows event's row images start in its body.
func rowsHeaderLen(t *testing.T, before []*replication.BinlogEvent, data []byte) int {
	t.Helper()
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MariaDBFlavor)
	head := -1
	p.SetRowsEventDecodeFunc(func(e *replication.RowsEvent, data []byte) error {
		pos, err := e.DecodeHeader(data)
		head = pos
		return err
	})
	for _, ev := range before {
		if _, ok := ev.Event.(*replication.RowsEvent); !ok {
			if _, err := p.Parse(ev.RawData); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := p.Parse(data); err != nil || head < 0 {
		t.Fatalf("rows event header: %v", err)
	}
	return head
}

// rawEvents are a binlog file's events with their raw bytes.
func rawEvents(t testing.TB, path string) []*replication.BinlogEvent {
	t.Helper()
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MariaDBFlavor)
	var out []*replication.BinlogEvent
	if err := p.ParseFile(path, 0, func(ev *replication.BinlogEvent) error {
		ev.RawData = bytes.Clone(ev.RawData)
		out = append(out, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// parseOne replays before (for the format and table maps) and parses data.
func parseOne(before []*replication.BinlogEvent, data []byte, fast bool) (RowsDecode, error) {
	p := replication.NewBinlogParser()
	p.SetFlavor(mysql.MariaDBFlavor)
	var took bool
	if fast {
		p.SetRowsEventDecodeFunc(fastDecode(&took))
	}
	for _, ev := range before {
		if _, ok := ev.Event.(*replication.RowsEvent); ok {
			continue
		}
		if _, err := p.Parse(ev.RawData); err != nil {
			return RowsDecode{}, fmt.Errorf("replay: %w", err)
		}
	}
	ev, err := p.Parse(data)
	if err != nil {
		return RowsDecode{}, err
	}
	re, ok := ev.Event.(*replication.RowsEvent)
	if !ok {
		return RowsDecode{}, fmt.Errorf("not a rows event: %T", ev.Event)
	}
	return RowsDecode{Rows: re.Rows, Skipped: re.SkippedColumns, Fast: took}, nil
}

// TestDatetime2Rendering holds the DATETIME(n) renderer to fmt's, the way
// go-mysql prints, over encoded values including ones MySQL never writes
// (months 13-15, seconds 60-63, fractions past 999,999).
func TestDatetime2Rendering(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200000 {
		dec := i % 7
		d := make([]byte, 8)
		for j := range d {
			d[j] = byte(rng.IntN(256))
		}
		if i%5 == 0 {
			d[0] = 0x80 // around the zero point
		}
		got, n, ok := datetime2(d, dec)
		if !ok {
			continue
		}
		if want := goMySQLDatetime2(d, dec); got != want || n != 5+(dec+1)/2 {
			t.Fatalf("% x dec %d: got %q (%d bytes), go-mysql renders %q", d, dec, got, n, want)
		}
	}
}

// goMySQLDatetime2 is go-mysql's decodeDatetime2 and formatDatetime /
// formatZeroTime (ParseTime off), spelled with fmt as go-mysql spells it.
func goMySQLDatetime2(d []byte, dec int) string {
	intPart := int64(mysql.BFixedLengthInt(d[0:5])) - 0x8000000000
	frac := goMySQLFrac(d[5:], dec)
	if intPart == 0 {
		return goMySQLZeroTime(frac, dec)
	}
	tmp := intPart<<24 + frac
	if tmp < 0 {
		tmp = -tmp
	}
	ymdhms := tmp >> 24
	ymd, hms := ymdhms>>17, ymdhms%(1<<17)
	ym := ymd >> 5
	y, mo, day := int(ym/13), int(ym%13), int(ymd%(1<<5))
	h, mi, s := int(hms>>12), int((hms>>6)%(1<<6)), int(hms%(1<<6))
	if dec == 0 {
		return fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d", y, mo, day, h, mi, s)
	}
	out := fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d.%06d", y, mo, day, h, mi, s, frac)
	return out[:len(out)-(6-dec)]
}

// goMySQLFrac is go-mysql's reading of dec fractional digits.
func goMySQLFrac(d []byte, dec int) int64 {
	switch dec {
	case 1, 2:
		return int64(d[0]) * 10000
	case 3, 4:
		return int64(binary.BigEndian.Uint16(d)) * 100
	case 5, 6:
		return int64(mysql.BFixedLengthInt(d[0:3]))
	}
	return 0
}

// goMySQLZeroTime is go-mysql's formatZeroTime.
func goMySQLZeroTime(frac int64, dec int) string {
	if dec == 0 {
		return "0000-00-00 00:00:00"
	}
	s := fmt.Sprintf("0000-00-00 00:00:00.%06d", frac)
	return s[:len(s)-(6-dec)]
}

// TestTimestamp2Rendering: TIMESTAMP(n) as go-mysql renders it, in the
// local zone (its TimestampStringLocation unset) and in a given one.
func TestTimestamp2Rendering(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tokyo := time.FixedZone("JST", 9*3600)
	for i := range 100000 {
		dec := i % 7
		d := make([]byte, 7)
		for j := range d {
			d[j] = byte(rng.IntN(256))
		}
		if i%7 == 0 {
			d[0], d[1], d[2], d[3] = 0, 0, 0, 0
		}
		for _, loc := range []*time.Location{nil, tokyo} {
			got, _, ok := timestamp2(d, dec, loc)
			if !ok {
				t.Fatalf("% x dec %d refused", d, dec)
			}
			sec := int64(binary.BigEndian.Uint32(d))
			usec := goMySQLFrac(d[4:], dec)
			var want string
			if sec == 0 {
				want = goMySQLZeroTime(usec, dec)
			} else {
				tt := time.Unix(sec, usec*1000)
				if loc != nil {
					tt = tt.In(loc)
				}
				want = tt.Format(fracTimeLayout[dec])
			}
			if got != want {
				t.Fatalf("% x dec %d loc %v: got %q, go-mysql %q", d, dec, loc, got, want)
			}
		}
	}
}

// eventOptions reads the options go-mysql's parser left in each rows event
// it made (compressed, parseTime, the TIMESTAMP zone), as reflect reads
// them, for every combination: read at a wrong offset, a compressed event
// would be taken for plain zlib-less images, or a time.Time-typed option
// missed.
func TestEventOptionsReadsTheEventsOwnOptions(t *testing.T) {
	fde := synthFDE(t)
	cols := []synthCol{{mysql.MYSQL_TYPE_LONGLONG, nil}}
	tm := synthEvent(replication.TABLE_MAP_EVENT, synthTableMap(cols, []byte{0}))
	img := binary.LittleEndian.AppendUint64([]byte{0}, 7)
	plain := synthEvent(replication.WRITE_ROWS_EVENTv1, synthRows(false, len(cols), img))
	comp := synthEvent(replication.MARIADB_WRITE_ROWS_COMPRESSED_EVENT_V1, synthRows(false, len(cols), []byte{0x81, 9}))
	zone := time.FixedZone("X", 3600)
	for _, parseTime := range []bool{false, true} {
		for _, loc := range []*time.Location{time.UTC, zone} {
			for _, raw := range [][]byte{plain, comp} {
				p := replication.NewBinlogParser()
				p.SetFlavor(mysql.MariaDBFlavor)
				p.SetParseTime(parseTime)
				p.SetTimestampStringLocation(loc)
				var got *replication.RowsEvent
				p.SetRowsEventDecodeFunc(func(e *replication.RowsEvent, _ []byte) error { got = e; return nil })
				for _, d := range [][]byte{fde, tm, raw} {
					if _, err := p.Parse(d); err != nil {
						t.Fatal(err)
					}
				}
				v := reflect.ValueOf(got).Elem()
				wantComp := v.Field(rowsEventCompressed).Bool()
				wantLoc := (*time.Location)(v.Field(rowsEventTSLocation).UnsafePointer())
				c, l, ok := eventOptions(got)
				if ok == parseTime || (ok && (c != wantComp || l != wantLoc)) {
					t.Errorf("parseTime %v loc %v compressed %v: eventOptions = %v, %v, %v", parseTime, loc, wantComp, c, l, ok)
				}
				if ok && c != (len(raw) == len(comp) && bytes.Equal(raw, comp)) {
					t.Errorf("compressed %v for a %s", c, replication.EventType(raw[4]))
				}
			}
		}
	}
}

// The go-mysql the module requires has the three RowsEvent fields the
// decode options are read from, of the kinds read (rowoptions.go): without
// them every rows event would go to go-mysql's decoder, slower, and a
// MariaDB compressed rows event would be inflated without the bound
// (checkCompressed is asked only of an event known to be compressed).
func TestRowsEventOptionsAreFoundInGoMySQL(t *testing.T) {
	if !rowsEventOptions.ok {
		t.Fatalf("go-mysql's replication.RowsEvent lacks compressed, parseTime or timestampStringLocation as bool, bool, "+
			"*time.Location (indexes %d %d %d): rowoptions.go must follow the go-mysql in go.mod",
			rowsEventCompressed, rowsEventParseTime, rowsEventTSLocation)
	}
}
