package binlog

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// ErrNoSignedness: a captured table's row holds a negative value in an
// integer column whose signedness neither the binlog (binlog_row_metadata
// NO_LOG, MariaDB's default) nor the tracked layout gives: it is either that
// negative number or a large UNSIGNED one, and the relay does not guess.
var ErrNoSignedness = errors.New("integer signedness unknown")

// signFix says how to read a table's integer columns when its table map
// carries no signedness (go-mysql, and decodeInsertRows like it, then read
// them all as signed): the UNSIGNED ones, and those whose signedness is
// not known.
type signFix struct{ cols []signCol }

type signCol struct {
	i       int
	name    string
	tp      byte
	unknown bool // signedness not known (else: UNSIGNED)
}

func isInteger(tp byte) bool {
	switch tp {
	case mysql.MYSQL_TYPE_TINY, mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_LONGLONG:
		return true
	}
	return false
}

// hasSignedness reports whether tm says which of its numeric columns are
// UNSIGNED (binlog_row_metadata MINIMAL or FULL), or has none to say it of.
func hasSignedness(tm *replication.TableMapEvent) bool {
	if len(tm.SignednessBitmap) > 0 {
		return true
	}
	for i := range int(tm.ColumnCount) {
		if tm.IsNumericColumn(i) {
			return false
		}
	}
	return true
}

// binlogUnsigned lists the columns tm marks UNSIGNED.
func binlogUnsigned(tm *replication.TableMapEvent, cols []string) []string {
	var out []string
	m := tm.UnsignedMap()
	for i, c := range cols {
		if m[i] {
			out = append(out, c)
		}
	}
	return out
}

// planSigns is nil when tm's rows need no fixing: it carries signedness, or
// has no integer column that is UNSIGNED or of unknown signedness. unsigned
// (known says whether it is) are the table's UNSIGNED columns by name.
func planSigns(tm *replication.TableMapEvent, cols, unsigned []string, known bool) *signFix {
	if len(tm.SignednessBitmap) > 0 {
		return nil
	}
	var f signFix
	for i, c := range cols {
		if i >= len(tm.ColumnType) || !isInteger(tm.ColumnType[i]) {
			continue
		}
		if !known || slices.ContainsFunc(unsigned, func(u string) bool { return strings.EqualFold(u, c) }) {
			f.cols = append(f.cols, signCol{i: i, name: c, tp: tm.ColumnType[i], unknown: !known})
		}
	}
	if len(f.cols) == 0 {
		return nil
	}
	return &f
}

// apply reads rows' UNSIGNED columns as the server stores them, with the
// types go-mysql gives them with signedness metadata (uint32, not int32:
// a bad row's error, which names the type, is then the same too): the
// signed values the decoders gave are the same bits.
// A negative value in a column of unknown signedness is ErrNoSignedness when
// published says the rows are (inserts); deleted or updated outbox rows are
// only counted, so their values do not matter.
func (f *signFix) apply(rows [][]any, published bool, table, gtid string) error {
	return f.applyAt(rows, nil, published, table, gtid)
}

// applyAt is apply for rows that hold the columns at (indexes in the
// table's columns; nil: every column, in order) only: a partial image's
// (PartialImage).
func (f *signFix) applyAt(rows [][]any, at []int, published bool, table, gtid string) error {
	for _, row := range rows {
		for _, c := range f.cols {
			i := c.i
			if at != nil {
				i = slices.Index(at, c.i)
			}
			switch {
			case i < 0 || i >= len(row):
			case !c.unknown:
				row[i] = asUnsigned(row[i], c.tp)
			case published && negative(row[i]):
				return fmt.Errorf("%w: %s at %s: column %s holds %v, or %v if it is UNSIGNED: the binlog does not say "+
					"(binlog_row_metadata=NO_LOG) and the tracked layout does not either (it was learned from the binlog's column "+
					"names, or comes from a checkpoint written before signedness was tracked). Set binlog_row_metadata=MINIMAL "+
					"or FULL on the server for new transactions; for this one, if the table's definition has not changed since, "+
					"record it with `outbox-relay checkpoint set --gtid <the checkpoint's set> --schema server`",
					ErrNoSignedness, table, gtid, c.name, row[i], asUnsigned(row[i], c.tp))
			}
		}
	}
	return nil
}

func negative(v any) bool {
	switch x := v.(type) {
	case int8:
		return x < 0
	case int16:
		return x < 0
	case int32:
		return x < 0
	case int64:
		return x < 0
	}
	return false
}

// asUnsigned is v, decoded as a signed column of binlog type tp, read as
// the unsigned column's value go-mysql gives with signedness metadata.
// Anything else (NULL, an unsigned value already) is returned as it is.
func asUnsigned(v any, tp byte) any {
	switch x := v.(type) {
	case int8:
		if tp == mysql.MYSQL_TYPE_TINY {
			return uint8(x)
		}
	case int16:
		if tp == mysql.MYSQL_TYPE_SHORT {
			return uint16(x)
		}
	case int32:
		switch tp {
		case mysql.MYSQL_TYPE_INT24:
			return uint32(x) & 0xFFFFFF
		case mysql.MYSQL_TYPE_LONG:
			return uint32(x)
		}
	case int64:
		if tp == mysql.MYSQL_TYPE_LONGLONG {
			return uint64(x)
		}
	}
	return v
}
