package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/router"
	"github.com/outbox-relay/outbox-relay/source"
)

// ReplayedHeader marks a record published again by replay or dead-letter
// replay; its value is the time of the replay (RFC 3339, UTC). The record
// keeps its original "id" header: consumers deduplicate on it.
const ReplayedHeader = "replayed"

type replayOpts struct {
	path                    string
	eventIDs                []string
	since, until            string
	aggregateType, aggregID string
	table                   string
	dryRun, yes             bool
	verbose, asJSON         bool
	batch                   int
	maxRows                 int
	db                      dbFlags
	timeColumn              string
	now                     time.Time // what an age is before
}

func newReplayCmd() *cobra.Command {
	var o replayOpts
	cmd := &cobra.Command{
		Use:   "replay --config FILE (--event-id ID... | --since T --until T | --aggregate-type T [--aggregate-id ID]) [--dry-run] [--yes] [--verbose | --json]",
		Short: "publish chosen outbox rows again, with their original event ids",
		Long: `replay reads the chosen rows from the outbox tables (by event id, by time range
of the time column, by aggregate type and id; several filters combine with AND),
routes them with the current router settings and publishes them again in Kafka
transactions of --batch records (transactional id <name>.replay, so the running
relay is not fenced), in the time column's order, then the auto-increment
column's (rows of one INSERT share a time). Each record keeps its event id
(header "id": consumers deduplicate) and gets a "replayed" header.

Times (--since, --until) are RFC 3339 (2026-11-30T10:00:00Z, converted to the
session's time zone), an age before now (90m, 2h, 7d) as audit and prune read
them, or the server's local time ("2026-11-30 10:00:00", as the server
compares it).

Output: a summary line on stdout ("replay: published N records in T
transactions"), and progress on stderr every few seconds while it publishes.
The rows themselves (event id, topic, key: one line each) only with
--verbose or --dry-run; --json prints one JSON document instead: dry_run,
selected, published and the records (event_id, topic, key).

The rows are read from the first of source.hosts (or --host): a replica is
fine, replay only reads.`,
		Example: `  outbox-relay replay --config relay.yaml --event-id 0191c1f6-... --event-id 0191c1f7-... --yes
  outbox-relay replay --config relay.yaml --since 2h --dry-run
  outbox-relay replay --config relay.yaml --since '2026-11-30 10:00:00' --until '2026-11-30 11:00:00' --yes
  outbox-relay replay --config relay.yaml --aggregate-type alarm --aggregate-id device-7 --yes --json | jq .published`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	cmd.Flags().StringSliceVar(&o.eventIDs, "event-id", nil, "event id to replay (repeat, or comma-separated)")
	cmd.Flags().StringVar(&o.since, "since", "", "replay rows whose time column is at or after this (RFC 3339, an age such as 2h, or the server's local time)")
	cmd.Flags().StringVar(&o.until, "until", "", "replay rows whose time column is before this (same forms as --since)")
	cmd.Flags().StringVar(&o.aggregateType, "aggregate-type", "", "replay rows of this aggregate type")
	cmd.Flags().StringVar(&o.aggregID, "aggregate-id", "", "replay rows of this aggregate id")
	cmd.Flags().StringVar(&o.table, "table", "", "only this captured table (db.table; default: all of source.tables)")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "list what would be published; publish nothing")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
	cmd.Flags().BoolVarP(&o.verbose, "verbose", "v", false, "list each record published (event id, topic, key)")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print one JSON document: dry_run, selected, published, records")
	cmd.Flags().IntVar(&o.batch, "batch", 500, "records per Kafka transaction")
	cmd.Flags().IntVar(&o.maxRows, "max-rows", 100000, "refuse a selection of more rows than this (they are held in memory)")
	cmd.Flags().StringVar(&o.timeColumn, "time-column", "", "column holding the row's time (default: router timestamp_column, else created_at)")
	addDBFlags(cmd, &o.db, "read from", "a replica is fine: replay only reads")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.path = *path
		return replay(cmd.OutOrStdout(), o)
	}
	return cmd
}

// replayDoc is replay's --json document.
type replayDoc struct {
	DryRun    bool           `json:"dry_run"`
	Selected  int            `json:"selected"`
	Published int            `json:"published"`
	Records   []replayRecord `json:"records"`
}

