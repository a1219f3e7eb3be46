package mysqlsource

import (
	"encoding/binary"
	"fmt"
	"time"

	vtmysql "vitess.io/vitess/go/mysql"
)

// ColumnType is a column type the double can log.
type ColumnType uint8

// Column types: their MySQL binlog type codes and metadata are in
// typeInfo.
const (
	Bigint    ColumnType = iota + 1 // BIGINT: int64
	Int                             // INT: int64 (32 bits)
	Varchar64                       // VARCHAR(64) utf8mb4: string
	JSON                            // JSON: string holding JSON text
	Datetime3                       // DATETIME(3): time.Time (UTC)
	Longtext                        // LONGTEXT utf8mb4: string (MariaDB's JSON is one)
)

// Column is one column of a table the double logs.
type Column struct {
	Name string
	Type ColumnType
}

// Table is a table of the double: its columns and the table id its table
// map events carry.
type Table struct {
	DB, Name string
	Columns  []Column
	// PrimaryKey is the index of the primary key column (FULL metadata).
	PrimaryKey int
	id         uint64
}

// OutboxColumns are the article's outbox table (as internal/itest's
// OutboxDDL) in MySQL types.
var OutboxColumns = []Column{
	{"id", Bigint}, {"event_id", Varchar64}, {"aggregate_type", Varchar64}, {"aggregate_id", Varchar64},
	{"event_type", Varchar64}, {"payload", JSON}, {"created_at", Datetime3},
}

// OutboxDDL is the CREATE TABLE the double logs for an outbox table (the
// schema tracker reads it when table maps carry no column names).
const OutboxDDL = "CREATE TABLE `%s`.`%s` (\n" +
	"  `id` bigint NOT NULL AUTO_INCREMENT,\n  `event_id` varchar(64) NOT NULL,\n" +
	"  `aggregate_type` varchar(64) NOT NULL,\n  `aggregate_id` varchar(64) NOT NULL,\n" +
	"  `event_type` varchar(64) NOT NULL,\n  `payload` json NOT NULL,\n" +
	"  `created_at` datetime(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),\n" +
	"  PRIMARY KEY (`id`),\n  UNIQUE KEY `uk_event_id` (`event_id`)\n" +
	") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_0900_ai_ci"

// MySQL binlog column types (include/field_types.h).
const (
	typeLong      = 3
	typeLongLong  = 8
	typeVarchar   = 15
	typeDatetime2 = 18
	typeJSON      = 245
	typeBlob      = 252 // BLOB and TEXT of every size: the metadata is the length's bytes
)

// utf8mb4_0900_ai_ci, MySQL 8's default collation.
const collationUTF8MB4 = 255

func typeInfo(t ColumnType) (code byte, meta uint16, sqlType string) {
	switch t {
	case Bigint:
		return typeLongLong, 0, "bigint"
	case Int:
		return typeLong, 0, "int"
	case Varchar64:
		return typeVarchar, 64 * 4, "varchar(64)"
	case JSON:
		return typeJSON, 4, "json"
	case Datetime3:
		return typeDatetime2, 3, "datetime(3)"
	case Longtext:
		return typeBlob, 4, "longtext"
	}
	panic(fmt.Sprintf("mysqlsource: unknown column type %d", t))
}

// tableMapEvent builds the table map with Vitess's builder and appends
// MySQL's optional metadata (binlog_row_metadata): MINIMAL has signedness
// and the default charset; FULL adds column names and the primary key.
func (w *writer) tableMapEvent(t *Table, full bool) event {
	tm := &vtmysql.TableMap{Flags: 1, Database: t.DB, Name: t.Name, CanBeNull: vtmysql.NewServerBitmap(len(t.Columns))}
	numeric := 0
	for _, c := range t.Columns {
		code, meta, _ := typeInfo(c.Type)
		tm.Types = append(tm.Types, code)
		tm.Metadata = append(tm.Metadata, meta)
		if code == typeLong || code == typeLongLong {
			numeric++
		}
	}
	base := vtmysql.NewTableMapEvent(w.f, w.s, t.id, tm).Bytes()
	body := append([]byte(nil), w.body(base)...)
	tlv := func(typ byte, v []byte) {
		body = append(body, typ)
		body = appendPacked(body, uint64(len(v)))
		body = append(body, v...)
	}
	if numeric > 0 {
		tlv(1, make([]byte, (numeric+7)/8)) // SIGNEDNESS: all signed
	}
	tlv(2, appendPacked(nil, collationUTF8MB4)) // DEFAULT_CHARSET, no exceptions
	if full {
		var names []byte
		for _, c := range t.Columns {
			names = appendPacked(names, uint64(len(c.Name)))
			names = append(names, c.Name...)
		}
		tlv(4, names)                                   // COLUMN_NAME
		tlv(8, appendPacked(nil, uint64(t.PrimaryKey))) // SIMPLE_PRIMARY_KEY
		tlv(12, visible(len(t.Columns)))                // COLUMN_VISIBILITY
	}
	return w.raw(evTableMap, 0, body)
}

