package binlog

import (
	"errors"
	"fmt"
	"strings"
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
// The reader refuses every INSERT image of a captured table that lacks a
// column, whichever column it is: the envelope and CloudEvents values,
// the dead-letter value and any column a router setting names would all
// carry a NULL the row never held. UPDATE and DELETE images are the
// router's invalid operations, only counted: a partial one is left as it
// is.

// ErrPartialRowImage: an INSERT into a captured table was logged without
// some of the table's columns (binlog_row_image MINIMAL or NOBLOB in the
// writing session), so the binlog does not hold the row as committed. The
// relay stops before that transaction.
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

// partialImageError is the stop at transaction gtid, whose INSERT into t
// lacks the columns absent (indexes of t.Columns).
func partialImageError(gtid string, t *Table, absent []int) error {
	names := make([]string, len(absent))
	for i, c := range absent {
		names[i] = t.Columns[c]
	}
	return fmt.Errorf("%w: transaction %s inserted into %s a row whose binlog image lacks column(s) %s: "+
		"the writing session logged it with binlog_row_image MINIMAL or NOBLOB (set for the session, or globally after "+
		"the relay started), so the binlog does not hold the row's values for them and the relay will not publish NULL "+
		"in their place; nothing of the transaction is published. Set binlog_row_image=FULL globally (SET GLOBAL and the "+
		"server's configuration) and in every session that changes it, publish that transaction's outbox rows from the "+
		"table (`outbox-relay replay --event-id ...`), then skip it with `outbox-relay checkpoint skip --gtid %s`",
		ErrPartialRowImage, gtid, t, strings.Join(names, ", "), gtid)
}
