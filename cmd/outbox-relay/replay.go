package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/term"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
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
	batch                   int
	maxRows                 int
	db                      dbFlags
	timeColumn              string
}

func newReplayCmd() *cobra.Command {
	var o replayOpts
	cmd := &cobra.Command{
		Use:   "replay --config FILE (--event-id ID... | --since T --until T | --aggregate-type T [--aggregate-id ID]) [--dry-run] [--yes]",
		Short: "publish chosen outbox rows again, with their original event ids",
		Long: `replay reads the chosen rows from the outbox tables (by event id, by time range
of the time column, by aggregate type and id; several filters combine with AND),
routes them with the current router settings and publishes them again in Kafka
transactions of --batch records (transactional id <name>.replay, so the running
relay is not fenced), in the time column's order, then the auto-increment
column's (rows of one INSERT share a time). Each record keeps its event id
(header "id": consumers deduplicate) and gets a "replayed" header. Times are
RFC 3339 (converted to the session's time zone) or "2006-01-02 15:04:05" as
the server compares it.`,
		Example: `  outbox-relay replay --config relay.yaml --event-id 0191c1f6-... --event-id 0191c1f7-... --yes
  outbox-relay replay --config relay.yaml --since '2026-11-30 10:00:00' --until '2026-11-30 11:00:00' --dry-run
  outbox-relay replay --config relay.yaml --aggregate-type alarm --aggregate-id device-7 --yes`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	cmd.Flags().StringSliceVar(&o.eventIDs, "event-id", nil, "event id to replay (repeat, or comma-separated)")
	cmd.Flags().StringVar(&o.since, "since", "", "replay rows whose time column is at or after this")
	cmd.Flags().StringVar(&o.until, "until", "", "replay rows whose time column is before this")
	cmd.Flags().StringVar(&o.aggregateType, "aggregate-type", "", "replay rows of this aggregate type")
	cmd.Flags().StringVar(&o.aggregID, "aggregate-id", "", "replay rows of this aggregate id")
	cmd.Flags().StringVar(&o.table, "table", "", "only this captured table (db.table; default: all of source.tables)")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "list what would be published; publish nothing")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
	cmd.Flags().IntVar(&o.batch, "batch", 500, "records per Kafka transaction")
	cmd.Flags().IntVar(&o.maxRows, "max-rows", 100000, "refuse a selection of more rows than this (they are held in memory)")
	cmd.Flags().StringVar(&o.timeColumn, "time-column", "", "column holding the row's time (default: router timestamp_column, else created_at)")
	addDBFlags(cmd, &o.db, "read from")
	cmd.RunE = func(*cobra.Command, []string) error {
		o.path = *path
		return replay(o)
	}
	return cmd
}

func replay(o replayOpts) error {
	if len(o.eventIDs) == 0 && o.since == "" && o.until == "" && o.aggregateType == "" && o.aggregID == "" {
		return usageErr("choose rows: --event-id, --since/--until or --aggregate-type/--aggregate-id")
	}
	if o.aggregID != "" && o.aggregateType == "" {
		return usageErr("--aggregate-id needs --aggregate-type (ids are unique per type)")
	}
	if o.batch <= 0 || o.maxRows <= 0 {
		return usageErr("--batch and --max-rows must be positive")
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
	if len(recs) == 0 {
		fmt.Println("replay: no row matches")
		return nil
	}
	for _, r := range recs {
		fmt.Printf("%s  topic=%s key=%s\n", printable(headerValue(r, "id")), printable(r.Topic), printable(string(r.Key)))
	}
	if o.dryRun {
		fmt.Printf("replay: would publish %d records (dry run)\n", len(recs))
		return nil
	}
	if err := confirm(o.yes, fmt.Sprintf("publish %d records again", len(recs))); err != nil {
		return err
	}
	if err := publishTransactional(ctx, cfg, recs, o.batch, nil); err != nil {
		return err
	}
	fmt.Printf("replay: published %d records\n", len(recs))
	return nil
}

// replayRows selects the chosen rows of table t and routes them. zone is
// the session's time zone before utcSession.
func replayRows(conn *client.Conn, cfg config.Config, t, zone string, o replayOpts) ([]*kgo.Record, error) {
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
	for _, c := range []struct{ v, cond string }{{o.since, source.QuoteIdent(timeCol) + " >= "}, {o.until, source.QuoteIdent(timeCol) + " < "}} {
		if c.v == "" {
			continue
		}
		v, absolute, err := sqlTime(c.v)
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
	rt, err := tableRouter(rc, cfg.Name, t)
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

// sqlTime turns an RFC 3339 time into DATETIME text in UTC (absolute:
// the caller converts it to the session's zone), and a local time (one of
// localTimeLayouts) into DATETIME text in the server's terms; anything else
// is a usage error.
func sqlTime(s string) (string, bool, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC().Format("2006-01-02 15:04:05.999999"), true, nil
	}
	for _, layout := range localTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.Format("2006-01-02 15:04:05.999999"), false, nil
		}
	}
	// The server would compare a string it cannot read as a time as
	// nothing, or as the zero date: an empty selection, silently.
	return "", false, fmt.Errorf("%w: %q is not a time: give RFC 3339 (2026-11-30T10:00:00Z, 2026-11-30T12:00:00+02:00) "+
		"or the server's local time (2026-11-30 10:00:00[.ffffff], 2026-11-30 10:00, 2026-11-30)", errUsage, s)
}

