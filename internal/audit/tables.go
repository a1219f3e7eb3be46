package audit

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/source"
)

// tables reads the outbox tables for the audit.
type tables struct {
	conn       *binlog.Conn
	cfg        config.Config
	zone       string // the session's zone before utcSession
	timeColumn string
	topics     map[string]bool
	zoneOK     bool
}

func (s *tables) timeCol(rc config.RouterConfig) string {
	switch {
	case s.timeColumn != "":
		return s.timeColumn
	case rc.TimestampColumn != "":
		return rc.TimestampColumn
	}
	return "created_at"
}

// utcExpr is an SQL expression of a time column, or of its MIN, in UTC,
// and bound turns a UTC time into the column's terms: a TIMESTAMP is shown
// in the session's zone (UTC), a DATETIME is local time in the zone
// DEFAULT CURRENT_TIMESTAMP filled it in (as replay compares).
func (s *tables) timeTerms(t, col string) (utcExpr func(string) string, bound string, err error) {
	typ, err := source.ColumnType(s.conn, t, col)
	if err != nil {
		return nil, "", fmt.Errorf("audit %s: %w", t, err)
	}
	if typ == "timestamp" {
		return func(e string) string { return e }, "?", nil
	}
	if !s.zoneOK {
		if err := source.CheckZone(s.conn, s.zone); err != nil {
			return nil, "", fmt.Errorf("audit %s: %w", t, err)
		}
		s.zoneOK = true
	}
	z := "'" + strings.ReplaceAll(s.zone, "'", "''") + "'"
	return func(e string) string { return "CONVERT_TZ(" + e + ", " + z + ", '+00:00')" }, "CONVERT_TZ(?, '+00:00', " + z + ")", nil
}

const sqlTimeLayout = "2006-01-02 15:04:05.999999"

// rows streams the event ids of table t's rows in the window to fn and
// notes the topics they route to. With pk (t's primary key columns) fn also
// gets each row's key (appendKey); else key is nil.
func (s *tables) rows(t string, since, until time.Time, pk []string, fn func(id, key []byte)) error {
	rc := s.cfg.Router.For(t)
	qt, err := source.QuoteTable(t)
	if err != nil {
		return err
	}
	col := s.timeCol(rc)
	_, bound, err := s.timeTerms(t, col)
	if err != nil {
		return err
	}
	// Only the columns that name the topic: the router with nothing else.
	trc := rc
	trc.AdditionalFields, trc.ValueFormat, trc.TimestampColumn, trc.SchemaVersionColumn = nil, config.FormatPayload, "", ""
	trc.TracingColumn = ""
	rt, err := clients.TableRouter(s.cfg, trc, t)
	if err != nil {
		return fmt.Errorf("audit %s: %w", t, err)
	}
	sel := source.QuoteIdent(rc.EventIDColumn) + ", " + source.QuoteIdent(rc.AggregateTypeColumn)
	for _, c := range pk {
		sel += ", " + source.QuoteIdent(c)
	}
	q := fmt.Sprintf("SELECT %s FROM %s WHERE %s IS NOT NULL AND %s >= %s",
		sel, qt, source.QuoteIdent(rc.EventIDColumn), source.QuoteIdent(col), bound)
	args := []any{since.Format(sqlTimeLayout)}
	if !until.IsZero() {
		q += fmt.Sprintf(" AND %s < %s", source.QuoteIdent(col), bound)
		args = append(args, until.Format(sqlTimeLayout))
	}
	stmt, err := s.conn.Prepare(q)
	if err != nil {
		return fmt.Errorf("audit %s: select rows: %w", t, err)
	}
	defer stmt.Close()
	routed := map[string]bool{}
	var res mysql.Result
	var key []byte
	parts := make([][]byte, len(pk))
	err = stmt.ExecuteSelectStreaming(&res, func(row []mysql.FieldValue) error {
		id := fieldBytes(row[0])
		if len(pk) > 0 {
			for i := range pk {
				parts[i] = fieldBytes(row[2+i])
			}
			key = appendKey(key[:0], t, parts...)
		}
		fn(id, key)
		if agg := fieldBytes(row[1]); !routed[string(agg)] {
			routed[string(agg)] = true
			rec, err := rt.Route(router.Row{Columns: []string{rc.EventIDColumn, rc.AggregateTypeColumn, rc.AggregateIDColumn, rc.PayloadColumn},
				Values: []any{string(id), string(agg), "-", []byte{}}}) // the topic depends on the aggregate type only
			if err == nil { // a row the router refuses is dead-lettered or stops the relay
				s.topics[rec.Topic] = true
			}
		}
		return nil
	}, nil, args...)
	if err != nil {
		return fmt.Errorf("audit %s: select rows: %w", t, err)
	}
	return nil
}

