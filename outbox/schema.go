package outbox

import (
	"fmt"
	"slices"
	"strings"
)

// Flavor is the SQL dialect a CREATE TABLE is written for.
type Flavor string

// Flavors.
const (
	MySQL   Flavor = "mysql"   // MySQL 8.0 and later
	MariaDB Flavor = "mariadb" // MariaDB 10.6 and later
)

// TableSpec describes an outbox table for CreateTable.
type TableSpec struct {
	Table   string // "outbox" or "db.outbox"
	Columns Columns
	// Debezium lays the table out as Debezium's outbox table: the event id
	// is the primary key; an auto-increment column seq (unique key, not
	// the primary key) records the write order of the rows of one
	// statement, which share a time, so that `outbox-relay replay`
	// re-publishes them in that order.
	Debezium bool
	// SchemaVersion and Additional are more columns the router reads
	// (router.schema_version_column, router.additional_fields).
	SchemaVersion string
	Additional    []string
	// TimeColumn is the column `prune --older-than` reads; default
	// created_at (added when no column of that name exists).
	TimeColumn string
}

// CreateTable renders the CREATE TABLE for spec in flavor. The table is
// append-only: the relay publishes INSERTs, and `outbox-relay prune`
// deletes published rows by event id and age (both indexed).
func CreateTable(flavor Flavor, spec TableSpec) (string, error) {
	if flavor != MySQL && flavor != MariaDB {
		return "", fmt.Errorf("create table: flavor %q: want mysql or mariadb", flavor)
	}
	c := spec.Columns
	for _, n := range []string{c.EventID, c.AggregateType, c.AggregateID, c.Payload} {
		if n == "" {
			return "", fmt.Errorf("create table: event id, aggregate type, aggregate id and payload columns must be named")
		}
	}
	timeCol := spec.TimeColumn
	if timeCol == "" {
		timeCol = "created_at"
		if c.Timestamp != "" {
			timeCol = c.Timestamp
		}
	}
	table, err := quoteTable(spec.Table)
	if err != nil {
		return "", fmt.Errorf("create table: %w", err)
	}
	var lines, seen []string
	add := func(name, def string) error {
		if slices.Contains(seen, name) {
			return nil
		}
		q, err := quoteIdent(name)
		if err != nil {
			return fmt.Errorf("create table: %w", err)
		}
		seen = append(seen, name)
		lines = append(lines, fmt.Sprintf("  %-18s %s", q, def))
		return nil
	}
	var payload string
	if flavor == MariaDB {
		// MariaDB's JSON is LONGTEXT with a JSON_VALID check: the relay
		// publishes the text exactly as written.
		payload = "JSON          NOT NULL COMMENT 'LONGTEXT + JSON_VALID check: published byte for byte'"
	} else {
		// MySQL stores binary JSON: the relay publishes go-mysql's
		// rendering (keys sorted, whitespace normalised).
		payload = "JSON          NOT NULL COMMENT 'binary JSON: published re-rendered, keys sorted'"
	}
	idLen := "VARCHAR(64) "
	if spec.Debezium {
		idLen = "VARCHAR(255)"
	}
	steps := []struct{ name, def string }{}
	if !spec.Debezium {
		steps = append(steps, struct{ name, def string }{"id", "BIGINT        NOT NULL AUTO_INCREMENT"})
	} else {
		steps = append(steps, struct{ name, def string }{"seq", "BIGINT        NOT NULL AUTO_INCREMENT COMMENT 'write order: replay sorts by time, then seq'"})
	}
	steps = append(steps,
		struct{ name, def string }{c.EventID, "VARCHAR(64)   NOT NULL"},
		struct{ name, def string }{c.AggregateType, idLen + "  NOT NULL"},
		struct{ name, def string }{c.AggregateID, idLen + "  NOT NULL"},
	)
	if c.EventType != "" {
		steps = append(steps, struct{ name, def string }{c.EventType, idLen + "  NOT NULL"})
	}
	steps = append(steps, struct{ name, def string }{c.Payload, payload})
	if spec.SchemaVersion != "" {
		steps = append(steps, struct{ name, def string }{spec.SchemaVersion, "VARCHAR(32)   NULL"})
	}
	for _, a := range spec.Additional {
		steps = append(steps, struct{ name, def string }{a, "VARCHAR(255)  NULL"})
	}
	if c.TracingSpanContext != "" {
		steps = append(steps, struct{ name, def string }{c.TracingSpanContext, "VARCHAR(1024) NULL COMMENT 'W3C trace context: traceparent=/tracestate= lines'"})
	}
	steps = append(steps, struct{ name, def string }{timeCol, "DATETIME(3)   NOT NULL DEFAULT CURRENT_TIMESTAMP(3)"})
	for _, s := range steps {
		if err := add(s.name, s.def); err != nil {
			return "", err
		}
	}
	qe, _ := quoteIdent(c.EventID)
	qt, _ := quoteIdent(timeCol)
	if spec.Debezium {
		lines = append(lines, "  PRIMARY KEY ("+qe+")", "  UNIQUE KEY uk_seq (`seq`)")
	} else {
		lines = append(lines, "  PRIMARY KEY (`id`)", "  UNIQUE KEY uk_event_id ("+qe+")")
	}
	lines = append(lines, "  KEY idx_"+strings.ReplaceAll(timeCol, "`", "")+" ("+qt+")")
	opts := "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
	header := "-- " + string(flavor) + ": outbox table (INSERT only; outbox-relay publishes committed rows)\n"
	return header + "CREATE TABLE " + table + " (\n" + strings.Join(lines, ",\n") + "\n) " + opts + ";\n", nil
}