// localTimeLayouts are the local-time forms --since and --until accept
// (a day that does not exist, 2026-11-31, is refused).
var localTimeLayouts = []string{"2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"}

// autoIncrementColumn names table t's auto-increment column, "" if none.
func autoIncrementColumn(conn *client.Conn, t string) (string, error) {
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

// tableRouter builds the router of one table's settings, as `run` does.
func tableRouter(rc config.RouterConfig, pipeline, table string) (*router.Router, error) {
	rcfg, err := clients.Router(rc)
	if err != nil {
		return nil, err
	}
	rcfg.CloudEventsSource = rc.CloudEventsSourceFor(pipeline, table)
	return router.New(rcfg)
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

// publishTransactional produces recs in Kafka transactions of batch records
// with the transactional id <name>.replay. When sess is set (dead-letter
// replay), it is the producer and the consumed offsets commit with it.
func publishTransactional(ctx context.Context, cfg config.Config, recs []*kgo.Record, batch int, sess *kgo.GroupTransactSession) error {
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return err
	}
	counts, err := placedCounts(ctx, cfg)
	if err != nil {
		return err
	}
	if err := ensureTopics(ctx, cfg, k.Admin(), recs, counts); err != nil {
		return err
	}
	if sess != nil {
		return publishInSession(ctx, sess, recs)
	}
	cl, err := kgo.NewClient(k.Replay()...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	prog := newProgress("replay")
	defer prog.done()
	for start := 0; start < len(recs); start += batch {
		chunk := recs[start:min(len(recs), start+batch)]
		if err := cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin kafka transaction: %w", err)
		}
		if err := cl.ProduceSync(context.WithoutCancel(ctx), chunk...).FirstErr(); err != nil {
			_ = cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
			return fmt.Errorf("produce: %w (%d of %d published before)", err, start, len(recs))
		}
		if err := cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryCommit); err != nil {
			return fmt.Errorf("commit kafka transaction: %w (%d of %d published before)", err, start, len(recs))
		}
		prog.update("%d of %d records published", start+len(chunk), len(recs))
	}
	return nil
}

func publishInSession(ctx context.Context, sess *kgo.GroupTransactSession, recs []*kgo.Record) error {
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("begin kafka transaction: %w", err)
	}
	if err := sess.Client().ProduceSync(context.WithoutCancel(ctx), recs...).FirstErr(); err != nil {
		_, _ = sess.End(context.WithoutCancel(ctx), kgo.TryAbort)
		return fmt.Errorf("produce: %w", err)
	}
	committed, err := sess.End(context.WithoutCancel(ctx), kgo.TryCommit)
	if err != nil {
		return fmt.Errorf("commit kafka transaction: %w", err)
	}
	if !committed {
		return errors.New("commit kafka transaction: aborted (the group rebalanced): nothing was replayed, run it again")
	}
	return nil
}

