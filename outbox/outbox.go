// Package outbox is the application's side of the transactional outbox: it
// inserts outbox rows inside the caller's own *sql.Tx, so the business rows
// and the events describing them commit or roll back together, and
// outbox-relay publishes exactly the committed ones.
//
// Contract:
//   - Write never opens, commits or rolls back a transaction: it runs one
//     INSERT (several events: one multi-row INSERT) in the *sql.Tx it is
//     given. A *sql.DB is not accepted on purpose: an autocommitted outbox row
//     is the dual write the outbox exists to avoid.
//   - Every event is checked before anything is sent: event id, aggregate
//     type and aggregate id non-empty UTF-8, payload valid JSON; one bad
//     event fails the whole call with an error naming it (ErrInvalidEvent),
//     and nothing is inserted.
//   - Event ids default to UUIDv7 (time-ordered, so the unique index stays
//     append-friendly); set Event.ID to use your own (a replayed or
//     re-sent event must keep its original id: consumers dedupe on it).
//   - Column names follow outbox-relay's router.* settings (Columns); the
//     default is the article's table, DebeziumColumns Debezium's.
//   - Trace context: when Columns.TracingSpanContext names the table's
//     router.tracing_column, Write stores the span context of its ctx there
//     (W3C Trace Context, as Debezium's serialized span context:
//     "traceparent=..." and "tracestate=..." lines), NULL without one; the
//     relay turns it into the record's traceparent/tracestate headers.
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// ErrInvalidEvent is wrapped by every error about an event Write refuses
// before sending anything to the database.
var ErrInvalidEvent = errors.New("invalid outbox event")

// Event is one outbox row.
type Event struct {
	// ID is the event id (router.event_id_column). Empty: a new UUIDv7.
	ID string
	// AggregateType routes the event: topic outbox.event.<AggregateType>
	// by default.
	AggregateType string
	// AggregateID is the Kafka key: one aggregate's events stay in order.
	AggregateID string
	// Type is the event type (header "type"); required when the table has
	// an event type column.
	Type string
	// Payload is the record value, stored as given; it must be valid JSON
	// (json.Marshal's output, or json.RawMessage).
	Payload []byte
	// Timestamp fills Columns.Timestamp when that column is set (router
	// timestamp_column); zero: the time of the Write call, UTC.
	Timestamp time.Time
	// Extra fills more columns (router additional_fields,
	// schema_version_column), by column name.
	Extra map[string]any
}

// Columns names the outbox table's columns, as outbox-relay's router.*
// settings do.
type Columns struct {
	EventID, AggregateType, AggregateID, EventType, Payload string
	// Timestamp, when set, is written from Event.Timestamp; when empty the
	// table's default (created_at DEFAULT CURRENT_TIMESTAMP(3)) applies.
	Timestamp string
	// TracingSpanContext, when set, is written with the trace context of
	// Write's ctx (router.tracing_column; Debezium's tracingspancontext).
	// Leave it empty for a table without the column.
	TracingSpanContext string
}

// DefaultColumns is the article's table (router preset outbox).
var DefaultColumns = Columns{EventID: "event_id", AggregateType: "aggregate_type", AggregateID: "aggregate_id",
	EventType: "event_type", Payload: "payload"}

// DebeziumColumns is Debezium's outbox table (router preset debezium).
var DebeziumColumns = Columns{EventID: "id", AggregateType: "aggregatetype", AggregateID: "aggregateid",
	EventType: "type", Payload: "payload"}

// Writer writes events into one outbox table. The zero value is not
// usable; use New. A Writer is safe for concurrent use.
type Writer struct {
	table string // quoted, possibly db-qualified
	name  string
	cols  Columns
	newID func() (string, error)
	now   func() time.Time
}

// Option changes a Writer.
type Option func(*Writer)

// WithColumns sets the column names (router.*_column).
func WithColumns(c Columns) Option { return func(w *Writer) { w.cols = c } }

// WithIDs replaces UUIDv7 as the id of events without one.
func WithIDs(f func() (string, error)) Option { return func(w *Writer) { w.newID = f } }

// maxPlaceholders is MySQL's limit of placeholders in one prepared
// statement; a larger batch is split into several INSERTs (in the same
// transaction, so it still commits as one).
const maxPlaceholders = 65535

// New returns a Writer for table ("outbox" or "db.outbox").
func New(table string, opts ...Option) (*Writer, error) {
	w := &Writer{name: table, cols: DefaultColumns, newID: NewID, now: time.Now}
	for _, o := range opts {
		o(w)
	}
	q, err := quoteTable(table)
	if err != nil {
		return nil, fmt.Errorf("new outbox writer: %w", err)
	}
	w.table = q
	for _, c := range [][2]string{{"event id", w.cols.EventID}, {"aggregate type", w.cols.AggregateType},
		{"aggregate id", w.cols.AggregateID}, {"payload", w.cols.Payload}} {
		if c[1] == "" {
			return nil, fmt.Errorf("new outbox writer: the %s column is not named", c[0])
		}
	}
	return w, nil
}

// NewID returns a new UUIDv7 as text.
func NewID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new event id: %w", err)
	}
	return id.String(), nil
}

var defaultWriter, _ = New("outbox")

// Write inserts events into the table "outbox" with the default columns,
// in tx. It returns the events' ids in order.
func Write(ctx context.Context, tx *sql.Tx, events ...Event) ([]string, error) {
	return defaultWriter.Write(ctx, tx, events...)
}

