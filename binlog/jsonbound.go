package binlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// MySQL's binary JSON, decoded within bounds.
//
// go-mysql decodes a binary JSON document by recursion, one call per
// level, following each value's offset wherever it points: a document
// nested four million arrays deep (a 52 MB row, within the packet bound)
// ended the process with "fatal error: stack overflow", which no recover
// catches; an array whose value points back at the array itself does the
// same in 8 bytes, and values that all point at one shared string inflate
// a small document without bound. The relay walks every document first,
// without recursion, along the same offsets go-mysql will follow, and
// hands go-mysql only a document that nests at most maxJSONDepth
// containers (MySQL refuses to store a deeper one) and whose values claim
// no more bytes than the document has (MySQL writes each value once). A
// document that fails is not decoded: its row carries an Undecoded value
// in its place, and the relay treats the row as a bad row
// (router.on_error: stop, or dead-letter); in an UPDATE or DELETE, which
// the relay only counts, it is only not decoded.

// maxJSONDepth is MySQL's JSON_DOCUMENT_MAX_DEPTH: the containers a
// document may nest.
const maxJSONDepth = 100

// Undecoded stands in a row for a value the reader did not decode; Why
// says why. A row holding one is a bad row (Event.Undecoded).
type Undecoded struct {
	Why string `json:"undecoded"`
}

// Binary JSON value types (MySQL's sql-common/json_binary.h).
const (
	jsonbSmallObject = 0x0
	jsonbLargeObject = 0x1
	jsonbSmallArray  = 0x2
	jsonbLargeArray  = 0x3
	jsonbLiteral     = 0x4
	jsonbInt16       = 0x5
	jsonbUint16      = 0x6
	jsonbInt32       = 0x7
	jsonbUint32      = 0x8
	jsonbInt64       = 0x9
	jsonbUint64      = 0xa
	jsonbDouble      = 0xb
	jsonbString      = 0xc
	jsonbOpaque      = 0xf
)

var (
	errJSONDepth  = fmt.Errorf("JSON document nested deeper than %d levels (MySQL's own limit): not decoded", maxJSONDepth)
	errJSONShared = errors.New("JSON document whose values claim more bytes than it has (values that share bytes): not decoded")
)

// jsonFrame is a container being walked.
type jsonFrame struct {
	data          []byte
	small, object bool
	count, next   int
	depth         int
}

// checkJSON walks the binary JSON document doc (its type byte first)
// without recursion and reports why go-mysql must not decode it, nil when
// it may.
func checkJSON(doc []byte) error {
	if len(doc) == 0 {
		return nil // go-mysql gives an empty value for it, decoding nothing
	}
	w := jsonWalk{budget: len(doc) - 1}
	if err := w.value(doc[0], doc[1:], 0); err != nil {
		return err
	}
	for len(w.stack) > 0 {
		f := &w.stack[len(w.stack)-1]
		if f.next == f.count {
			w.stack = w.stack[:len(w.stack)-1]
			continue
		}
		i := f.next
		f.next++
		offsetSize, valueEntry := 2, 3
		if !f.small {
			offsetSize, valueEntry = 4, 5
		}
		entry := 2*offsetSize + valueEntry*i
		if f.object {
			entry += (offsetSize + 2) * f.count
		}
		tp, depth, data := f.data[entry], f.depth, f.data
		if jsonInline(tp, f.small) {
			if err := w.value(tp, data[entry+1:entry+valueEntry], depth); err != nil {
				return err
			}
			continue
		}
		off := readOffset(data[entry+1:], f.small)
		if off > len(data) {
			return fmt.Errorf("malformed binary JSON: a value's offset %d is past its container (%d bytes)", off, len(data))
		}
		if err := w.value(tp, data[off:], depth); err != nil {
			return err
		}
	}
	return nil
}

// jsonWalk is checkJSON's state: the containers open, and the bytes the
// values met so far may still claim.
type jsonWalk struct {
	stack  []jsonFrame
	budget int
}

func (w *jsonWalk) claim(n int) error {
	if w.budget -= n; w.budget < 0 {
		return errJSONShared
	}
	return nil
}