// writeRowsEvent encodes an insert of rows with Vitess's WRITE_ROWS_EVENT
// v2 builder; the cells are encoded here (encodeCell). The images hold the
// columns logged marks (nil: every column, binlog_row_image FULL; else as
// MINIMAL or NOBLOB log them: the columns-present bitmap without the
// others, the NULL bitmap and the values over the logged ones only).
func (w *writer) writeRowsEvent(t *Table, rows [][]any, logged []bool, last bool) (event, error) {
	n := len(t.Columns)
	r := vtmysql.Rows{DataColumns: vtmysql.NewServerBitmap(n)}
	if last {
		r.Flags = 1 // STMT_END_F
	}
	for i := range n {
		r.DataColumns.Set(i, logged == nil || logged[i])
	}
	for _, row := range rows {
		out, err := imageOf(t, row, logged)
		if err != nil {
			return nil, err
		}
		r.Rows = append(r.Rows, vtmysql.Row{NullColumns: out.nulls, Data: out.data})
	}
	return event(vtmysql.NewWriteRowsEvent(w.f, w.s, t.id, r).Bytes()), nil
}

// image is one row image: the NULL bitmap over the logged columns and the
// logged values that are not NULL.
type image struct {
	nulls vtmysql.Bitmap
	data  []byte
}

// imageOf encodes row (a value for each of t's columns) as an image of the
// columns logged marks (nil: all).
func imageOf(t *Table, row []any, logged []bool) (image, error) {
	n := len(t.Columns)
	if len(row) != n {
		return image{}, fmt.Errorf("row of %s.%s: %d values for %d columns", t.DB, t.Name, len(row), n)
	}
	count := 0
	for i := range n {
		if logged == nil || logged[i] {
			count++
		}
	}
	out := image{nulls: vtmysql.NewServerBitmap(count)}
	at := 0
	for i, v := range row {
		if logged != nil && !logged[i] {
			continue
		}
		at++
		if v == nil {
			out.nulls.Set(at-1, true)
			continue
		}
		cell, err := encodeCell(t.Columns[i].Type, v)
		if err != nil {
			return image{}, fmt.Errorf("column %s of %s.%s: %w", t.Columns[i].Name, t.DB, t.Name, err)
		}
		out.data = append(out.data, cell...)
	}
	return out, nil
}

// MySQL's rows event types the double encodes itself.
const (
	evUpdateRowsV2   = 31 // UPDATE_ROWS_EVENT (v2)
	evPartialUpdate  = 39 // PARTIAL_UPDATE_ROWS_EVENT
	rowsStmtEndFlag  = 1  // STMT_END_F
	partialJSONValue = 1  // binlog_row_value_options: PARTIAL_JSON_UPDATES
)

