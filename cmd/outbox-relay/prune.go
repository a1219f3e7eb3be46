package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/audit"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/source"
)

// errNotCovered: prune found old rows the committed checkpoint may not cover
// yet; they were left in place.
var errNotCovered = errors.New("committed checkpoint does not cover the rows")

type pruneOpts struct {
	path       string
	olderThan  string
	batch      int
	maxRate    float64
	dryRun     bool
	yes        bool
	asJSON     bool
	wait       time.Duration
	db         dbFlags
	timeColumn string
	forceHost  bool
}

// dbFlags say how prune and replay reach the outbox tables: the relay's
// source host and user by default, which replay's SELECT is enough for;
// prune's DELETE needs a user with that grant.
type dbFlags struct {
	host, user, passwordEnv string
}

// addDBFlags adds --host, --user and --password-env to cmd; what says what
// cmd does on the server and note which server that may be (the help of
// each command says its own).
func addDBFlags(cmd *cobra.Command, f *dbFlags, what, note string) {
	cmd.Flags().StringVar(&f.host, "host", "", "host:port of the server to "+what+" (default: the first of source.hosts; "+note+")")
	cmd.Flags().StringVar(&f.user, "user", "", "database user (default: source.user)")
	cmd.Flags().StringVar(&f.passwordEnv, "password-env", "", "environment variable holding --user's password (default: source.password)")
}

// addr is the server's address as dbFlags say, of src (clients.Source).
func (f dbFlags) addr(src binlog.Config) string {
	if f.host != "" {
		return f.host
	}
	return src.Hosts[0]
}

// connect opens a client connection as dbFlags say.
func (f dbFlags) connect(ctx context.Context, cfg config.Config) (*binlog.Conn, binlog.Config, error) {
	src, err := clients.Source(cfg)
	if err != nil {
		return nil, src, err
	}
	addr := f.addr(src)
	if f.user != "" {
		src.User = f.user
	}
	if f.passwordEnv != "" {
		pw, ok := os.LookupEnv(f.passwordEnv)
		if !ok {
			return nil, src, usageErr("--password-env %s: the variable is not set", f.passwordEnv)
		}
		src.Password = pw
	}
	conn, err := binlog.Connect(ctx, src, addr)
	return conn, src, err
}

