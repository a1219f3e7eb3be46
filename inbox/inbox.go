// Package inbox is the idempotent consumer of outbox events: exactly-once
// ends at Kafka, so a consumer that changes a database can crash after its
// commit and before its offset commit, and gets the record again. inbox
// makes that redelivery harmless, as the article's consumed_event table
// does:
//
//  1. begin a local transaction;
//  2. INSERT (consumer_name, event_id) INTO consumed_event: a duplicate of
//     exactly that primary key (MySQL/MariaDB error 1062 naming PRIMARY)
//     means this consumer already applied the event: roll back, skip;
//  3. run the handler in the same transaction (its database changes);
//  4. commit; only then commit the Kafka offset.
//
// Every other error (a deadlock, a lost connection, a duplicate on another
// key, the handler's own 1062) is an error: the transaction is rolled back,
// the offset is not committed, and Run returns it. Nothing is ever guessed
// to be "already done". The marker is inserted before the handler runs, so
// a second consumer handling the same event at the same time waits on the
// marker's row lock instead of applying the effect twice.
//
// Works with outbox-relay's exactly-once and at-least-once delivery alike:
// the event id (record header "id") is the key, not the offset.
//
// Tracing: each record is handled in an OpenTelemetry consumer span
// ("process <topic>", Store.TracerProvider), a child of the trace context
// in the record's traceparent/tracestate headers (router.tracing_column);
// the handler's ctx carries it.
package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-sql-driver/mysql"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
)

// DefaultTable is the article's consumed-event table.
const DefaultTable = "consumed_event"

// erDupEntry is MySQL's and MariaDB's ER_DUP_ENTRY.
const erDupEntry = 1062

// ErrNoEventID is returned for a record without an "id" header: it cannot be
// deduplicated, so it is not processed (never guessed).
var ErrNoEventID = errors.New("record has no event id header")

// MaxEventIDBytes is the longest event id (and consumer name) the
// consumed-event table of DDL holds: VARBINARY(255).
const MaxEventIDBytes = 255

// DDL is the CREATE TABLE of the consumed-event table (both flavors),
// without a trailing semicolon. consumer_name and event_id are VARBINARY:
// compared byte for byte, so ids differing in case or by a trailing space
// are distinct events (a VARCHAR with the default collation would take
// "Ord-7a" and "ord-7A", or "evt-1" and "evt-1 ", for one event and skip
// the second as already done). See docs/application-kit.md for migrating
// a table created by an earlier version (VARCHAR(64)).
func DDL(table string) string {
	return "CREATE TABLE " + quoteTable(table) + ` (
  consumer_name VARBINARY(255) NOT NULL,
  event_id      VARBINARY(255) NOT NULL,
  consumed_at   DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  PRIMARY KEY (consumer_name, event_id)
) ENGINE=InnoDB`
}

// EventID is the record's event id: its "id" header (outbox-relay sets it
// from the outbox row's event id, on replays and dead-letter replays too).
func EventID(r *kgo.Record) (string, error) {
	for _, h := range r.Headers {
		if h.Key == "id" {
			if len(h.Value) == 0 {
				break
			}
			return string(h.Value), nil
		}
	}
	return "", fmt.Errorf("%w: topic %s partition %d offset %d", ErrNoEventID, r.Topic, r.Partition, r.Offset)
}

// IdempotencyKey is the value to send as the Idempotency-Key header (or the
// business unique number) of a call to an external service the handler
// makes: the event id, stable across redeliveries and replays, so a service
// that honours the key performs the call once even when this consumer
// crashes after it and handles the record again.
func IdempotencyKey(r *kgo.Record) (string, error) { return EventID(r) }

// Handler applies one record inside tx. Its error rolls the transaction
// (and the consumed-event marker) back.
type Handler func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error

// Outcome of handling one record.
type Outcome int

// Outcomes.
const (
	Applied   Outcome = iota + 1 // the handler ran and the transaction committed
	Duplicate                    // this consumer had already applied the event: skipped
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	}
	return "unknown"
}