// Write inserts events in tx: one multi-row INSERT (split only past
// MySQL's 65,535 placeholders). It returns the events' ids in order.
// Nothing is inserted when an event is invalid.
func (w *Writer) Write(ctx context.Context, tx *sql.Tx, events ...Event) ([]string, error) {
	if tx == nil {
		return nil, fmt.Errorf("write outbox: %w: no transaction", ErrInvalidEvent)
	}
	if len(events) == 0 {
		return nil, nil
	}
	evs := slices.Clone(events)
	ids := make([]string, len(evs))
	var extra []string // extra column names, in a fixed order
	for i := range evs {
		if evs[i].ID == "" {
			id, err := w.newID()
			if err != nil {
				return nil, fmt.Errorf("write outbox: %w", err)
			}
			evs[i].ID = id
		}
		if err := w.check(&evs[i]); err != nil {
			return nil, fmt.Errorf("write outbox: %w: event %d (id %q): %v", ErrInvalidEvent, i, evs[i].ID, err)
		}
		for k := range evs[i].Extra {
			if !slices.Contains(extra, k) {
				extra = append(extra, k)
			}
		}
		ids[i] = evs[i].ID
	}
	slices.Sort(extra)
	for _, k := range extra {
		if slices.Contains(w.columns(nil), k) {
			return nil, fmt.Errorf("write outbox: %w: Extra names column %q, which the writer fills itself", ErrInvalidEvent, k)
		}
	}
	cols := w.columns(extra)
	now := w.now().UTC()
	trace := spanContext(ctx)
	maxRows := maxPlaceholders / len(cols) // one placeholder per column per row
	for start := 0; start < len(evs); start += maxRows {
		chunk := evs[start:min(len(evs), start+maxRows)]
		q, args, err := w.insert(cols, extra, chunk, now, trace)
		if err != nil {
			return nil, fmt.Errorf("write outbox: %w", err)
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return nil, fmt.Errorf("write outbox: insert %d events into %s: %w", len(chunk), w.name, err)
		}
	}
	return ids, nil
}

// columns lists the columns written, extra last.
func (w *Writer) columns(extra []string) []string {
	c := []string{w.cols.EventID, w.cols.AggregateType, w.cols.AggregateID}
	if w.cols.EventType != "" {
		c = append(c, w.cols.EventType)
	}
	c = append(c, w.cols.Payload)
	if w.cols.Timestamp != "" {
		c = append(c, w.cols.Timestamp)
	}
	if w.cols.TracingSpanContext != "" {
		c = append(c, w.cols.TracingSpanContext)
	}
	return append(c, extra...)
}

func (w *Writer) check(e *Event) error {
	for _, f := range [][2]string{{"ID", e.ID}, {"AggregateType", e.AggregateType}, {"AggregateID", e.AggregateID}} {
		if f[1] == "" {
			return fmt.Errorf("%s is empty", f[0])
		}
		if !utf8.ValidString(f[1]) {
			return fmt.Errorf("%s is not valid UTF-8", f[0])
		}
	}
	if w.cols.EventType != "" && e.Type == "" {
		return fmt.Errorf("Type is empty (column %s)", w.cols.EventType)
	}
	if !utf8.ValidString(e.Type) {
		return errors.New("Type is not valid UTF-8")
	}
	if len(e.Payload) == 0 {
		return errors.New("Payload is empty: it must be JSON (use []byte(\"null\") for a JSON null)")
	}
	if !json.Valid(e.Payload) {
		return errors.New("Payload is not valid JSON")
	}
	return nil
}

func (w *Writer) insert(cols, extra []string, evs []Event, now time.Time, trace any) (string, []any, error) {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(w.table)
	b.WriteString(" (")
	for i, c := range cols {
		if i > 0 {
			b.WriteString(", ")
		}
		q, err := quoteIdent(c)
		if err != nil {
			return "", nil, err
		}
		b.WriteString(q)
	}
	b.WriteString(") VALUES ")
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
	args := make([]any, 0, len(cols)*len(evs))
	for i, e := range evs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(tuple)
		args = append(args, e.ID, e.AggregateType, e.AggregateID)
		if w.cols.EventType != "" {
			args = append(args, e.Type)
		}
		// string, not []byte: a MySQL JSON column takes text; binary
		// (a []byte argument) would be refused as invalid JSON charset.
		args = append(args, string(e.Payload))
		if w.cols.Timestamp != "" {
			ts := e.Timestamp
			if ts.IsZero() {
				ts = now
			}
			args = append(args, ts.UTC())
		}
		if w.cols.TracingSpanContext != "" {
			args = append(args, trace)
		}
		for _, k := range extra {
			v, ok := e.Extra[k]
			if !ok {
				v = nil // NULL, or the column's default refused by NOT NULL: the server says so
			}
			args = append(args, v)
		}
	}
	return b.String(), args, nil
}

// quoteIdent quotes a column or table name with backticks.
func quoteIdent(s string) (string, error) {
	if s == "" || strings.ContainsRune(s, 0) || !utf8.ValidString(s) {
		return "", fmt.Errorf("bad identifier %q", s)
	}
	return "`" + strings.ReplaceAll(s, "`", "``") + "`", nil
}

// quoteTable quotes "table" or "db.table".
func quoteTable(t string) (string, error) {
	db, tbl, ok := strings.Cut(t, ".")
	if !ok {
		return quoteIdent(t)
	}
	qd, err := quoteIdent(db)
	if err != nil {
		return "", err
	}
	qt, err := quoteIdent(tbl)
	if err != nil {
		return "", err
	}
	return qd + "." + qt, nil
}