// value checks the value of type tp at data, inside depth containers:
// a container is opened (its header checked, its keys claimed), a scalar
// checked and claimed.
func (w *jsonWalk) value(tp byte, data []byte, depth int) error {
	short := func(what string) error {
		return fmt.Errorf("malformed binary JSON: %s runs past its %d bytes", what, len(data))
	}
	switch tp {
	case jsonbSmallObject, jsonbLargeObject, jsonbSmallArray, jsonbLargeArray:
		if depth+1 > maxJSONDepth {
			return errJSONDepth
		}
		small, object := tp == jsonbSmallObject || tp == jsonbSmallArray, tp == jsonbSmallObject || tp == jsonbLargeObject
		offsetSize, valueEntry := 2, 3
		if !small {
			offsetSize, valueEntry = 4, 5
		}
		if len(data) < 2*offsetSize {
			return short("a container's header")
		}
		count, size := readOffset(data, small), readOffset(data[offsetSize:], small)
		if size > len(data) {
			return short("a container")
		}
		header := 2*offsetSize + count*valueEntry
		if object {
			header += count * (offsetSize + 2)
		}
		if header > size {
			return fmt.Errorf("malformed binary JSON: a container of %d entries has a header of %d bytes, past its size %d", count, header, size)
		}
		if err := w.claim(header); err != nil {
			return err
		}
		if object {
			for i := range count {
				e := 2*offsetSize + (offsetSize+2)*i
				keyOff, keyLen := readOffset(data[e:], small), int(binary.LittleEndian.Uint16(data[e+offsetSize:]))
				if keyOff < header || keyOff+keyLen > len(data) {
					return fmt.Errorf("malformed binary JSON: key %d at %d (%d bytes) is outside its object", i, keyOff, keyLen)
				}
				if err := w.claim(keyLen); err != nil {
					return err
				}
			}
		}
		w.stack = append(w.stack, jsonFrame{data: data, small: small, object: object, count: count, depth: depth + 1})
		return nil
	case jsonbLiteral:
		if len(data) < 1 {
			return short("a literal")
		}
		return nil
	case jsonbInt16, jsonbUint16:
		if len(data) < 2 {
			return short("an integer")
		}
		return nil
	case jsonbInt32, jsonbUint32, jsonbInt64, jsonbUint64, jsonbDouble:
		n := 8
		if tp == jsonbInt32 || tp == jsonbUint32 {
			n = 4
		}
		if len(data) < n {
			return short("a number")
		}
		return w.claim(n)
	case jsonbString, jsonbOpaque:
		head := 0
		if tp == jsonbOpaque {
			head = 1 // the MySQL type of the value
		}
		l, n, ok := jsonLength(data[min(head, len(data)):])
		if !ok || len(data) < head+n || len(data)-head-n < l {
			return short("a string")
		}
		return w.claim(head + n + l)
	}
	return fmt.Errorf("malformed binary JSON: value type %d", tp)
}

// jsonInline reports whether a value of type tp sits in its entry (as
// MySQL stores it, and go-mysql reads it).
func jsonInline(tp byte, small bool) bool {
	switch tp {
	case jsonbInt16, jsonbUint16, jsonbLiteral:
		return true
	case jsonbInt32, jsonbUint32:
		return !small
	}
	return false
}

func readOffset(b []byte, small bool) int {
	if small {
		return int(binary.LittleEndian.Uint16(b))
	}
	return int(binary.LittleEndian.Uint32(b))
}

// jsonLength reads a binary JSON variable-length size: 7 bits a byte, at
// most 5 bytes, at most 2^32-1.
func jsonLength(b []byte) (length, n int, ok bool) {
	var v uint64
	for i := 0; i < len(b) && i < 5; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if v > 1<<32-1 {
				return 0, 0, false
			}
			return int(v), i + 1, true
		}
	}
	return 0, 0, false
}