// replayRecord is a record replay publishes (or would).
type replayRecord struct {
	EventID string `json:"event_id"`
	Topic   string `json:"topic"`
	Key     string `json:"key"`
}

func replay(out io.Writer, o replayOpts) error {
	if len(o.eventIDs) == 0 && o.since == "" && o.until == "" && o.aggregateType == "" && o.aggregID == "" {
		return usageErr("choose rows: --event-id, --since/--until or --aggregate-type/--aggregate-id")
	}
	if o.aggregID != "" && o.aggregateType == "" {
		return usageErr("--aggregate-id needs --aggregate-type (ids are unique per type)")
	}
	if o.batch <= 0 || o.maxRows <= 0 {
		return usageErr("--batch and --max-rows must be positive")
	}
	if o.verbose && o.asJSON {
		return usageErr("--verbose and --json: choose one (--json lists the records)")
	}
	o.now = time.Now()
	for _, c := range []struct{ flag, v string }{{"--since", o.since}, {"--until", o.until}} {
		if c.v == "" {
			continue
		}
		if _, _, err := sqlTime(c.flag, c.v, o.now); err != nil {
			return err
		}
	}
	cfg, err := loadConfigFile(o.path)
	if err != nil {
		return err
	}
	tables := cfg.Source.Tables
	if o.table != "" {
		if !containsString(tables, o.table) {
			return usageErr("--table %s is not in source.tables", o.table)
		}
		tables = []string{o.table}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, _, err := o.db.connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	zone, err := source.UTCSession(conn)
	if err != nil {
		return err
	}
	if err := source.StoredBytesSession(conn); err != nil { // as the relay reads them: resultRow
		return err
	}
	var recs []*kgo.Record
	for _, t := range tables {
		rs, err := replayRows(conn, cfg, t, zone, o)
		if err != nil {
			return err
		}
		recs = append(recs, rs...)
	}
	if err := explicitIDsMatched(o, recs, tables); err != nil {
		return err
	}
	doc := replayDoc{DryRun: o.dryRun, Selected: len(recs), Records: make([]replayRecord, 0, len(recs))}
	for _, r := range recs {
		rec := replayRecord{EventID: headerValue(r, "id"), Topic: r.Topic, Key: string(r.Key)}
		switch {
		case o.asJSON:
			doc.Records = append(doc.Records, rec)
		case o.verbose || o.dryRun:
			fmt.Fprintf(out, "%s  topic=%s key=%s\n", printable(rec.EventID), printable(rec.Topic), printable(rec.Key))
		}
	}
	switch {
	case len(recs) == 0 && !o.asJSON:
		fmt.Fprintln(out, "replay: no row matches")
		return nil
	case o.dryRun && !o.asJSON:
		fmt.Fprintf(out, "replay: would publish %d records (dry run)\n", len(recs))
		return nil
	case len(recs) == 0 || o.dryRun:
		return writeJSON(out, doc)
	}
	if err := confirm(o.yes, fmt.Sprintf("publish %d records again", len(recs))); err != nil {
		return err
	}
	began := time.Now()
	txns, err := publishTransactional(ctx, cfg, recs, o.batch)
	if err != nil {
		return err
	}
	doc.Published = len(recs)
	if o.asJSON {
		return writeJSON(out, doc)
	}
	took := time.Since(began)
	fmt.Fprintf(out, "replay: published %d records in %d transactions (%s, %d records/s)\n",
		len(recs), txns, took.Round(time.Millisecond), perSecond(len(recs), took))
	return nil
}

// replayRows selects the chosen rows of table t and routes them. zone is
// the session's time zone before utcSession.
func replayRows(conn *binlog.Conn, cfg config.Config, t, zone string, o replayOpts) ([]*kgo.Record, error) {
	rc := cfg.Router.For(t)
	qt, err := source.QuoteTable(t)
	if err != nil {
		return nil, err
	}
	timeCol := o.timeColumn
	if timeCol == "" {
		timeCol = rc.TimestampColumn
	}
	if timeCol == "" {
		timeCol = "created_at"
	}
	var timeType string
	if o.since != "" || o.until != "" {
		if timeType, err = source.ColumnType(conn, t, timeCol); err != nil {
			return nil, fmt.Errorf("replay %s: %w", t, err)
		}
	}
	zoneChecked := false
	var where []string
	var args []any
	if len(o.eventIDs) > 0 {
		where = append(where, source.QuoteIdent(rc.EventIDColumn)+" IN ("+strings.TrimSuffix(strings.Repeat("?,", len(o.eventIDs)), ",")+")")
		for _, id := range o.eventIDs {
			args = append(args, id)
		}
	}
	for _, c := range []struct{ flag, v, cond string }{{"--since", o.since, source.QuoteIdent(timeCol) + " >= "}, {"--until", o.until, source.QuoteIdent(timeCol) + " < "}} {
		if c.v == "" {
			continue
		}
		v, absolute, err := sqlTime(c.flag, c.v, o.now)
		if err != nil {
			return nil, err
		}
		// The session is in UTC (utcSession); the server's terms are its
		// former zone. A TIMESTAMP is compared in the session's zone, a
		// DATETIME (local time without a zone) as it is, in the zone
		// DEFAULT CURRENT_TIMESTAMP filled it in.
		switch timestamp := timeType == "timestamp"; {
		case absolute == timestamp:
			where = append(where, c.cond+"?")
			args = append(args, v)
		default:
			if !zoneChecked {
				if err := source.CheckZone(conn, zone); err != nil {
					return nil, fmt.Errorf("replay %s: %w", t, err)
				}
				zoneChecked = true
			}
			from, to := zone, "+00:00" // server terms for a TIMESTAMP
			if absolute {
				from, to = "+00:00", zone // UTC for a DATETIME
			}
			where = append(where, c.cond+"CONVERT_TZ(?, ?, ?)")
			args = append(args, v, from, to)
		}
	}
	for _, c := range []struct{ v, cond string }{{o.aggregateType, source.QuoteIdent(rc.AggregateTypeColumn) + " = ?"}, {o.aggregID, source.QuoteIdent(rc.AggregateIDColumn) + " = ?"}} {
		if c.v != "" {
			where = append(where, c.cond)
			args = append(args, c.v)
		}
	}
	order := source.QuoteIdent(timeCol)
	seq, err := autoIncrementColumn(conn, t)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", t, err)
	}
	if seq != "" {
		// Rows of one statement share a time; the auto-increment value
		// is their write order (ties otherwise: docs/application-kit.md).
		order += ", " + source.QuoteIdent(seq)
	}
	q := "SELECT * FROM " + qt + " WHERE " + strings.Join(where, " AND ") + " ORDER BY " + order +
		fmt.Sprintf(" LIMIT %d", o.maxRows+1)
	res, err := conn.Execute(q, args...)
	if err != nil {
		return nil, fmt.Errorf("replay %s: select rows: %w", t, err)
	}
	if res.RowNumber() > o.maxRows {
		return nil, fmt.Errorf("replay %s: more than %d rows match: narrow the selection (--since/--until) or raise --max-rows", t, o.maxRows)
	}
	rt, err := clients.TableRouter(cfg, rc, t)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", t, err)
	}
	now := time.Now().UTC()
	var out []*kgo.Record
	for i := range res.RowNumber() {
		row := resultRow(res, i, now)
		rec, err := routeAgain(rt, row, now)
		if err != nil {
			return nil, fmt.Errorf("replay %s: row %d: %w", t, i+1, err)
		}
		out = append(out, rec)
	}
	return out, nil
}

