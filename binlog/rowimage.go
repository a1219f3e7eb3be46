package binlog

import (
	"errors"
	"fmt"
	"math/bits"
	"strings"

	"github.com/go-mysql-org/go-mysql/replication"
)

// Partial row images.
//
// A rows event carries, before its row images, a bitmap of the table's
// columns its images hold. With binlog_row_image=FULL (the server default)
// an INSERT's image holds every column. A session that sets MINIMAL logs
// only the columns the statement gave a value (plus the auto-increment
// key, columns with an expression default such as CURRENT_TIMESTAMP, and
// stored generated columns); NOBLOB leaves out the BLOB and TEXT columns
// the statement did not set. The start-up check reads the global value
// only: a session (or a global change after the start, for new
// connections) can still write such images. go-mysql fills the columns an
// image lacks with nil, exactly as a NULL value: published, an omitted
// event_type or payload would become a missing header or a tombstone.
//
// The reader names, on every INSERT of a captured table, the columns its
// images lack (Event.Absent), whichever they are: the envelope and
// CloudEvents values, the dead-letter value and any column a router
// setting names would all carry a NULL the row never held. Such an event
// has no Rows: its rows come as what they hold (Event.Image, PartialImage:
// the values of the columns present, and which columns those are), so
// that nothing reads an absent column as a NULL. What to do is its
// consumer's to decide where the transaction's fate is known: the relay
// stops at the transaction that publishes such a row (an XA transaction's
// XA COMMIT: prepared, it may still roll back), before publishing any of
// it (PartialImageError); audit keys the rows by the columns present (the
// primary key is logged under MINIMAL), and the takeover from Debezium
// looks their event ids up. UPDATE and DELETE images are the router's
// invalid operations, only counted: a partial one is left as it is.

// PartialImage is what the row images of an INSERT that lack columns hold
// (Event.Image): Columns are the indexes, in Table.Columns, of the columns
// present, in order, and each row of Rows holds their values, as Rows
// would (rowsDecoder decodes them as rows of those columns alone:
// decodePresent).
type PartialImage struct {
	Columns []int
	Rows    [][]any
}

// Value is row's value of column col (an index in Table.Columns); ok false
// when the images lack the column.
func (p *PartialImage) Value(row []any, col int) (v any, ok bool) {
	for i, c := range p.Columns {
		if c == col {
			if i < len(row) {
				return row[i], true
			}
			return nil, false
		}
	}
	return nil, false
}

// presentColumns lists the columns, among the first width, that bitmap (a
// columns-present bitmap) marks present.
func presentColumns(bitmap []byte, width uint64) []int {
	var out []int
	for i := range int(width) {
		if i>>3 < len(bitmap) && bitmap[i>>3]&(1<<(uint(i)&7)) != 0 {
			out = append(out, i)
		}
	}
	return out
}

// decodePresent decodes e, an INSERT whose images lack columns, with
// decode (the decoder of whole images) as rows of the columns its images
// hold alone: an image holds a NULL bitmap and values for those columns
// only, so it reads the same against a table map of them, and each row is
// as wide as what the image holds (decoded against the whole table, go-mysql
// allocated the table's width for every image, however few bytes it held).
// e's table map and bitmap are put back after.
func decodePresent(e *replication.RowsEvent, decode func() error) error {
	tm, bitmap, count := e.Table, e.ColumnBitmap1, e.ColumnCount
	present := presentColumns(bitmap, count)
	all := make([]byte, (len(present)+7)/8)
	for i := range present {
		all[i>>3] |= 1 << (uint(i) & 7)
	}
	e.Table, e.ColumnCount, e.ColumnBitmap1 = narrowed(tm, present), uint64(len(present)), all
	err := decode()
	e.Table, e.ColumnCount, e.ColumnBitmap1 = tm, count, bitmap
	return err
}