func newPruneCmd() *cobra.Command {
	var o pruneOpts
	cmd := &cobra.Command{
		Use:   "prune --config FILE --older-than AGE|TIME [--batch N] [--max-rate N] [--dry-run] [--yes] [--json]",
		Short: "delete published outbox rows older than an age or a time, in small batches",
		Long: `prune deletes rows of the captured outbox tables whose time column (router
timestamp_column, else created_at) is older than --older-than (an age such as
7d, 36h or 90m, on the server's clock; or an RFC 3339 time in the past, as
audit and replay read times), --batch rows per DELETE, never a row the relay
may not have published: for each batch it selects the candidate rows, then
reads the server's executed GTID set (every row the SELECT saw was committed
before it), and deletes them only once the relay's committed checkpoint
contains that set (waiting up to --wait). Auto-increment
ids are not commit order, so "below the last published id" is never used.
Rows are selected and deleted by primary key (a table without one is refused);
rows with a NULL event id, and rows whose event id is pending on the
pipeline's dead-letter topics (the row may be the only copy), are kept.

Rows the checkpoint does not cover (the relay stopped or behind) are left in
place and prune exits 1. The relay logs prune's DELETEs as invalid operations
(router.invalid_op warn or error); with invalid_op fatal prune refuses to run.
The user needs DELETE on the tables (--user, --password-env) on the primary
(--host); prune checks it first, --dry-run too (EXPLAIN DELETE: nothing is
deleted). Progress goes to stderr every few seconds, the summary to stdout
(--json: one JSON document: dry_run, older_than, before, host, rows, tables,
dead_letter_kept).

The host must be proven to be of the checkpoint's source: the server the
relay reads (its server_uid, MySQL's server_uuid, is recorded in the
checkpoint), a MySQL server whose server_uuid is in the checkpoint's GTID set,
or one of source.hosts as written in the configuration. A host diverged from
the checkpoint is refused. Another host is refused (MariaDB GTIDs such as
0-1-N repeat across independent servers: its rows could look covered and
never have been published) unless --force-host. Before deleting, prune names
the host, the tables, the rows older than the age and the cut-off time.`,
		Example: `  outbox-relay prune --config relay.yaml --older-than 7d --dry-run
  outbox-relay prune --config relay.yaml --older-than 2026-11-01T00:00:00Z --yes --json | jq .rows
  PRUNE_PW=... outbox-relay prune --config relay.yaml --older-than 7d --batch 1000 --max-rate 5000 \
      --user outbox_pruner --password-env PRUNE_PW --yes`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	cmd.Flags().StringVar(&o.olderThan, "older-than", "", "delete rows older than this: an age (7d, 36h, 90m) or an RFC 3339 time")
	cmd.Flags().IntVar(&o.batch, "batch", 1000, "rows per DELETE")
	cmd.Flags().Float64Var(&o.maxRate, "max-rate", 0, "at most this many rows deleted per second (0: no limit)")
	cmd.Flags().BoolVar(&o.dryRun, "dry-run", false, "report what would be deleted; delete nothing")
	cmd.Flags().BoolVar(&o.yes, "yes", false, "do not ask for confirmation (required when stdin is not a terminal)")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print one JSON document: dry_run, older_than, before, host, rows, tables, dead_letter_kept")
	cmd.Flags().DurationVar(&o.wait, "wait", 30*time.Second, "how long a batch waits for the checkpoint to cover it")
	cmd.Flags().StringVar(&o.timeColumn, "time-column", "", "column holding the row's time (default: router timestamp_column, else created_at)")
	cmd.Flags().BoolVar(&o.forceHost, "force-host", false, "delete on --host although it is not proven to be of the checkpoint's source (see above)")
	addDBFlags(cmd, &o.db, "delete from", "prune needs the primary")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.path = *path
		return prune(cmd.OutOrStdout(), o)
	}
	return cmd
}

func prune(out io.Writer, o pruneOpts) error {
	if o.olderThan == "" {
		return usageErr("--older-than is required (such as 7d)")
	}
	now := time.Now()
	cutoff, err := parseWhen("--older-than", o.olderThan, now)
	if err != nil {
		return err
	}
	if cutoff.Age == 0 && !cutoff.At.Before(now) {
		return usageErr("--older-than %q is not in the past: every row would be older than it; give a past time or an age (7d)", o.olderThan)
	}
	if o.batch <= 0 || o.batch > 100000 {
		return usageErr("--batch %d: want 1 to 100000", o.batch)
	}
	if o.maxRate < 0 {
		return usageErr("--max-rate must not be negative")
	}
	cfg, err := loadConfigFile(o.path)
	if err != nil {
		return err
	}
	for _, t := range cfg.Source.Tables {
		if string(cfg.Router.For(t).InvalidOp) == "fatal" {
			return fmt.Errorf("prune %s: router.invalid_op is fatal, so the relay would stop at prune's DELETE: set it to warn or error", t)
		}
	}
	if !o.dryRun && !o.yes && !term.IsTerminal(int(os.Stdin.Fd())) {
		return usageErr("not a terminal: pass --yes to delete published rows older than %s from %s", o.olderThan, strings.Join(cfg.Source.Tables, ", "))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, src, err := o.db.connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	if !o.dryRun {
		if err := checkPrimary(conn); err != nil {
			return err
		}
	}
	store, err := checkpointStore(cfg)
	if err != nil {
		return err
	}
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return err
	}
	p := &pruner{o: o, cfg: cfg, conn: conn, store: store, cutoff: cutoff, progress: newProgress("prune"),
		pending: &pendingDeadLetters{cfg: cfg, kafka: k}}
	defer p.progress.done()
	addr := o.db.host
	if addr == "" {
		addr = src.Hosts[0]
	}
	// The host is of the source, the user may delete, the operator agrees.
	if err := p.preflight(ctx, addr); err != nil {
		return err
	}
	doc := pruneDoc{DryRun: o.dryRun, OlderThan: o.olderThan, Before: cutoff.At, Host: addr, Tables: []pruneTable{}}
	for _, t := range cfg.Source.Tables {
		before := p.total
		if err := p.table(ctx, t); err != nil {
			return err
		}
		doc.Tables = append(doc.Tables, pruneTable{Table: t, Rows: p.total - before})
	}
	p.progress.done()
	doc.Rows, doc.DeadLetterKept = p.total, p.pending.count()
	if o.asJSON {
		return writeJSON(out, doc)
	}
	verb := "deleted"
	if o.dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(out, "prune: %s %d rows older than %s%s\n", verb, p.total, o.olderThan, p.pending.note())
	return nil
}