// decodeJSONRows decodes the rows of e, whose table has JSON columns, from
// data[pos:]: the JSON columns first as their raw bytes (the table map's
// JSON types read as BLOB: the same layout, a length and the bytes), then
// each document checkJSON lets through rendered by go-mysql; one it does
// not is replaced by an Undecoded. A PARTIAL_UPDATE_ROWS_EVENT is not
// decoded: its JSON diffs would be go-mysql's alone; the reader hands it
// on as an UPDATE without rows (convert).
func decodeJSONRows(e *replication.RowsEvent, pos int, data []byte) error {
	if e.Type() == replication.EnumRowsEventTypeUnknown {
		return nil
	}
	orig := e.Table
	var jsonCols []int
	raw := *orig
	raw.ColumnType = slices.Clone(orig.ColumnType)
	for i, t := range raw.ColumnType {
		if t == mysql.MYSQL_TYPE_JSON {
			raw.ColumnType[i] = mysql.MYSQL_TYPE_BLOB
			jsonCols = append(jsonCols, i)
		}
	}
	e.Table = &raw
	var err error
	if !decodeInsertRows(e, pos, data) {
		err = e.DecodeData(pos, data)
	}
	e.Table = orig
	if err != nil {
		return err
	}
	type place struct{ row, col int }
	var docs [][]byte
	var at []place
	for r, row := range e.Rows {
		for _, c := range jsonCols {
			if c >= len(row) {
				continue
			}
			doc, ok := row[c].([]byte)
			if !ok || len(doc) == 0 {
				continue // NULL, absent, or the empty value go-mysql gives as []byte{}
			}
			if err := checkJSON(doc); err != nil {
				row[c] = Undecoded{Why: err.Error()}
				continue
			}
			docs = append(docs, doc)
			at = append(at, place{r, c})
		}
	}
	if len(docs) == 0 {
		return nil
	}
	texts, err := renderJSON(e, docs)
	if err != nil {
		return err
	}
	for i, p := range at {
		e.Rows[p.row][p.col] = texts[i]
	}
	return nil
}

// renderJSON has go-mysql render docs (checked by checkJSON) as text, with
// e's options, as it renders a JSON column: as the row images of a
// one-column event like e (an UPDATE's images come in pairs: an odd last
// one is rendered twice).
func renderJSON(e *replication.RowsEvent, docs [][]byte) ([]any, error) {
	images := docs
	if len(e.ColumnBitmap2) > 0 && len(images)%2 == 1 {
		images = append(slices.Clip(images), images[len(images)-1])
	}
	n := 0
	for _, d := range images {
		n += 5 + len(d)
	}
	data := make([]byte, 0, n)
	for _, d := range images {
		data = append(data, 0) // no NULL
		data = binary.LittleEndian.AppendUint32(data, uint32(len(d)))
		data = append(data, d...)
	}
	one := *e
	one.Table = &replication.TableMapEvent{ColumnCount: 1, ColumnType: []byte{mysql.MYSQL_TYPE_JSON}, ColumnMeta: []uint16{4}}
	one.ColumnCount, one.ColumnBitmap1 = 1, []byte{1}
	if len(e.ColumnBitmap2) > 0 {
		one.ColumnBitmap2 = []byte{1}
	}
	if err := one.DecodeData(0, data); err != nil {
		return nil, fmt.Errorf("render JSON: %w", err)
	}
	if len(one.Rows) != len(images) {
		return nil, fmt.Errorf("render JSON: %d documents gave %d values", len(images), len(one.Rows))
	}
	out := make([]any, len(docs))
	for i := range docs {
		out[i] = one.Rows[i][0]
	}
	return out, nil
}

// undecodedRows says, per row, which value the reader did not decode and
// why (Event.Undecoded); nil when it decoded them all.
func undecodedRows(rows [][]any, columns []string) []string {
	var out []string
	for i, row := range rows {
		for c, v := range row {
			u, ok := v.(Undecoded)
			if !ok {
				continue
			}
			if out == nil {
				out = make([]string, len(rows))
			}
			name := fmt.Sprintf("#%d", c+1)
			if c < len(columns) {
				name = columns[c]
			}
			out[i] = fmt.Sprintf("column %q: %s", name, u.Why)
			break
		}
	}
	return out
}