// narrowed is a table map of tm's columns at present alone: their types,
// metadata and signedness (go-mysql reads a numeric column's from the
// signedness bitmap, one bit per numeric column, in order), enough to
// decode row images of those columns.
func narrowed(tm *replication.TableMapEvent, present []int) *replication.TableMapEvent {
	n := &replication.TableMapEvent{TableID: tm.TableID, Flags: tm.Flags, Schema: tm.Schema, Table: tm.Table,
		ColumnCount: uint64(len(present)), ColumnType: make([]byte, len(present)), ColumnMeta: make([]uint16, len(present))}
	for i, c := range present {
		if c < len(tm.ColumnType) {
			n.ColumnType[i] = tm.ColumnType[c]
		}
		if c < len(tm.ColumnMeta) {
			n.ColumnMeta[i] = tm.ColumnMeta[c]
		}
	}
	if len(tm.SignednessBitmap) == 0 {
		return n // read as signed, as the whole table's (signs.go fixes them)
	}
	unsigned := tm.UnsignedMap()
	var bits []bool
	for i, c := range present {
		if n.IsNumericColumn(i) {
			bits = append(bits, unsigned[c])
		}
	}
	// Never empty: an empty bitmap says the server logged no signedness.
	n.SignednessBitmap = make([]byte, max(1, (len(bits)+7)/8))
	for i, u := range bits {
		if u {
			n.SignednessBitmap[i>>3] |= 0x80 >> (uint(i) & 7)
		}
	}
	return n
}

// ErrPartialRowImage: an INSERT into a captured table was logged without
// some of the table's columns (binlog_row_image MINIMAL or NOBLOB in the
// writing session), so the binlog does not hold the row as committed. The
// relay stops before that transaction (PartialImageError).
var ErrPartialRowImage = errors.New("outbox row logged without all its columns (binlog_row_image)")

// absentColumns lists the columns of a table of width columns that a rows
// event's images lack: those whose bit is clear in present (the event's
// columns-present bitmap, one bit per column, least significant first,
// for the event's first count columns) and those at or past count.
func absentColumns(present []byte, count uint64, width int) []int {
	var out []int
	for i := range width {
		if uint64(i) >= count || i>>3 >= len(present) || present[i>>3]&(1<<(uint(i)&7)) == 0 {
			out = append(out, i)
		}
	}
	return out
}

// absentNames names the columns of t that absentColumns finds absent; nil
// when none is.
func absentNames(t *Table, present []byte, count uint64) []string {
	absent := absentColumns(present, count, len(t.Columns))
	if len(absent) == 0 {
		return nil
	}
	names := make([]string, len(absent))
	for i, c := range absent {
		names[i] = t.Columns[c]
	}
	return names
}

// PartialImageError is the stop at transaction GTID, which would publish
// a row of Table whose INSERT image lacks the columns Absent
// (Event.Absent). It wraps ErrPartialRowImage.
type PartialImageError struct {
	GTID   string // the transaction stopped at (an XA transaction's XA COMMIT)
	Table  string // db.table
	Absent []string
	// XID and PreparedAt: an XA transaction, and the GTID of its XA
	// PREPARE; "" otherwise.
	XID, PreparedAt string
	// Published: rows of the transaction published before the stop (it
	// was larger than a batch and published in parts; the checkpoint's
	// partial says so), 0 when none.
	Published int64
}

func (e *PartialImageError) Error() string {
	tx := "transaction " + e.GTID + " "
	switch {
	case e.XID != "" && e.PreparedAt != "":
		tx = fmt.Sprintf("transaction %s (the XA COMMIT of XA transaction %s, prepared at %s) ", e.GTID, e.XID, e.PreparedAt)
	case e.XID != "":
		tx = fmt.Sprintf("transaction %s (XA transaction %s, committed in one phase) ", e.GTID, e.XID)
	}
	what, way := "nothing of the transaction is published",
		fmt.Sprintf("publish that transaction's outbox rows from the table (`outbox-relay replay --event-id ...`), then skip it with "+
			"`outbox-relay checkpoint skip --gtid %s`", e.GTID)
	if e.Published > 0 {
		what = fmt.Sprintf("the transaction, larger than a batch (kafka.batch.max_records, max_bytes), was published in parts: "+
			"its first %d rows were published, the others are not", e.Published)
		way = fmt.Sprintf("skip it with `outbox-relay checkpoint skip --gtid %s`, then publish its rows that were not from the table "+
			"(`outbox-relay audit` names them missing; `outbox-relay replay --event-id ...`)", e.GTID)
	}
	return fmt.Sprintf("%v: %sinserted into %s a row whose binlog image lacks column(s) %s: the writing session logged it with "+
		"binlog_row_image MINIMAL or NOBLOB (set for the session, or globally after the relay started), so the binlog does not "+
		"hold the row's values for them and the relay will not publish NULL in their place; %s. Set binlog_row_image=FULL "+
		"globally (SET GLOBAL and the server's configuration) and in every session that changes it, %s",
		ErrPartialRowImage, tx, e.Table, strings.Join(e.Absent, ", "), what, way)
}

