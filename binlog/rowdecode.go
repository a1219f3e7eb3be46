package binlog

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Decoding INSERT row images.
//
// go-mysql renders every DATETIME value with fmt.Sprintf: in bulk catch-up
// (outbox tables carry a created_at column) that was an eighth of the
// relay's CPU. decodeInsertRows decodes the row images of an INSERT event
// into exactly the values go-mysql's RowsEvent.DecodeData gives (same Go
// types, same strings, byte slices into the same event data), without
// fmt, for the column types it positively recognises: integers, CHAR,
// VARCHAR, BINARY, VARBINARY, TEXT and BLOB (MariaDB's JSON), DATETIME and
// TIMESTAMP with fractional seconds (MySQL 5.6.4 and later). For anything
// else (another column type, a partial row image, a compressed event,
// MySQL's binary JSON, a value that does not fit its event) it reports
// false and leaves the event untouched: go-mysql then decodes it, with its
// own results and errors. rowdecode_test.go holds the two to the same
// output, column type by column type, on MariaDB's own binlog.

// rowsDecoder is the rows decoder of the parsers (parse.go) of the Reader
// and of Dump.Digest, one decoder so that a host holding the same
// transaction gives the same digest (digest.go): it decodes the row images
// of captured tables only, INSERTs by decodeInsertRows where it can, JSON
// within bounds (jsonbound.go), the rest by go-mysql. A MariaDB compressed
// rows event whose declared size is over the packet bound (bound) is
// refused before go-mysql allocates it (checkCompressed).
func rowsDecoder(captured func(schema, table []byte) bool, bound func() (int64, string)) func(*replication.RowsEvent, []byte) error {
	return func(e *replication.RowsEvent, data []byte) error {
		pos, err := e.DecodeHeader(data)
		if err != nil {
			return err
		}
		if !captured(e.Table.Schema, e.Table.Table) {
			return nil // not ours: skip decoding the row images
		}
		return decodeRows(e, pos, data, bound, planOf(e))
	}
}

// planOf plans e's columns as its table map (at the time of the call)
// gives them, with no values of rows before.
func planOf(e *replication.RowsEvent) func() ([]colPlan, *lastValues, bool) {
	return func() ([]colPlan, *lastValues, bool) {
		plan, ok := planColumns(e.Table, int(e.ColumnCount))
		return plan, nil, ok
	}
}

// decodeRows decodes the row images of e, a rows event of a captured table
// whose header is decoded, from data[pos:]: a partial INSERT image as rows
// of the columns it holds (decodePresent, planned for those), the others by
// decodeImages with plan, the plan of the whole table's columns.
func decodeRows(e *replication.RowsEvent, pos int, data []byte, bound func() (int64, string), plan func() ([]colPlan, *lastValues, bool)) error {
	if rowsShape(e) != "" {
		return nil // rowsEvent stops at it, undecoded (rowimage.go)
	}
	if partialInsert(e) {
		// Decoded as rows of the columns its images hold only
		// (PartialImage): as wide as what they hold, never the table.
		return decodePresent(e, func() error { return decodeImages(e, pos, data, bound, planOf(e)) })
	}
	return decodeImages(e, pos, data, bound, plan)
}

// decodeImages decodes the row images of e from data[pos:]: INSERTs by
// decodeInsertRows with plan where it can, JSON within bounds, the rest by
// go-mysql.
func decodeImages(e *replication.RowsEvent, pos int, data []byte, bound func() (int64, string), plan func() ([]colPlan, *lastValues, bool)) error {
	if compressed, _, ok := eventOptions(e); ok && compressed {
		if err := checkCompressed(data[pos:], bound); err != nil {
			return err
		}
	}
	if e.Table.JsonColumnCount() > 0 {
		return decodeJSONRows(e, pos, data)
	}
	if p, last, ok := plan(); ok && decodeInsertRowsWith(e, pos, data, p, last) {
		return nil
	}
	return e.DecodeData(pos, data)
}