// pruneDoc is prune's --json document.
type pruneDoc struct {
	DryRun    bool      `json:"dry_run"`
	OlderThan string    `json:"older_than"`
	Before    time.Time `json:"before"` // the cut-off: rows older than it (an age: now less it, on prune's clock)
	Host      string    `json:"host"`
	// Rows is the count deleted (with dry_run: that would be deleted).
	Rows   int          `json:"rows"`
	Tables []pruneTable `json:"tables"`
	// DeadLetterKept counts the pending dead-lettered events whose rows
	// were kept.
	DeadLetterKept int `json:"dead_letter_kept"`
}

// pruneTable is one table's count in pruneDoc.
type pruneTable struct {
	Table string `json:"table"`
	Rows  int    `json:"rows"`
}

type pruner struct {
	o        pruneOpts
	cfg      config.Config
	conn     *binlog.Conn
	store    *checkpoint.Store
	cutoff   when // rows before it go
	total    int
	progress *progress
	started  time.Time
	ownGTIDs map[string]bool // MariaDB: the GTIDs of prune's DELETEs
	pending  *pendingDeadLetters
}

// table prunes one outbox table, batch by batch. Rows are selected and
// deleted by primary key (an event id need not be unique: a re-sent event
// keeps its id, and its newer row must stay until published); rows with a
// NULL event id and rows whose event id is pending on a dead-letter topic
// (the dead-letter record may not carry the row: it is the only copy) are
// kept.
func (p *pruner) table(ctx context.Context, t string) error {
	rc := p.cfg.Router.For(t)
	timeCol := p.o.timeColumn
	if timeCol == "" {
		timeCol = rc.TimestampColumn
	}
	if timeCol == "" {
		timeCol = "created_at"
	}
	qt, err := source.QuoteTable(t)
	if err != nil {
		return err
	}
	pk, err := primaryKey(p.conn, t)
	if err != nil {
		return fmt.Errorf("prune %s: %w", t, err)
	}
	idCol, tcol := source.QuoteIdent(rc.EventIDColumn), source.QuoteIdent(timeCol)
	pkList := quoteIdents(pk)
	pkTuple := pkList
	if len(pk) > 1 {
		pkTuple = "(" + pkList + ")"
	}
	if p.started.IsZero() {
		p.started = time.Now()
	}
	var after []any // dry run: page past rows already counted
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("prune %s: interrupted after %d rows: %w", t, p.total, err)
		}
		if err := p.pending.refresh(ctx); err != nil {
			return fmt.Errorf("prune %s: %w", t, err)
		}
		older, args := p.older(tcol)
		q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s AND %s IS NOT NULL", pkList, idCol, qt, older, idCol)
		if skip := p.pending.of(t); len(skip) > 0 {
			q += fmt.Sprintf(" AND %s NOT IN (%s)", idCol, source.Placeholders(len(skip)))
			args = append(args, skip...)
		}
		if p.o.dryRun && after != nil {
			q += fmt.Sprintf(" AND %s > %s", pkTuple, tuplePlaceholders(len(pk)))
			args = append(args, after...)
		}
		if p.o.dryRun {
			q += fmt.Sprintf(" ORDER BY %s LIMIT %d", pkList, p.o.batch)
		} else {
			q += fmt.Sprintf(" ORDER BY %s, %s LIMIT %d", tcol, pkList, p.o.batch)
		}
		if len(args) > maxPlaceholders {
			return fmt.Errorf("prune %s: %d event ids pending on the dead-letter topics: replay or skip them first (dead-letter replay)", t, len(args))
		}
		res, err := p.conn.Execute(q, args...)
		if err != nil {
			return fmt.Errorf("prune %s: select candidates: %w", t, err)
		}
		selected := res.RowNumber()
		if selected == 0 {
			return nil
		}
		keys := make([][]any, 0, selected)
		ids := make([]string, 0, selected)
		for i := range selected {
			k := make([]any, len(pk))
			for j := range pk {
				v, err := res.GetValue(i, j)
				if err != nil {
					return fmt.Errorf("prune %s: read primary key: %w", t, err)
				}
				k[j] = v
			}
			id, err := res.GetString(i, len(pk))
			if err != nil {
				return fmt.Errorf("prune %s: read event id: %w", t, err)
			}
			keys, ids = append(keys, k), append(ids, id)
		}
		// Every row the SELECT saw was committed before this read.
		head, flavor, err := source.Executed(p.conn)
		if err != nil {
			return fmt.Errorf("prune %s: %w", t, err)
		}
		head = withoutOwnDelete(head, p.ownGTIDs)
		covered, cp, err := audit.WaitCovered(ctx, p.cfg, p.store, head, flavor, p.o.wait, "the pruned server")
		if err != nil {
			return fmt.Errorf("prune %s: %w", t, err)
		}
		if !covered {
			have := "no checkpoint"
			if cp != nil {
				have = fmt.Sprintf("%q", cp.GTIDSet)
			}
			return fmt.Errorf("prune %s: %w: the server has executed %q, the checkpoint of %s covers %s (waited %s; is the relay running and caught up?); %d deleted so far, %d candidate rows left in place",
				t, errNotCovered, head, p.cfg.Name, have, p.o.wait, p.total, len(ids))
		}
		// A row dead-lettered by the transactions the checkpoint now
		// covers is pending on the dead-letter topic: keep it.
		if err := p.pending.refresh(ctx); err != nil {
			return fmt.Errorf("prune %s: %w", t, err)
		}
		last := keys[len(keys)-1]
		keys = p.pending.filter(t, keys, ids)
		if p.o.dryRun {
			p.total += len(keys)
			after = last
			p.progress.update("%s: %d rows would be deleted (published)%s", t, p.total, p.pending.note())
			if selected < p.o.batch {
				return nil
			}
			continue
		}
		n, err := p.deleteKeys(qt, pk, pkTuple, keys)
		if err != nil {
			return fmt.Errorf("prune %s: delete %d rows: %w (%d deleted before)", t, len(keys), err, p.total)
		}
		p.total += n
		p.progress.update("%s: %d rows deleted, %d rows/s%s", t, p.total, perSecond(p.total, time.Since(p.started)), p.pending.note())
		if p.o.maxRate > 0 {
			// Pace: the next batch starts when the average is back at the limit.
			due := p.started.Add(time.Duration(float64(p.total) / p.o.maxRate * float64(time.Second)))
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(due)):
			}
		}
		if selected < p.o.batch {
			return nil
		}
	}
}

