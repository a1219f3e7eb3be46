package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// ErrEventIDTooLong is returned for a record whose event id (or a Store
// whose consumer name) does not fit the consumed-event table's column:
// the server would cut it (non-strict sql_mode: two long ids would collide
// and the second be skipped as done) or refuse it (strict: error 1406 on
// every delivery). Nothing is inserted; widen the column
// (docs/application-kit.md).
var ErrEventIDTooLong = errors.New("event id longer than the consumed-event column")

// ErrMarkerColumn is returned when the consumed-event table's
// consumer_name or event_id column compares case-insensitively or ignores
// trailing spaces (a VARCHAR with a _ci or PAD SPACE collation): distinct
// event ids could be taken for one and an event skipped. Migrate the table
// to VARBINARY(255) as DDL creates it (docs/application-kit.md).
var ErrMarkerColumn = errors.New("consumed-event column does not compare ids exactly")

// markerColumn is what the table says of one key column.
type markerColumn struct {
	binary  bool // VARBINARY/BINARY: length in bytes, exact comparison
	maxLen  int  // characters (text) or bytes (binary)
	exactly bool // compared byte for byte (binary, or a NO PAD binary collation)
	desc    string
}

// columnCheck reads the table's key columns once (again after an error).
type columnCheck struct {
	mu   sync.Mutex
	cols map[string]markerColumn // by lower-case column name
}

func (c *columnCheck) check(ctx context.Context, db *sql.DB, table, name, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cols == nil {
		cols, err := readMarkerColumns(ctx, db, table)
		if err != nil {
			return err
		}
		c.cols = cols
	}
	for _, v := range []struct{ col, what, val string }{{"consumer_name", "consumer name", name}, {"event_id", "event id", id}} {
		mc, ok := c.cols[v.col]
		if !ok {
			return fmt.Errorf("check consumed-event table %s: it has no column %s (create it with inbox.DDL)", table, v.col)
		}
		if !mc.exactly {
			return fmt.Errorf("check consumed-event table %s: %w: %s is %s", table, ErrMarkerColumn, v.col, mc.desc)
		}
		n := len(v.val)
		if !mc.binary {
			n = utf8.RuneCountInString(v.val)
		}
		if n > mc.maxLen {
			return fmt.Errorf("%w: %s %q is %d long, column %s.%s holds %d (%s)", ErrEventIDTooLong, v.what, v.val, n, table, v.col, mc.maxLen, mc.desc)
		}
	}
	return nil
}

// readMarkerColumns reads consumer_name and event_id of table from
// information_schema (table "t" is in the connection's database).
func readMarkerColumns(ctx context.Context, db *sql.DB, table string) (map[string]markerColumn, error) {
	schema, tbl, ok := strings.Cut(table, ".")
	q := `SELECT LOWER(COLUMN_NAME), LOWER(DATA_TYPE), CHARACTER_MAXIMUM_LENGTH, COALESCE(COLLATION_NAME, ''), COLUMN_TYPE
FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND LOWER(COLUMN_NAME) IN ('consumer_name', 'event_id')`
	args := []any{schema, tbl}
	if !ok {
		q = strings.Replace(q, "TABLE_SCHEMA = ?", "TABLE_SCHEMA = DATABASE()", 1)
		args = []any{table}
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("check consumed-event table %s: %w", table, err)
	}
	defer rows.Close()
	out := map[string]markerColumn{}
	for rows.Next() {
		var name, typ, coll, colType string
		var maxLen sql.NullInt64
		if err := rows.Scan(&name, &typ, &maxLen, &coll, &colType); err != nil {
			return nil, fmt.Errorf("check consumed-event table %s: %w", table, err)
		}
		mc := markerColumn{maxLen: int(maxLen.Int64), desc: colType}
		switch typ {
		case "varbinary", "binary":
			mc.binary, mc.exactly = true, true
		case "varchar", "char":
			mc.exactly = exactCollation(coll)
			mc.desc += " COLLATE " + coll
		default:
			mc.desc += " (want VARBINARY)"
		}
		out[name] = mc
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("check consumed-event table %s: %w", table, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("check consumed-event table %s: table not found (create it with inbox.DDL)", table)
	}
	return out, nil
}

// exactCollation: a binary collation without trailing-space padding
// (MariaDB's *_nopad_bin, MySQL 8's utf8mb4_0900_bin). Plain *_bin
// collations are PAD SPACE: "evt-1" equals "evt-1 ".
func exactCollation(c string) bool {
	c = strings.ToLower(c)
	return strings.HasSuffix(c, "_nopad_bin") || c == "utf8mb4_0900_bin" || c == "binary"
}
