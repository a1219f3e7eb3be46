package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/audit"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/outbox-relay/outbox-relay/router"
)

// errAuditFailed: the audit found a missing or duplicated row or a
// phantom record (exit 1).
var errAuditFailed = errors.New("audit failed")

// auditMemoryLimit is the soft Go heap limit of `audit` unless GOMEMLIMIT
// is set (a larger window may pass it: the limit is soft).
const auditMemoryLimit = 128 << 20

type auditOpts struct {
	path         string
	since, until string
	asJSON       bool
	margin, wait time.Duration
	maxIDs       int
	timeColumn   string
	topics       []string
	db           dbFlags
}

func newAuditCmd() *cobra.Command {
	var o auditOpts
	cmd := &cobra.Command{
		Use:   "audit --config FILE --since T [--until T] [--json]",
		Short: "prove that every outbox row of a time window reached Kafka exactly once",
		Long: `audit reads the captured tables' rows whose time column (router
timestamp_column, else created_at) is in [--since, --until), then the
pipeline's topics (those the rows route to, the dead-letter topics, --topic)
from the first offset at --since less --margin to the end offsets taken when
it starts reading, read_committed, and reports each row as:

  published     exactly as many records with its event id as rows (records
                with the "replayed" header aside; a row published only by a
                replay, or sent to a dead-letter topic, is counted apart)
  missing       the committed checkpoint covers the row, no record has its id
  pending       the checkpoint does not cover it yet (relay behind or stopped)
  duplicated    more records with its id than rows, "replayed" ones aside

and each record in the window whose id is no row's as a phantom, unless its
row is outside the window (looked up by id) or it is older than the oldest
row left in the tables (the row may have been pruned).

Coverage: after reading the rows, audit reads the server's executed GTID set
(every row read was committed before it) and waits up to --wait for the
committed checkpoint to contain it. If it does, every row read is covered;
if not, rows without a record are pending, never missing: run audit again
once the relay has caught up. Exit 0 when clean, 1 when a row is missing or
duplicated or a record is phantom. Times are RFC 3339 or an age (90m, 2h,
7d: that long ago). See docs/audit.md.`,
		Example: `  outbox-relay audit --config relay.yaml --since 2h
  outbox-relay audit --config relay.yaml --since 2026-11-30T10:00:00Z --until 2026-11-30T11:00:00Z --json | jq .missing`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	cmd.Flags().StringVar(&o.since, "since", "", "audit rows whose time column is at or after this (RFC 3339, or an age: 2h)")
	cmd.Flags().StringVar(&o.until, "until", "", "audit rows whose time column is before this (default: no end)")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print the report as one JSON object on one line")
	cmd.Flags().DurationVar(&o.margin, "margin", 5*time.Minute, "read records from this long before --since (clock skew, commit delay)")
	cmd.Flags().DurationVar(&o.wait, "wait", 10*time.Second, "how long to wait for the checkpoint to cover the rows read")
	cmd.Flags().IntVar(&o.maxIDs, "max-ids", audit.DefaultMaxIDs, "name at most this many ids of each outcome")
	cmd.Flags().StringVar(&o.timeColumn, "time-column", "", "column holding the row's time (default: router timestamp_column, else created_at)")
	cmd.Flags().StringSliceVar(&o.topics, "topic", nil, "also read this topic for phantoms (repeat, or comma-separated)")
	addDBFlags(cmd, &o.db, "read from")
	cmd.RunE = func(*cobra.Command, []string) error {
		o.path = *path
		return runAudit(o)
	}
	return cmd
}

// auditTime reads an RFC 3339 time, or an age (parseAge's forms) before now.
func auditTime(flag, s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := parseAge(s); err == nil {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, usageErr("%s %q: give an RFC 3339 time (2026-11-30T10:00:00Z) or an age (90m, 2h, 7d)", flag, s)
}

// auditDoc is the --json document.
type auditDoc struct {
	Since      time.Time  `json:"since"`
	Until      *time.Time `json:"until"`
	Tables     []string   `json:"tables"`
	Topics     []string   `json:"topics"`
	Checkpoint string     `json:"checkpoint_gtid_set"`
	Executed   string     `json:"source_gtid_set"`
	audit.Report
}

func runAudit(o auditOpts) error {
	if o.since == "" {
		return usageErr("--since is required")
	}
	if o.maxIDs <= 0 || o.margin < 0 || o.wait < 0 {
		return usageErr("--max-ids must be positive, --margin and --wait not negative")
	}
	now := time.Now()
	since, err := auditTime("--since", o.since, now)
	if err != nil {
		return err
	}
	var until time.Time
	if o.until != "" {
		if until, err = auditTime("--until", o.until, now); err != nil {
			return err
		}
		if !until.After(since) {
			return usageErr("--until %s is not after --since %s", o.until, o.since)
		}
	}
	cfg, err := loadConfigFile(o.path)
	if err != nil {
		return err
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The live heap is the per-id map (some 70 MB for 1,000,000 ids)
		// and one fetch; collect before the heap doubles past that.
		debug.SetMemoryLimit(auditMemoryLimit)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, _, err := o.db.connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	zone, err := utcSession(conn)
	if err != nil {
		return err
	}
	a := audit.New(audit.Window{Since: since, Until: until, Margin: o.margin})
	src := &auditSource{conn: conn, cfg: cfg, zone: zone, timeColumn: o.timeColumn, topics: map[string]bool{}}
	prog := newProgress("audit")
	for _, t := range cfg.Source.Tables {
		if err := src.rows(t, since, until, func(id []byte) {
			a.RowBytes(id)
			if a.Rows()%100000 == 0 {
				prog.update("%d rows read", a.Rows())
			}
		}); err != nil {
			prog.done()
			return err
		}
	}
	// Every row read was committed before the executed set read now; the
	// checkpoint containing it covers them all.
	head, flavor, err := executedSet(conn)
	if err != nil {
		prog.done()
		return fmt.Errorf("audit: %w", err)
	}
	store, err := checkpointStore(cfg)
	if err != nil {
		return err
	}
	covered, cp, err := (&pruner{o: pruneOpts{wait: o.wait}, cfg: cfg, store: store}).waitCovered(ctx, head, flavor)
	if err != nil {
		prog.done()
		return fmt.Errorf("audit: %w", err)
	}
	topics := src.topicList(deadLetterTopics(cfg), o.topics)
	dead := map[string]bool{}
	for _, t := range deadLetterTopics(cfg) {
		dead[t] = true
	}
	kopts, err := relay.KafkaOpts(cfg)
	if err != nil {
		return err
	}
	// The end offsets are taken once the checkpoint covers the rows: every
	// record of a covered row is below them.
	from, ends, err := auditOffsets(ctx, cfg, kopts, topics, since.Add(-o.margin), o.wait)
	if err != nil {
		prog.done()
		return err
	}
	// Small fetches, one at a time: a fetch's records are decompressed and
	// decoded at once (JSON payloads compress tenfold: 1 MB fetched is some
	// 10 MB of records), and nothing of them is kept but each one's id.
	ropts := append(kopts[:len(kopts):len(kopts)], kgo.FetchMaxBytes(1<<20), kgo.FetchMaxPartitionBytes(1<<20), kgo.MaxConcurrentFetches(1))
	if err := readDeadLetters(ctx, ropts, ends, from, func(r *kgo.Record) {
		a.Record(audit.Record{ID: headerValue(r, "id"), Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
			Timestamp: r.Timestamp, Replayed: hasHeader(r, ReplayedHeader), DeadLetter: dead[r.Topic]})
	}); err != nil {
		prog.done()
		return fmt.Errorf("audit: %w", err)
	}
	found, err := src.lookup(a.Unmatched())
	if err != nil {
		prog.done()
		return err
	}
	oldest, err := src.oldest()
	prog.done()
	if err != nil {
		return err
	}
	rep := a.Report(audit.Facts{Covered: covered, Found: found, Oldest: oldest, MaxIDs: o.maxIDs})
	doc := auditDoc{Since: since, Tables: cfg.Source.Tables, Topics: topics, Executed: head, Report: rep}
	if !until.IsZero() {
		doc.Until = &until
	}
	if cp != nil {
		doc.Checkpoint = cp.GTIDSet
	}
	if o.asJSON {
		if err := writeJSON(os.Stdout, doc); err != nil {
			return err
		}
	} else {
		printAudit(doc)
	}
	if !rep.Clean {
		return fmt.Errorf("%w: %d missing, %d duplicated, %d phantom", errAuditFailed, rep.Missing.Count, rep.Duplicated.Count, rep.Phantom.Count)
	}
	return nil
}

func hasHeader(r *kgo.Record, key string) bool {
	for _, h := range r.Headers {
		if h.Key == key {
			return true
		}
	}
	return false
}

func printAudit(d auditDoc) {
	window := "from " + d.Since.Format(time.RFC3339Nano) + " (no end)"
	if d.Until != nil {
		window = "from " + d.Since.Format(time.RFC3339Nano) + " to " + d.Until.Format(time.RFC3339Nano)
	}
	fmt.Printf("audit: window %s: %d rows in %s, %d records on %d topics\n",
		window, d.Rows, strings.Join(d.Tables, ", "), d.Records, len(d.Topics))
	fmt.Printf("audit: published %d, replayed only %d, dead-lettered %d, pending %d, missing %d, duplicated %d, phantom %d (records of rows outside the window %d, older than the oldest row left %d)\n",
		d.Published, d.ReplayedOnly, d.DeadLettered, d.Pending.Count, d.Missing.Count, d.Duplicated.Count, d.Phantom.Count, d.OutsideWindow, d.Pruned)
	if !d.Covered {
		fmt.Printf("audit: the committed checkpoint (%q) does not cover the source's executed set %q (the relay is behind or stopped): rows without a record are pending; audit again once it has caught up\n", d.Checkpoint, d.Executed)
	}
	list := func(name string, ids audit.IDs) {
		if ids.Count == 0 {
			return
		}
		p := make([]string, len(ids.IDs))
		for i, id := range ids.IDs {
			p[i] = printable(id)
		}
		more := ""
		if n := ids.Count - len(ids.IDs); n > 0 {
			more = fmt.Sprintf(" (and %d more)", n)
		}
		fmt.Printf("%s (%d): %s%s\n", name, ids.Count, strings.Join(p, " "), more)
	}
	list("missing", d.Missing)
	list("duplicated", d.Duplicated)
	list("pending", d.Pending)
	if d.Phantom.Count > 0 {
		fmt.Printf("phantom (%d):\n", d.Phantom.Count)
		for _, p := range d.Phantom.Records {
			fmt.Printf("  id=%s %s %s\n", printable(p.ID), printable(p.Location()), p.Timestamp.Format(time.RFC3339Nano))
		}
		if n := d.Phantom.Count - len(d.Phantom.Records); n > 0 {
			fmt.Printf("  (and %d more)\n", n)
		}
	}
	if d.Clean {
		fmt.Println("audit: clean")
	}
}

// auditSource reads the outbox tables for the audit.
type auditSource struct {
	conn       *client.Conn
	cfg        config.Config
	zone       string // the session's zone before utcSession
	timeColumn string
	topics     map[string]bool
	zoneOK     bool
}

func (s *auditSource) timeCol(rc config.RouterConfig) string {
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
func (s *auditSource) timeTerms(t, col string) (utcExpr func(string) string, bound string, err error) {
	typ, err := columnType(s.conn, t, col)
	if err != nil {
		return nil, "", fmt.Errorf("audit %s: %w", t, err)
	}
	if typ == "timestamp" {
		return func(e string) string { return e }, "?", nil
	}
	if !s.zoneOK {
		if err := checkZone(s.conn, s.zone); err != nil {
			return nil, "", fmt.Errorf("audit %s: %w", t, err)
		}
		s.zoneOK = true
	}
	z := "'" + strings.ReplaceAll(s.zone, "'", "''") + "'"
	return func(e string) string { return "CONVERT_TZ(" + e + ", " + z + ", '+00:00')" }, "CONVERT_TZ(?, '+00:00', " + z + ")", nil
}

const sqlTimeLayout = "2006-01-02 15:04:05.999999"

// rows streams the event ids of table t's rows in the window to fn and
// notes the topics they route to.
func (s *auditSource) rows(t string, since, until time.Time, fn func(id []byte)) error {
	rc := s.cfg.Router.For(t)
	qt, err := quoteTableName(t)
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
	rt, err := tableRouter(trc, s.cfg.Name, t)
	if err != nil {
		return fmt.Errorf("audit %s: %w", t, err)
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s IS NOT NULL AND %s >= %s",
		quoteIdent(rc.EventIDColumn), quoteIdent(rc.AggregateTypeColumn), qt, quoteIdent(rc.EventIDColumn), quoteIdent(col), bound)
	args := []any{since.Format(sqlTimeLayout)}
	if !until.IsZero() {
		q += fmt.Sprintf(" AND %s < %s", quoteIdent(col), bound)
		args = append(args, until.Format(sqlTimeLayout))
	}
	stmt, err := s.conn.Prepare(q)
	if err != nil {
		return fmt.Errorf("audit %s: select rows: %w", t, err)
	}
	defer stmt.Close()
	routed := map[string]bool{}
	var res mysql.Result
	err = stmt.ExecuteSelectStreaming(&res, func(row []mysql.FieldValue) error {
		id := fieldBytes(row[0])
		fn(id)
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

func (s *auditSource) topicList(more ...[]string) []string {
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
func (s *auditSource) lookup(ids []string) (map[string]bool, error) {
	found := map[string]bool{}
	const chunk = 1000
	for _, t := range s.cfg.Source.Tables {
		rc := s.cfg.Router.For(t)
		qt, err := quoteTableName(t)
		if err != nil {
			return nil, err
		}
		for start := 0; start < len(ids); start += chunk {
			part := ids[start:min(len(ids), start+chunk)]
			args := make([]any, len(part))
			for i, id := range part {
				args[i] = id
			}
			res, err := s.conn.Execute(fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s)", quoteIdent(rc.EventIDColumn), qt, quoteIdent(rc.EventIDColumn), placeholders(len(part))), args...)
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
func (s *auditSource) oldest() (time.Time, error) {
	var oldest time.Time
	for _, t := range s.cfg.Source.Tables {
		col := s.timeCol(s.cfg.Router.For(t))
		qt, err := quoteTableName(t)
		if err != nil {
			return oldest, err
		}
		utc, _, err := s.timeTerms(t, col)
		if err != nil {
			return oldest, err
		}
		res, err := s.conn.Execute(fmt.Sprintf("SELECT DATE_FORMAT(%s, '%%Y-%%m-%%d %%H:%%i:%%s.%%f') FROM %s", utc("MIN("+quoteIdent(col)+")"), qt))
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

// auditOffsets returns, for each partition of topics, the first offset at
// or after from and the end offset: the high watermark now, once the last
// stable offset has reached it (every transaction open now has ended;
// waiting up to wait, else the last stable offset, with a warning).
func auditOffsets(ctx context.Context, cfg config.Config, kopts []kgo.Opt, topics []string, from time.Time, wait time.Duration) (map[string]map[int32]int64, map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	list := func(f func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[string]map[int32]int64, error) {
		cctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout)
		defer cancel()
		l, err := f(cctx, topics...)
		if err != nil {
			return nil, fmt.Errorf("audit: list offsets: %w", err)
		}
		out := map[string]map[int32]int64{}
		var lerr error
		l.Each(func(o kadm.ListedOffset) {
			if o.Partition < 0 || o.Err != nil {
				if o.Err != nil && o.Partition >= 0 {
					lerr = fmt.Errorf("audit: list offsets of %s[%d]: %w", o.Topic, o.Partition, o.Err)
				}
				return // a topic that does not exist: nothing to read
			}
			if out[o.Topic] == nil {
				out[o.Topic] = map[int32]int64{}
			}
			out[o.Topic][o.Partition] = o.Offset
		})
		return out, lerr
	}
	ends, err := list(adm.ListEndOffsets)
	if err != nil {
		return nil, nil, err
	}
	starts, err := list(func(c context.Context, t ...string) (kadm.ListedOffsets, error) {
		return adm.ListOffsetsAfterMilli(c, from.UnixMilli(), t...)
	})
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		stable, err := list(adm.ListCommittedOffsets)
		if err != nil {
			return nil, nil, err
		}
		var held []string
		for t, ps := range ends {
			for p, end := range ps {
				if stable[t][p] < end {
					held = append(held, fmt.Sprintf("%s[%d]", t, p))
				}
			}
		}
		if len(held) == 0 {
			return starts, ends, nil
		}
		if time.Now().After(deadline) {
			sort.Strings(held)
			fmt.Fprintf(os.Stderr, "warning: open transactions hold back %s for more than %s: reading up to their last stable offsets\n", strings.Join(held, ", "), wait)
			return starts, stable, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