// fieldBytes is a streamed column's text; the bytes of a string column are
// reused by the next row (Auditor.RowBytes copies them).
func fieldBytes(v mysql.FieldValue) []byte {
	switch v.Type {
	case mysql.FieldValueTypeString:
		return v.AsString()
	case mysql.FieldValueTypeNull:
		return nil
	}
	return []byte(fmt.Sprint(v.Value()))
}

func (s *tables) topicList(more ...[]string) []string {
	for _, l := range more {
		for _, t := range l {
			s.topics[t] = true
		}
	}
	out := make([]string, 0, len(s.topics))
	for t := range s.topics {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// lookup returns the ids of ids that have a row in any captured table.
func (s *tables) lookup(ids []string) (map[string]bool, error) {
	found := map[string]bool{}
	const chunk = 1000
	for _, t := range s.cfg.Source.Tables {
		rc := s.cfg.Router.For(t)
		qt, err := source.QuoteTable(t)
		if err != nil {
			return nil, err
		}
		for start := 0; start < len(ids); start += chunk {
			part := ids[start:min(len(ids), start+chunk)]
			args := make([]any, len(part))
			for i, id := range part {
				args[i] = id
			}
			res, err := s.conn.Execute(fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s)", source.QuoteIdent(rc.EventIDColumn), qt, source.QuoteIdent(rc.EventIDColumn), source.Placeholders(len(part))), args...)
			if err != nil {
				return nil, fmt.Errorf("audit %s: look up event ids: %w", t, err)
			}
			for i := range res.RowNumber() {
				id, _ := res.GetString(i, 0)
				found[id] = true
			}
		}
	}
	return found, nil
}

// oldest is the oldest time column value left in the tables (zero: none).
func (s *tables) oldest() (time.Time, error) {
	var oldest time.Time
	for _, t := range s.cfg.Source.Tables {
		col := s.timeCol(s.cfg.Router.For(t))
		qt, err := source.QuoteTable(t)
		if err != nil {
			return oldest, err
		}
		utc, _, err := s.timeTerms(t, col)
		if err != nil {
			return oldest, err
		}
		res, err := s.conn.Execute(fmt.Sprintf("SELECT DATE_FORMAT(%s, '%%Y-%%m-%%d %%H:%%i:%%s.%%f') FROM %s", utc("MIN("+source.QuoteIdent(col)+")"), qt))
		if err != nil {
			return oldest, fmt.Errorf("audit %s: read the oldest row's time: %w", t, err)
		}
		v, _ := res.GetString(0, 0)
		if v == "" {
			continue // empty table
		}
		ts, err := time.Parse("2006-01-02 15:04:05.999999", v)
		if err != nil {
			return oldest, fmt.Errorf("audit %s: read the oldest row's time %q: %w", t, v, err)
		}
		if oldest.IsZero() || ts.Before(oldest) {
			oldest = ts
		}
	}
	return oldest, nil
}

// The SQL helpers below are those of cmd/outbox-relay's prune and replay,
// which read the same tables.