// sqlTime turns a time of the command line (parseWhen's: an RFC 3339 time
// or an age before now) into DATETIME text in UTC (absolute: the caller
// converts it to the session's zone), and a local time (one of
// localTimeLayouts) into DATETIME text in the server's terms; anything else
// is a usage error naming flag.
func sqlTime(flag, s string, now time.Time) (string, bool, error) {
	if w, err := parseWhen(flag, s, now); err == nil {
		return w.At.Format("2006-01-02 15:04:05.999999"), true, nil
	}
	for _, layout := range localTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.Format("2006-01-02 15:04:05.999999"), false, nil
		}
	}
	// The server would compare a string it cannot read as a time as
	// nothing, or as the zero date: an empty selection, silently.
	return "", false, usageErr("%s %q: give %s, or the server's local time (2026-11-30 10:00:00[.ffffff], 2026-11-30 10:00, 2026-11-30)",
		flag, s, whenForms)
}

// localTimeLayouts are the local-time forms --since and --until accept
// (a day that does not exist, 2026-11-31, is refused).
var localTimeLayouts = []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"}

// autoIncrementColumn names table t's auto-increment column, "" if none.
func autoIncrementColumn(conn *binlog.Conn, t string) (string, error) {
	db, tbl, _ := strings.Cut(t, ".")
	res, err := conn.Execute("SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND EXTRA LIKE '%auto_increment%'", db, tbl)
	if err != nil {
		return "", fmt.Errorf("read auto-increment column: %w", err)
	}
	if res.RowNumber() == 0 {
		return "", nil
	}
	return res.GetString(0, 0)
}