// checkCompressed refuses the data of a MariaDB compressed event (rows or
// query, log_bin_compress: a header byte whose low 3 bits count the bytes
// of the uncompressed size, big endian, then zlib data) that declares more
// than the bound: go-mysql allocates the declared size before inflating,
// and zlib inflates a thousandfold.
func checkCompressed(data []byte, bound func() (int64, string)) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: an empty compressed event", ErrPayloadCorrupt)
	}
	n := int(data[0] & 0x07)
	if n > 4 || len(data) < 1+n {
		return fmt.Errorf("%w: a compressed event's size takes %d bytes", ErrPayloadCorrupt, n)
	}
	var size uint64
	for _, b := range data[1 : 1+n] {
		size = size<<8 | uint64(b)
	}
	if limit, how := bound(); size > uint64(limit) {
		return fmt.Errorf("%w: a compressed event declares %d bytes uncompressed, over the bound of %d (%s): raise source.max_packet_bytes and the memory limit together",
			ErrPayloadBound, size, limit, how)
	}
	return nil
}

// timestampLocation is the zone TIMESTAMP values are rendered in (the
// reader's TimestampStringLocation, which decodeInsertRows reads back from
// each event): UTC, the zone router.timestamp reads zone-less text in. A
// TIMESTAMP is an instant; rendered in the process's local zone (go-mysql's
// default) two instants an hour apart at a DST change read alike, and every
// one is off by the zone's offset once taken as UTC.
var timestampLocation = time.UTC

// colKind is how decodeInsertRows reads one column.
type colKind uint8

const (
	colInt8 colKind = iota + 1
	colInt16
	colInt24
	colInt32
	colInt64
	colUint8
	colUint16
	colUint24
	colUint32
	colUint64
	colString    // arg: the declared length in bytes (1 length byte below 256)
	colBlob      // arg: bytes of the length prefix (1-4)
	colDatetime2 // arg: fractional digits (0-6)
	colTimestamp2
)

type colPlan struct {
	kind colKind
	arg  int
}

// planColumns says how to read each column of t, or false when a column's
// type is not one decodeInsertRows recognises.
func planColumns(t *replication.TableMapEvent, cols int) ([]colPlan, bool) {
	if len(t.ColumnType) < cols || len(t.ColumnMeta) < cols {
		return nil, false
	}
	unsigned := t.UnsignedMap() // nil without the server's signedness metadata: all signed, as go-mysql reads them
	plan := make([]colPlan, cols)
	for i := range cols {
		tp, meta := t.ColumnType[i], int(t.ColumnMeta[i])
		u := unsigned[i]
		var p colPlan
		switch tp {
		case mysql.MYSQL_TYPE_TINY:
			p.kind = pick(u, colUint8, colInt8)
		case mysql.MYSQL_TYPE_SHORT:
			p.kind = pick(u, colUint16, colInt16)
		case mysql.MYSQL_TYPE_INT24:
			p.kind = pick(u, colUint24, colInt24)
		case mysql.MYSQL_TYPE_LONG:
			p.kind = pick(u, colUint32, colInt32)
		case mysql.MYSQL_TYPE_LONGLONG:
			p.kind = pick(u, colUint64, colInt64)
		case mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING:
			p = colPlan{colString, meta}
		case mysql.MYSQL_TYPE_STRING:
			// CHAR and BINARY; the metadata's high byte can also name
			// ENUM or SET (not recognised here). As MySQL packs it.
			length := meta
			if meta >= 256 {
				b0, b1 := byte(meta>>8), byte(meta)
				if b0&0x30 != 0x30 {
					length = int(uint16(b1) | uint16((b0&0x30)^0x30)<<4)
					b0 |= 0x30
				} else {
					length = int(b1)
				}
				if b0 != mysql.MYSQL_TYPE_STRING {
					return nil, false
				}
			}
			p = colPlan{colString, length}
		case mysql.MYSQL_TYPE_BLOB:
			if meta < 1 || meta > 4 {
				return nil, false
			}
			p = colPlan{colBlob, meta}
		case mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_TIMESTAMP2:
			if meta > 6 {
				return nil, false
			}
			p = colPlan{pick(tp == mysql.MYSQL_TYPE_DATETIME2, colDatetime2, colTimestamp2), meta}
		default:
			return nil, false
		}
		plan[i] = p
	}
	return plan, true
}

func pick(cond bool, a, b colKind) colKind {
	if cond {
		return a
	}
	return b
}

