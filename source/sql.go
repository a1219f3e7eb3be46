package source

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/binlog"
)

// Statements the commands that read the captured tables (replay, prune,
// audit) share: quoting, the session's time zone, a column's type, the
// executed GTID set.

// UTCSession makes conn's session show TIMESTAMP columns in UTC, as the
// relay renders them from the binlog (a row read again must route to the
// same record), and returns the session's zone before: the zone DEFAULT
// CURRENT_TIMESTAMP filled DATETIME columns in for applications that left
// it alone.
func UTCSession(conn *binlog.Conn) (string, error) {
	res, err := conn.Execute("SELECT @@SESSION.time_zone")
	if err != nil {
		return "", fmt.Errorf("read session time zone: %w", err)
	}
	zone, err := res.GetString(0, 0)
	if err != nil {
		return "", fmt.Errorf("read session time zone: %w", err)
	}
	if _, err := conn.Execute("SET time_zone = '+00:00'"); err != nil {
		return "", fmt.Errorf("set session time zone to UTC: %w", err)
	}
	return zone, nil
}

// StoredBytesSession makes conn's session return text columns with their
// bytes as stored, in the column's own character set (the result's field
// names it), as the binlog gives them to the relay: character_set_results
// NULL. Otherwise the server converts a latin1 payload to the
// connection's utf8mb4, and a row read again would not route to the
// record the relay published.
func StoredBytesSession(conn *binlog.Conn) error {
	if _, err := conn.Execute("SET character_set_results = NULL"); err != nil {
		return fmt.Errorf("read text as stored: %w", err)
	}
	return nil
}

// ColumnType is the DATA_TYPE (lower case) of column col of table t.
func ColumnType(conn *binlog.Conn, t, col string) (string, error) {
	db, tbl, _ := strings.Cut(t, ".")
	res, err := conn.Execute("SELECT LOWER(DATA_TYPE) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND COLUMN_NAME = ?", db, tbl, col)
	if err != nil {
		return "", fmt.Errorf("read type of column %s: %w", col, err)
	}
	if res.RowNumber() == 0 {
		return "", fmt.Errorf("table has no column %q (the time column: --time-column, router timestamp_column, else created_at)", col)
	}
	return res.GetString(0, 0)
}

// CheckZone fails when the server cannot convert a time to zone (a named
// zone without the time zone tables: CONVERT_TZ gives NULL, and a range
// compared with NULL selects nothing, silently).
func CheckZone(conn *binlog.Conn, zone string) error {
	res, err := conn.Execute("SELECT CONVERT_TZ('2000-01-01 00:00:00', '+00:00', ?) IS NULL", zone)
	if err != nil {
		return fmt.Errorf("check time zone %s: %w", zone, err)
	}
	if null, _ := res.GetInt(0, 0); null != 0 {
		return fmt.Errorf("the server cannot convert times to its time zone %q (no time zone tables: load them with mariadb-tzinfo-to-sql, or mysql_tzinfo_to_sql on MySQL)", zone)
	}
	return nil
}

// Executed reads the server's executed GTID set: MariaDB's
// gtid_binlog_pos (written to the binlog before the commit is visible),
// MySQL's gtid_executed, and the server's flavor.
func Executed(conn *binlog.Conn) (string, string, error) {
	vars, err := Variables(conn)
	if err != nil {
		return "", "", fmt.Errorf("read server variables: %w", err)
	}
	srv, err := Describe(conn, "", vars)
	if err != nil {
		return "", "", fmt.Errorf("read executed gtid set: %w", err)
	}
	return srv.Head, srv.Flavor, nil
}

// QuoteIdent quotes an identifier with backticks.
func QuoteIdent(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }

// QuoteTable quotes a db.table name, each part as QuoteIdent does.
func QuoteTable(t string) (string, error) {
	db, tbl, ok := strings.Cut(t, ".")
	if !ok {
		return "", fmt.Errorf("table %q is not db.table", t)
	}
	return QuoteIdent(db) + "." + QuoteIdent(tbl), nil
}

// Placeholders is n comma-separated ? placeholders.
func Placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

// PrimaryKey lists table t's ("db.table") primary key columns in key
// order; none when it has no primary key (or does not exist).
func PrimaryKey(conn *binlog.Conn, t string) ([]string, error) {
	db, tbl, _ := strings.Cut(t, ".")
	res, err := conn.Execute(`SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE
WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION`, db, tbl)
	if err != nil {
		return nil, fmt.Errorf("read primary key: %w", err)
	}
	var cols []string
	for i := range res.RowNumber() {
		c, err := res.GetString(i, 0)
		if err != nil {
			return nil, fmt.Errorf("read primary key: %w", err)
		}
		cols = append(cols, c)
	}
	return cols, nil
}