// updateRowsEvent encodes an update of u.Rows (before and after images,
// of the columns u.Before and u.After mark): UPDATE_ROWS_EVENT v2, or with
// u.PartialJSON a PARTIAL_UPDATE_ROWS_EVENT as MySQL writes it under
// binlog_row_value_options=PARTIAL_JSON (each after image led by its value
// options and a bit per JSON column, none set here: every JSON value is
// whole).
func (w *writer) updateRowsEvent(u Update, last bool) (event, error) {
	t := u.Table
	n := len(t.Columns)
	typ := byte(evUpdateRowsV2)
	if u.PartialJSON {
		typ = evPartialUpdate
	}
	flags := uint16(0)
	if last {
		flags = rowsStmtEndFlag
	}
	b := binary.LittleEndian.AppendUint64(nil, t.id)[:6]
	b = binary.LittleEndian.AppendUint16(b, flags)
	b = binary.LittleEndian.AppendUint16(b, 2) // no extra row data
	b = appendPacked(b, uint64(n))
	b = append(b, presentBitmap(n, u.Before)...)
	b = append(b, presentBitmap(n, u.After)...)
	jsonCols := 0
	for _, c := range t.Columns {
		if c.Type == JSON {
			jsonCols++
		}
	}
	for _, pair := range u.Rows {
		before, err := imageOf(t, pair[0], u.Before)
		if err != nil {
			return nil, err
		}
		after, err := imageOf(t, pair[1], u.After)
		if err != nil {
			return nil, err
		}
		b = append(append(b, before.nulls.Bits()...), before.data...)
		if u.PartialJSON {
			b = appendPacked(b, partialJSONValue)
			b = append(b, make([]byte, (jsonCols+7)/8)...)
		}
		b = append(append(b, after.nulls.Bits()...), after.data...)
	}
	return w.raw(typ, 0, b), nil
}

// presentBitmap is a rows event's columns-present bitmap of n columns, the
// logged ones set (nil: all).
func presentBitmap(n int, logged []bool) []byte {
	out := make([]byte, (n+7)/8)
	for i := range n {
		if logged == nil || logged[i] {
			out[i/8] |= 1 << (i % 8)
		}
	}
	return out
}

// encodeCell encodes one value as a row image stores it.
func encodeCell(t ColumnType, v any) ([]byte, error) {
	switch t {
	case Bigint, Int:
		n, ok := v.(int64)
		if !ok {
			if i, isInt := v.(int); isInt {
				n, ok = int64(i), true
			}
		}
		if !ok {
			return nil, fmt.Errorf("want an integer, got %T", v)
		}
		if t == Int {
			return binary.LittleEndian.AppendUint32(nil, uint32(int32(n))), nil
		}
		return binary.LittleEndian.AppendUint64(nil, uint64(n)), nil
	case Varchar64:
		s, ok := v.(string)
		if !ok || len(s) > 256 {
			return nil, fmt.Errorf("want a string of at most 256 bytes, got %T", v)
		}
		return append(binary.LittleEndian.AppendUint16(nil, uint16(len(s))), s...), nil
	case JSON:
		if raw, ok := v.(RawJSON); ok {
			return append(binary.LittleEndian.AppendUint32(nil, uint32(len(raw))), raw...), nil
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want JSON text or RawJSON, got %T", v)
		}
		b, err := EncodeJSON(s)
		if err != nil {
			return nil, err
		}
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(b))), b...), nil
	case Longtext:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("want a string, got %T", v)
		}
		return append(binary.LittleEndian.AppendUint32(nil, uint32(len(s))), s...), nil
	case Datetime3:
		tm, ok := v.(time.Time)
		if !ok {
			return nil, fmt.Errorf("want a time.Time, got %T", v)
		}
		return datetime2(tm.UTC(), 3), nil
	}
	return nil, fmt.Errorf("unknown column type %d", t)
}

// datetime2 is MySQL's DATETIME(fsp) storage: 5 bytes big endian of
// ((year*13+month)<<5|day)<<17 | hour<<12 | minute<<6 | second, plus
// 0x8000000000, then the fraction (fsp 3: 2 bytes, hundreds of
// microseconds).
func datetime2(t time.Time, fsp int) []byte {
	ymd := uint64(t.Year()*13+int(t.Month()))<<5 | uint64(t.Day())
	hms := uint64(t.Hour())<<12 | uint64(t.Minute())<<6 | uint64(t.Second())
	v := (ymd<<17 | hms) + 0x8000000000
	out := []byte{byte(v >> 32), byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
	switch fsp {
	case 3:
		f := uint16(t.Nanosecond() / 1000 / 1000 * 10)
		out = append(out, byte(f>>8), byte(f))
	}
	return out
}

// visible is the COLUMN_VISIBILITY bitmap of n visible columns: optional
// metadata bitmaps are most significant bit first.
func visible(n int) []byte {
	b := make([]byte, (n+7)/8)
	for i := range n {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return b
}