// decodeInsertRows decodes e's row images from data[pos:] (pos as
// e.DecodeHeader returned it) as go-mysql's DecodeData would, with the
// event's own options (TIMESTAMP zone), and reports whether it did.
func decodeInsertRows(e *replication.RowsEvent, pos int, data []byte) bool {
	if e.Table == nil {
		return false
	}
	plan, ok := planColumns(e.Table, int(e.ColumnCount))
	return ok && decodeInsertRowsWith(e, pos, data, plan, nil)
}

// decodeInsertRowsWith is decodeInsertRows with the plan of e's columns
// and, when not nil, the values its table's columns last had (last).
func decodeInsertRowsWith(e *replication.RowsEvent, pos int, data []byte, plan []colPlan, last *lastValues) bool {
	if e.Table == nil || e.Type() != replication.EnumRowsEventTypeInsert {
		return false
	}
	compressed, loc, ok := eventOptions(e)
	if !ok || compressed {
		return false
	}
	cols := int(e.ColumnCount)
	if cols <= 0 || len(e.ColumnBitmap1) < (cols+7)/8 {
		return false
	}
	for i := range cols {
		if e.ColumnBitmap1[i>>3]&(1<<(uint(i)&7)) == 0 {
			return false // a partial image (binlog_row_image=MINIMAL)
		}
	}
	if len(plan) != cols {
		return false
	}
	if len(data) > lastValuesEventBytes {
		last = nil // its values would hold the whole event (lastValues)
	}
	rows := make([][]any, 0, 1) // as go-mysql: empty, not nil, without rows
	for pos < len(data) {
		row, n, ok := decodeRow(data[pos:], plan, loc, last)
		if !ok {
			return false
		}
		rows = append(rows, row)
		pos += n
	}
	e.Rows = rows
	if len(rows) <= len(noneSkipped) {
		e.SkippedColumns = noneSkipped[:len(rows):len(rows)]
		return true
	}
	e.SkippedColumns = make([][]int, len(rows))
	for i := range e.SkippedColumns {
		e.SkippedColumns[i] = []int{} // as go-mysql: empty, not nil
	}
	return true
}

// noneSkipped is SkippedColumns of up to 256 whole row images as go-mysql
// gives them (an empty slice each), shared: nothing writes them.
var noneSkipped = func() [][]int {
	s := make([][]int, 256)
	for i := range s {
		s[i] = []int{}
	}
	return s
}()

// decodeRow decodes one full row image: the NULL bitmap, then each
// non-NULL column. It reports false when a value runs past the data.
func decodeRow(data []byte, plan []colPlan, loc *time.Location, last *lastValues) ([]any, int, bool) {
	nulls := (len(plan) + 7) / 8
	if len(data) < nulls {
		return nil, 0, false
	}
	row := make([]any, len(plan))
	pos := nulls
	for i, p := range plan {
		if data[i>>3]&(1<<(uint(i)&7)) != 0 {
			continue // NULL
		}
		if last != nil && (p.kind == colString || p.kind == colDatetime2) {
			v, n, ok := last.decode(i, data[pos:], p)
			if !ok {
				return nil, 0, false
			}
			row[i] = v
			pos += n
			continue
		}
		v, n, ok := decodeColumn(data[pos:], p, loc)
		if !ok {
			return nil, 0, false
		}
		row[i] = v
		pos += n
	}
	return row, pos, true
}

// lastValues is the value each column of a table's rows last had, by its
// bytes: a CHAR, VARCHAR or DATETIME that repeats the bytes of the value
// before it (an aggregate type, an event type, a time within the same
// millisecond, row after row) is the same value, handed on again instead
// of being decoded and boxed anew (two allocations each). Neither value
// nor bytes are ever written. The stream's parser keeps one per table map
// (hotparse.go); it holds on to one event's data per column at most.
//
// A value points into the event it was decoded from, and keeps it in
// memory while its column repeats it: only the values of events of at most
// lastValuesEventBytes are kept (a server splits rows events at 8 KiB by
// default; a larger one holds a large row, whose payload would stay).
type lastValues struct {
	raw [][]byte
	val []any
}