// maxPlaceholders is MySQL's and MariaDB's limit of placeholders in one
// prepared statement (error 1390 past it).
const maxPlaceholders = 65535

// deleteKeys deletes the rows of keys by primary key in one transaction
// (one GTID), in statements of at most maxPlaceholders placeholders.
func (p *pruner) deleteKeys(qt string, pk []string, pkTuple string, keys [][]any) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	if err := p.conn.Begin(); err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	n := 0
	per := maxPlaceholders / len(pk)
	for start := 0; start < len(keys); start += per {
		chunk := keys[start:min(len(keys), start+per)]
		tuple := tuplePlaceholders(len(pk))
		args := make([]any, 0, len(chunk)*len(pk))
		for _, k := range chunk {
			args = append(args, k...)
		}
		q := fmt.Sprintf("DELETE FROM %s WHERE %s IN (%s)", qt, pkTuple, strings.TrimSuffix(strings.Repeat(tuple+",", len(chunk)), ","))
		r, err := p.conn.Execute(q, args...)
		if err != nil {
			_ = p.conn.Rollback()
			return 0, err
		}
		n += int(r.AffectedRows)
	}
	if err := p.conn.Commit(); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	if flavor, _ := p.conn.Execute("SELECT @@SESSION.last_gtid"); flavor != nil && flavor.RowNumber() == 1 {
		// MariaDB: this DELETE inserted no outbox row: the next batch need
		// not wait for a checkpoint covering it (see withoutOwnDelete).
		// MySQL has no last_gtid: the SELECT fails and nothing is kept.
		if g, _ := flavor.GetString(0, 0); g != "" {
			if p.ownGTIDs == nil {
				p.ownGTIDs = map[string]bool{}
			}
			p.ownGTIDs[g] = true
		}
	}
	return n, nil
}