// resultRow turns row i of res into a router row: text as strings (the
// payload as its bytes, as the binlog gives it), read in a
// source.StoredBytesSession: latin1 columns are marked as the relay marks
// them from the binlog.
func resultRow(res *mysql.Result, i int, at time.Time) router.Row {
	row := router.Row{CommitTime: at}
	for j, f := range res.Fields {
		if binlog.IsLatin1(uint64(f.Charset)) {
			if row.Latin1 == nil {
				row.Latin1 = make([]bool, len(res.Fields))
			}
			row.Latin1[j] = true
		}
		row.Columns = append(row.Columns, string(f.Name))
		v, _ := res.GetValue(i, j)
		if b, ok := v.([]byte); ok {
			v = string(b)
		}
		if s, ok := v.(string); ok && isDateTime(f.Type) {
			v = withFraction(s, int(f.Decimal))
		}
		row.Values = append(row.Values, v)
	}
	return row
}

func isDateTime(tp byte) bool {
	switch tp {
	case mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_DATETIME2, mysql.MYSQL_TYPE_TIMESTAMP2:
		return true
	}
	return false
}

// withFraction renders a DATETIME or TIMESTAMP value read with a prepared
// statement (go-mysql writes a binary result's fraction with 6 digits, or
// none when it is zero) as the binlog has it, and so the relay: with the
// column's fsp digits, "10:00:00.000" for DATETIME(3). A value not of that
// form, or a column without an fsp (an expression), is left as it is.
func withFraction(s string, fsp int) string {
	if fsp > 6 || len(s) < len("2006-01-02 15:04:05") || s[len("2006-01-02 15:04:05")-3] != ':' {
		return s
	}
	whole, frac, _ := strings.Cut(s, ".")
	if len(whole) != len("2006-01-02 15:04:05") || strings.Trim(frac, "0123456789") != "" || len(frac) > 6 {
		return s
	}
	if fsp == 0 {
		return whole
	}
	frac += "000000"
	return whole + "." + frac[:fsp]
}

// byKey is the Partition of a record routeAgain built that goes where its
// key does: ensureTopics places it (clients.KeyPartition) once it knows its
// topic's partition count.
const byKey int32 = -1

// routeAgain routes row as the relay would and marks it replayed; its
// Partition is the router's (placement partition), or byKey.
func routeAgain(rt *router.Router, row router.Row, now time.Time) (*kgo.Record, error) {
	rec, err := rt.Route(row)
	if err != nil {
		return nil, err
	}
	k := &kgo.Record{Topic: rec.Topic, Partition: byKey, Key: rec.Key, Value: rec.Value, Headers: rec.Headers, Timestamp: rec.Timestamp}
	if rec.HasPartition {
		k.Partition = rec.Partition
	}
	k.Headers = append(k.Headers, kgo.RecordHeader{Key: ReplayedHeader, Value: []byte(now.Format(time.RFC3339Nano))})
	return k, nil
}

func headerValue(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// confirm asks before a command changes state: --yes skips the question,
// and is required when stdin is not a terminal.
func confirm(yes bool, action string) error {
	if yes {
		return nil
	}
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return usageErr("not a terminal: pass --yes to %s", action)
	}
	fmt.Fprintf(os.Stderr, "%s? [y/N] ", action)
	answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return fmt.Errorf("not confirmed: nothing changed")
	}
	return nil
}