// lastValuesEventBytes bounds the events whose values lastValues keeps.
const lastValuesEventBytes = 64 << 10

func newLastValues(cols int) *lastValues {
	return &lastValues{raw: make([][]byte, cols), val: make([]any, cols)}
}

// decode is decodeColumn of column i (a colString or colDatetime2).
func (c *lastValues) decode(i int, d []byte, p colPlan) (any, int, bool) {
	n, ok := encodedSize(d, p)
	if !ok {
		return nil, 0, false
	}
	if c.val[i] != nil && bytes.Equal(c.raw[i], d[:n]) {
		return c.val[i], n, true
	}
	v, m, ok := decodeColumn(d, p, nil)
	if !ok || m != n {
		return nil, 0, false
	}
	c.raw[i], c.val[i] = d[:n:n], v
	return v, n, true
}

// encodedSize is the bytes a colString or colDatetime2 value takes at the
// start of d; false when it runs past d.
func encodedSize(d []byte, p colPlan) (int, bool) {
	n := 5 + (p.arg+1)/2 // colDatetime2
	if p.kind == colString {
		length, head := 0, 1
		switch {
		case p.arg < 256 && len(d) >= 1:
			length = int(d[0])
		case p.arg >= 256 && len(d) >= 2:
			length, head = int(binary.LittleEndian.Uint16(d)), 2
		default:
			return 0, false
		}
		n = head + length
	}
	return n, len(d) >= n
}

// fixedSize is the size of each fixed-width kind.
var fixedSize = [...]int{colInt8: 1, colInt16: 2, colInt24: 3, colInt32: 4, colInt64: 8,
	colUint8: 1, colUint16: 2, colUint24: 3, colUint32: 4, colUint64: 8}

func decodeColumn(d []byte, p colPlan, loc *time.Location) (any, int, bool) {
	switch p.kind {
	case colInt8, colInt16, colInt24, colInt32, colInt64, colUint8, colUint16, colUint24, colUint32, colUint64:
		n := fixedSize[p.kind]
		if len(d) < n {
			return nil, 0, false
		}
		return fixedInt(d, p.kind), n, true
	case colString:
		var length, head int
		if p.arg < 256 {
			if len(d) < 1 {
				return nil, 0, false
			}
			length, head = int(d[0]), 1
		} else {
			if len(d) < 2 {
				return nil, 0, false
			}
			length, head = int(binary.LittleEndian.Uint16(d)), 2
		}
		if len(d) < head+length {
			return nil, 0, false
		}
		return bytesString(d[head : head+length]), head + length, true
	case colBlob:
		head := p.arg
		if len(d) < head {
			return nil, 0, false
		}
		var length uint64
		for i := range head {
			length |= uint64(d[i]) << (8 * i)
		}
		if uint64(len(d)-head) < length {
			return nil, 0, false
		}
		end := head + int(length)
		return d[head:end], end, true
	case colDatetime2:
		return datetime2(d, p.arg)
	case colTimestamp2:
		return timestamp2(d, p.arg, loc)
	}
	return nil, 0, false
}

func fixedInt(d []byte, k colKind) any {
	switch k {
	case colInt8:
		return int8(d[0])
	case colUint8:
		return d[0]
	case colInt16:
		return int16(binary.LittleEndian.Uint16(d))
	case colUint16:
		return binary.LittleEndian.Uint16(d)
	case colInt24:
		u := uint32(d[0]) | uint32(d[1])<<8 | uint32(d[2])<<16
		if u&0x800000 != 0 {
			u |= 0xFF000000
		}
		return int32(u)
	case colUint24:
		return uint32(d[0]) | uint32(d[1])<<8 | uint32(d[2])<<16
	case colInt32:
		return int32(binary.LittleEndian.Uint32(d))
	case colUint32:
		return binary.LittleEndian.Uint32(d)
	case colInt64:
		return int64(binary.LittleEndian.Uint64(d))
	default: // colUint64
		return binary.LittleEndian.Uint64(d)
	}
}