// ensureTopics creates the records' topics that are missing, as the relay
// would (kafka.topic_partitions, kafka.replication_factor), places the
// records routeAgain left byKey as the relay does (their key's partition by
// the count their topic has in counts, a checkpoint's, else by the count
// it has), and refuses a record whose chosen partition (placement
// partition) its topic lacks, before anything is produced. A refused
// creation (no CREATE permission) is fine for a topic that exists.
func ensureTopics(ctx context.Context, cfg config.Config, kopts []kgo.Opt, recs []*kgo.Record, counts map[string]int32) error {
	seen := map[string]bool{}
	var topics []string
	for _, r := range recs {
		if !seen[r.Topic] {
			seen[r.Topic] = true
			topics = append(topics, r.Topic)
		}
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout)
	defer cancel()
	refused := map[string]error{} // creation refused: fine if the topic exists
	res, err := adm.CreateTopics(cctx, cfg.Kafka.TopicPartitions, cfg.Kafka.ReplicationFactor, nil, topics...)
	switch {
	case err != nil && kafkaerr.AdminRefused(err):
		for _, t := range topics {
			refused[t] = err
		}
	case err != nil:
		return fmt.Errorf("create topics: %w", err)
	}
	for _, r := range res.Sorted() {
		switch {
		case r.Err == nil || kafkaerr.TopicExists(r.Err):
		case kafkaerr.AdminRefused(r.Err):
			refused[r.Topic] = r.Err
		default:
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	details, err := adm.ListTopics(cctx, topics...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for _, t := range topics {
		cerr, ok := refused[t]
		if !ok {
			continue
		}
		if d, found := details[t]; !found || d.Err != nil {
			derr := kafkaerr.ErrUnknownTopic
			if found {
				derr = d.Err
			}
			return fmt.Errorf("topic %s does not exist and creating it was refused (%v): create it beforehand, or grant the principal CREATE (describe: %w); nothing was published", t, cerr, derr)
		}
		fmt.Fprintf(os.Stderr, "warning: kafka refused to create topic %s (%v): using it as it exists\n", t, cerr)
	}
	for _, r := range recs {
		n := len(details[r.Topic].Partitions)
		if r.Partition == byKey {
			by := counts[r.Topic]
			if by <= 0 {
				by = int32(n)
			}
			// A topic with fewer partitions than its recorded count (created
			// again) may get a partition it lacks: franz-go fails the record.
			r.Partition = clients.KeyPartition(r.Key, by)
			continue
		}
		if int(r.Partition) >= n {
			return fmt.Errorf("%w: event id %s: partition %d, topic %s has %d; nothing was published", router.ErrBadRow, headerValue(r, "id"), r.Partition, r.Topic, n)
		}
	}
	return nil
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

// progress reports a long command's advance on stderr: one line rewritten
// in place on a terminal, else a line at most every second (and the last).
type progress struct {
	name     string
	tty      bool
	last     time.Time
	pending  string
	rewrites bool
}

func newProgress(name string) *progress {
	return &progress{name: name, tty: term.IsTerminal(int(os.Stderr.Fd()))}
}

func (p *progress) update(format string, a ...any) {
	line := p.name + ": " + fmt.Sprintf(format, a...)
	if p.tty {
		fmt.Fprintf(os.Stderr, "\r%s\x1b[K", line)
		p.rewrites = true
		return
	}
	p.pending = line
	if time.Since(p.last) >= time.Second {
		fmt.Fprintln(os.Stderr, line)
		p.last, p.pending = time.Now(), ""
	}
}

// done ends the progress output.
func (p *progress) done() {
	if p.rewrites {
		fmt.Fprintln(os.Stderr)
		p.rewrites = false
	}
	if p.pending != "" {
		fmt.Fprintln(os.Stderr, p.pending)
		p.pending = ""
	}
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

// placedCounts are the partition counts the relay places each topic's keys
// by, as its committed checkpoint records them (nil: none), so that a
// replay does not put an aggregate's record in another partition after
// partitions were added to its topic.
func placedCounts(ctx context.Context, cfg config.Config) (map[string]int32, error) {
	store, err := checkpointStore(cfg)
	if err != nil {
		return nil, err
	}
	loaded, err := store.LoadState(ctx, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint (its partition counts): %w", err)
	}
	placed := loaded.Partitions // after a reset: the counts its marker carries
	if loaded.Checkpoint != nil {
		placed = loaded.Checkpoint.Partitions
	}
	return placed, nil
}
