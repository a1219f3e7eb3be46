package binlog

import (
	"bytes"
	"slices"

	"github.com/go-mysql-org/go-mysql/replication"
)

// latin1Collations are the collation ids of MySQL's and MariaDB's latin1.
var latin1Collations = map[uint64]bool{5: true, 8: true, 15: true, 31: true, 47: true, 48: true, 49: true, 94: true,
	1032: true, 1071: true}

// IsLatin1 reports whether collation (an id of the binlog's or of a
// result's field) is one of latin1's: Table.Latin1 marks such columns.
func IsLatin1(collation uint64) bool { return latin1Collations[collation] }

func latin1Columns(t *replication.TableMapEvent, n int) []bool {
	var out []bool
	for i, coll := range t.CollationMap() {
		if latin1Collations[coll] && i < n {
			if out == nil {
				out = make([]bool, n)
			}
			out[i] = true
		}
	}
	return out
}

// cachedTable is a Table and the table map metadata it was built from
// beyond what the Table itself holds.
type cachedTable struct {
	table *Table
	// tm is the table map it was built from: the stream's parser hands the
	// same one again while the table's table map repeats (hotparse.go).
	tm *replication.TableMapEvent
	// mapSchema and mapTable: the names the table map gave (table's are
	// the configured ones).
	mapSchema, mapTable string
	// named: the columns are the binlog's own names (not the tracked layout).
	named bool
	// signs: how to read its integer columns (nil: as decoded).
	signs                  *signFix
	signBits               []byte
	colType                []byte
	colMeta                []uint16
	defCharset, colCharset []uint64
}

func newCachedTable(tm *replication.TableMapEvent, t *Table, signs *signFix) *cachedTable {
	return &cachedTable{table: t, tm: tm, mapSchema: string(tm.Schema), mapTable: string(tm.Table), named: len(tm.ColumnName) > 0, signs: signs, signBits: slices.Clone(tm.SignednessBitmap), colType: slices.Clone(tm.ColumnType),
		colMeta: slices.Clone(tm.ColumnMeta), defCharset: slices.Clone(tm.DefaultCharset), colCharset: slices.Clone(tm.ColumnCharset)}
}

// matches reports whether tm describes the table exactly as the one c was
// built from (all that columns and latin1Columns read).
func (c *cachedTable) matches(tm *replication.TableMapEvent) bool {
	if c.tm == tm {
		return true
	}
	t := c.table
	if string(tm.Schema) != c.mapSchema || string(tm.Table) != c.mapTable || !bytes.Equal(c.colType, tm.ColumnType) ||
		!bytes.Equal(c.signBits, tm.SignednessBitmap) ||
		!slices.Equal(c.colMeta, tm.ColumnMeta) || !slices.Equal(c.defCharset, tm.DefaultCharset) ||
		!slices.Equal(c.colCharset, tm.ColumnCharset) || c.named != (len(tm.ColumnName) > 0) {
		return false
	}
	if !c.named {
		return true
	}
	if len(tm.ColumnName) != len(t.Columns) {
		return false
	}
	for i, n := range tm.ColumnName {
		if string(n) != t.Columns[i] {
			return false
		}
	}
	return true
}