// bytesString is b as a string sharing b's memory, as go-mysql returns
// CHAR and VARCHAR values (the event's data is not reused).
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// fracPart reads the fractional seconds of a DATETIME2 or TIMESTAMP2 (dec
// digits, big-endian), scaled to microseconds as MySQL stores them.
func fracPart(d []byte, dec int) int64 {
	switch dec {
	case 1, 2:
		return int64(d[0]) * 10000
	case 3, 4:
		return int64(binary.BigEndian.Uint16(d)) * 100
	case 5, 6:
		return int64(d[0])<<16 | int64(d[1])<<8 | int64(d[2])
	}
	return 0
}

// datetime2 decodes a DATETIME(dec) and renders it as go-mysql does
// without ParseTime: "%04d-%02d-%02d %02d:%02d:%02d", then ".%06d" of the
// fraction cut to dec digits; zero dates as "0000-00-00 00:00:00[.frac]".
func datetime2(d []byte, dec int) (any, int, bool) {
	n := 5 + (dec+1)/2
	if len(d) < n {
		return nil, 0, false
	}
	var ip uint64
	for _, b := range d[:5] {
		ip = ip<<8 | uint64(b)
	}
	intPart := int64(ip) - 0x8000000000
	frac := fracPart(d[5:], dec)
	b := make([]byte, 0, 32)
	if intPart == 0 {
		b = append(b, "0000-00-00 00:00:00"...)
	} else {
		tmp := intPart<<24 + frac
		if tmp < 0 {
			tmp = -tmp
		}
		if tmp < 0 {
			return nil, 0, false // the one value whose negation overflows: go-mysql prints it signed
		}
		ymdhms := tmp >> 24
		ymd, hms := ymdhms>>17, ymdhms%(1<<17)
		ym := ymd >> 5
		b = appendPadded(b, ym/13, 4)
		b = append(b, '-')
		b = appendPadded(b, ym%13, 2)
		b = append(b, '-')
		b = appendPadded(b, ymd%(1<<5), 2)
		b = append(b, ' ')
		b = appendPadded(b, hms>>12, 2)
		b = append(b, ':')
		b = appendPadded(b, (hms>>6)%(1<<6), 2)
		b = append(b, ':')
		b = appendPadded(b, hms%(1<<6), 2)
	}
	return fracSuffix(b, frac, dec), n, true
}

// fracSuffix appends ".%06d" of frac cut to dec digits (nothing for 0),
// as go-mysql's formatDatetime and formatZeroTime do.
func fracSuffix(b []byte, frac int64, dec int) string {
	if dec > 0 {
		b = append(b, '.')
		b = appendPadded(b, frac, 6)
		b = b[:len(b)-(6-dec)]
	}
	return unsafe.String(&b[0], len(b))
}

var fracTimeLayout = [7]string{
	"2006-01-02 15:04:05",
	"2006-01-02 15:04:05.0",
	"2006-01-02 15:04:05.00",
	"2006-01-02 15:04:05.000",
	"2006-01-02 15:04:05.0000",
	"2006-01-02 15:04:05.00000",
	"2006-01-02 15:04:05.000000",
}

// timestamp2 decodes a TIMESTAMP(dec) as go-mysql does without ParseTime:
// the instant in loc (the process's local zone when nil), zero as
// "0000-00-00 00:00:00[.frac]".
func timestamp2(d []byte, dec int, loc *time.Location) (any, int, bool) {
	n := 4 + (dec+1)/2
	if len(d) < n {
		return nil, 0, false
	}
	sec := int64(binary.BigEndian.Uint32(d))
	usec := fracPart(d[4:], dec)
	if sec == 0 {
		return fracSuffix(append(make([]byte, 0, 32), "0000-00-00 00:00:00"...), usec, dec), n, true
	}
	t := time.Unix(sec, usec*1000)
	if loc != nil {
		t = t.In(loc)
	}
	return t.Format(fracTimeLayout[dec]), n, true
}

// appendPadded appends v (never negative here) in decimal, zero-padded to
// width digits, longer when it has more: fmt's %0*d.
func appendPadded(b []byte, v int64, width int) []byte {
	var buf [20]byte
	i := len(buf)
	for v >= 10 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	i--
	buf[i] = byte('0' + v)
	for pad := width - (len(buf) - i); pad > 0; pad-- {
		b = append(b, '0')
	}
	return append(b, buf[i:]...)
}