func (e *PartialImageError) Unwrap() error { return ErrPartialRowImage }

// Rows events the reader does not hand to a decoder.
//
// go-mysql's row decoder (RowsEvent.DecodeData) reads images until the
// event's data ends, each image as long as the columns its bitmap says are
// present: an image of no column is zero bytes long, and an event of such
// images with a byte left after them makes it append empty rows without
// end (a few bytes grew the process without bound). It also sizes each
// row by the event's own column count, which nothing ties to the table
// map's: a short event claiming a wide table makes it allocate that many
// values for every byte of data. No server writes either: a rows event has
// as many columns as its table (MySQL and MariaDB allow at most 4,096)
// and an image holds at least one column (the key, under
// binlog_row_image=MINIMAL). So the reader reads the shape from the
// event's header (DecodeHeader) and, for a captured table, does not decode
// such an event (rowsEvent stops at its transaction: ErrMalformedRows),
// and decodes an INSERT image that lacks columns as rows of the columns
// it holds alone (decodePresent: a partial image of a wide table was
// decoded whole, and allocated for every column it lacks).

// ErrMalformedRows: a rows event of a captured table has a shape no MySQL
// or MariaDB server writes (rowsShape); the relay stops before its
// transaction, without decoding it.
var ErrMalformedRows = errors.New("malformed rows event")

// maxTableColumns is MySQL's and MariaDB's limit of columns in a table.
const maxTableColumns = 4096

// rowsShape says why the rows event e (its header decoded) must not be
// decoded; "" when it may.
func rowsShape(e *replication.RowsEvent) string {
	width := e.Table.ColumnCount
	switch {
	case e.ColumnCount != width:
		return fmt.Sprintf("its rows have %d columns and its table map %d", e.ColumnCount, width)
	case width == 0 || width > maxTableColumns:
		return fmt.Sprintf("its table has %d columns (a table has 1 to %d)", width, maxTableColumns)
	case presentCount(e.ColumnBitmap1, width) == 0 && presentCount(e.ColumnBitmap2, width) == 0:
		return "its row images hold no column"
	}
	return ""
}

// partialInsert reports whether e is an INSERT whose image lacks a column
// of its own.
func partialInsert(e *replication.RowsEvent) bool {
	return e.Type() == replication.EnumRowsEventTypeInsert && presentCount(e.ColumnBitmap1, e.ColumnCount) < e.ColumnCount
}

// presentCount counts the columns bitmap marks present among the first
// width.
func presentCount(bitmap []byte, width uint64) uint64 {
	var n uint64
	for i, b := range bitmap {
		first := uint64(i) * 8
		if first >= width {
			break
		}
		if left := width - first; left < 8 {
			b &= byte(1)<<left - 1
		}
		n += uint64(bits.OnesCount8(b))
	}
	return n
}

// malformedRowsError is the stop at transaction gtid, whose rows event of
// a captured table has the shape why.
func malformedRowsError(gtid string, e *replication.RowsEvent, why string) error {
	return fmt.Errorf("%w: transaction %s: a rows event of %s.%s that no MySQL or MariaDB server writes: %s; the relay did not decode it "+
		"and publishes nothing of the transaction. Find out who answers on source.hosts; if it is your server, publish the transaction's "+
		"outbox rows from the table (`outbox-relay replay --event-id ...`), then skip it with `outbox-relay checkpoint skip --gtid %s`",
		ErrMalformedRows, gtid, e.Table.Schema, e.Table.Table, why, gtid)
}