// Store is the consumed-event table of one consumer.
type Store struct {
	DB    *sql.DB
	Name  string // consumer_name: one row per (consumer, event)
	Table string // default DefaultTable
	// AfterCommit, when set, runs after the database commit and before the
	// caller commits the offset (tests and the demo crash the process here).
	AfterCommit func(r *kgo.Record, o Outcome)
	// TracerProvider makes the span of each record's handling, a child of
	// the record's traceparent header (startSpan); nil: otel's global
	// provider (a no-op unless the application set one).
	TracerProvider trace.TracerProvider

	cols columnCheck // the table's key columns, checked once
}

// Handle applies r once for this consumer: marker and handler in one
// transaction. A Duplicate outcome means nothing was changed.
func (s *Store) Handle(ctx context.Context, r *kgo.Record, h Handler) (Outcome, error) {
	if s.Name == "" {
		return 0, errors.New("handle record: consumer name is empty")
	}
	id, err := EventID(r)
	if err != nil {
		return 0, fmt.Errorf("handle record: %w", err)
	}
	ctx, span := s.startSpan(ctx, r, id)
	out, err := s.apply(ctx, id, r, h)
	endSpan(span, out, err)
	if err != nil {
		return 0, fmt.Errorf("handle event %s (topic %s partition %d offset %d): %w", id, r.Topic, r.Partition, r.Offset, err)
	}
	if s.AfterCommit != nil {
		s.AfterCommit(r, out)
	}
	return out, nil
}

func (s *Store) apply(ctx context.Context, id string, r *kgo.Record, h Handler) (Outcome, error) {
	table := s.Table
	if table == "" {
		table = DefaultTable
	}
	if err := s.cols.check(ctx, s.DB, table, s.Name, id); err != nil {
		return 0, err
	}
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("begin transaction: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	_, err = tx.ExecContext(ctx, "INSERT INTO "+quoteTable(table)+" (consumer_name, event_id) VALUES (?, ?)", s.Name, id)
	if err != nil {
		if IsMarkerDuplicate(err, table) {
			return Duplicate, nil
		}
		return 0, fmt.Errorf("insert consumed event: %w", err)
	}
	if err := h(ctx, tx, r); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		// Outcome unknown (the commit may have happened): a redelivery
		// finds the marker if it did.
		return 0, fmt.Errorf("commit: %w", err)
	}
	return Applied, nil
}

// dupPrimary matches the end of ER_DUP_ENTRY's message when the duplicate
// is on the primary key: MariaDB and MySQL before 8.0.19 say
// "for key 'PRIMARY'", MySQL 8.0.19+ "for key 'consumed_event.PRIMARY'"
// (the table name as stored: lower case under lower_case_table_names=1).
var dupPrimary = regexp.MustCompile(`for key '(?:([^']+)\.)?PRIMARY'$`)

// IsMarkerDuplicate reports whether err, returned by the marker INSERT into
// table, is error 1062 on that table's primary key (consumer_name,
// event_id): the one error that means "already applied". It recognises the
// errors of github.com/go-sql-driver/mysql and of go-mysql's database/sql
// driver; any other error, or a 1062 naming another key, is not one.
func IsMarkerDuplicate(err error, table string) bool {
	var code uint16
	var msg string
	var e1 *mysql.MySQLError
	var e2 *gomysql.MyError
	switch {
	case errors.As(err, &e1):
		code, msg = e1.Number, e1.Message
	case errors.As(err, &e2):
		code, msg = e2.Code, e2.Message
	default:
		return false
	}
	if code != erDupEntry {
		return false
	}
	m := dupPrimary.FindStringSubmatch(strings.TrimSpace(msg))
	if m == nil {
		return false
	}
	if m[1] == "" {
		return true
	}
	_, tbl, ok := strings.Cut(table, ".")
	if !ok {
		tbl = table
	}
	// Table names are case-insensitive where the server stores them in
	// lower case (lower_case_table_names=1, Windows, Azure's default), and
	// a case-sensitive server cannot hold two tables that differ only in
	// case and both be "table" here.
	return strings.EqualFold(m[1], tbl)
}

func quoteTable(t string) string {
	q := func(s string) string { return "`" + strings.ReplaceAll(s, "`", "``") + "`" }
	if db, tbl, ok := strings.Cut(t, "."); ok {
		return q(db) + "." + q(tbl)
	}
	return q(t)
}