// primaryKey lists table t's primary key columns: prune deletes by them.
func primaryKey(conn *binlog.Conn, t string) ([]string, error) {
	cols, err := source.PrimaryKey(conn, t)
	if err == nil && len(cols) == 0 {
		err = errors.New("the table has no primary key (or does not exist): prune selects and deletes rows by primary key")
	}
	return cols, err
}

func quoteIdents(cols []string) string {
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = source.QuoteIdent(c)
	}
	return strings.Join(q, ", ")
}

// tuplePlaceholders is "?" for one column, "(?,?)" for more.
func tuplePlaceholders(n int) string {
	if n == 1 {
		return "?"
	}
	return "(" + source.Placeholders(n) + ")"
}

// withoutOwnDelete lowers head (a MariaDB GTID position: the last GTID
// per domain) past prune's own DELETEs (own) that are the last
// transactions of their domain: everything before them in the domain has
// a lower sequence number, and the DELETEs inserted nothing to publish.
// Otherwise head is returned as it is.
func withoutOwnDelete(head string, own map[string]bool) string {
	if len(own) == 0 {
		return head
	}
	parts := strings.Split(head, ",")
	out := parts[:0]
	for _, g := range parts {
		g = strings.TrimSpace(g)
		i := strings.LastIndexByte(g, '-')
		if i < 0 {
			return head
		}
		seq, err := strconv.ParseUint(g[i+1:], 10, 64)
		if err != nil {
			return head
		}
		for seq > 0 && own[g[:i+1]+strconv.FormatUint(seq, 10)] {
			seq--
		}
		if seq > 0 {
			out = append(out, g[:i+1]+strconv.FormatUint(seq, 10))
		}
	}
	return strings.Join(out, ",")
}

// checkPrimary refuses a server that is read-only or replicates from
// another: deleting there would fail, or make it diverge from its primary.
// Replication status needs REPLICATION CLIENT (or SLAVE MONITOR); without
// it only read_only is checked.
func checkPrimary(conn *binlog.Conn) error {
	rows, err := binlog.Query(conn, "SELECT @@GLOBAL.read_only")
	if err != nil {
		return fmt.Errorf("read read_only: %w", err)
	}
	if len(rows) == 1 && rows[0][0] == "1" {
		return errors.New("the server is read-only (a replica?): run prune against the primary with --host")
	}
	for _, q := range []string{"SHOW REPLICA STATUS", "SHOW SLAVE STATUS"} {
		if rows, err := binlog.Query(conn, q); err == nil {
			if len(rows) > 0 {
				return errors.New("the server is a replica (" + q + " lists a source): run prune against the primary with --host")
			}
			return nil
		}
	}
	return nil
}
