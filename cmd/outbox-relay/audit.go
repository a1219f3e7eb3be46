package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/audit"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// errAuditFailed: the audit found a missing or duplicated row or a
// phantom record (exit 1).
var errAuditFailed = errors.New("audit failed")

// errAuditPending: the audit found nothing missing, duplicated or phantom,
// but rows not yet published (exitAuditPending).
var errAuditPending = errors.New("audit not clean")

// exitAuditPending is audit's exit code when rows are only pending:
// sysexits' EX_TEMPFAIL, "try again later" (relay.ExitTransient).
const exitAuditPending = relay.ExitTransient

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
  missing       the committed checkpoint covers the row (its transaction's
                GTID is in the checkpoint's set), no record has its id:
                whatever the relay's lag
  pending       its transaction is past the checkpoint (relay behind or
                stopped), no record has its id yet
  duplicated    more records with its id than rows, "replayed" ones aside

and each record in the window whose id is no row's as a phantom, unless its
row is outside the window (looked up by id) or it is older than the oldest
row left in the tables (the row may have been pruned).

Coverage: after reading the rows, audit reads the server's executed GTID set
(every row read was committed before it) and waits up to --wait for the
committed checkpoint to contain it. If it does, every row read is covered.
If not, it reads the server's binlog after the checkpoint up to that set:
the rows INSERTed there (told apart by table and primary key) are past the
checkpoint, every other row is covered. The checkpoint is judged as run
judges it: a lost one stops audit as it stops run.

Verdict and exit code: clean (0) when every row is published once and no
record is phantom; mismatch (1) when a row is missing or duplicated or a
record is phantom, pending rows or not; pending (75, "try again later") when
nothing is missing, duplicated or phantom but rows are not yet published:
"pending: N rows not yet published, oldest committed at T". 65 when the
checkpoint is lost (the pipeline had one: checkpoint set or checkpoint
reset, as run says). Times are RFC 3339 or an age (90m, 2h, 7d: that long
ago). See docs/audit.md.`,
		Example: `  outbox-relay audit --config relay.yaml --since 2h
  outbox-relay audit --config relay.yaml --since 2026-11-30T10:00:00Z --until 2026-11-30T11:00:00Z --json | jq .missing`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	cmd.Flags().StringVar(&o.since, "since", "", "audit rows whose time column is at or after this (RFC 3339, or an age: 2h)")
	cmd.Flags().StringVar(&o.until, "until", "", "audit rows whose time column is before this (RFC 3339, or an age: 1h; default: no end)")
	cmd.Flags().BoolVar(&o.asJSON, "json", false, "print the report as one JSON object on one line")
	cmd.Flags().DurationVar(&o.margin, "margin", 5*time.Minute, "read records from this long before --since (clock skew, commit delay)")
	cmd.Flags().DurationVar(&o.wait, "wait", 10*time.Second, "how long to wait for the checkpoint to cover the rows read")
	cmd.Flags().IntVar(&o.maxIDs, "max-ids", audit.DefaultMaxIDs, "name at most this many ids of each outcome")
	cmd.Flags().StringVar(&o.timeColumn, "time-column", "", "column holding the row's time (default: router timestamp_column, else created_at)")
	cmd.Flags().StringSliceVar(&o.topics, "topic", nil, "also read this topic for phantoms (repeat, or comma-separated)")
	addDBFlags(cmd, &o.db, "read from", "a replica is fine: audit only reads the rows and the binlog after the checkpoint")
	cmd.RunE = func(*cobra.Command, []string) error {
		o.path = *path
		return runAudit(o)
	}
	return cmd
}

// auditDoc is the --json document.
type auditDoc struct {
	Since      time.Time  `json:"since"`
	Until      *time.Time `json:"until"`
	Tables     []string   `json:"tables"`
	Topics     []string   `json:"topics"`
	Checkpoint string     `json:"checkpoint_gtid_set"`
	Executed   string     `json:"source_gtid_set"`
	// NoCheckpoint says why there is none (a first start, a reset); ""
	// with one.
	NoCheckpoint string `json:"no_checkpoint,omitempty"`
	// Unkeyed: tables without a primary key, whose rows could not be told
	// past the checkpoint or covered (the relay behind).
	Unkeyed []string `json:"tables_without_primary_key,omitempty"`
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
	from, err := parseWhen("--since", o.since, now)
	if err != nil {
		return err
	}
	since := from.At
	var until time.Time
	if o.until != "" {
		to, err := parseWhen("--until", o.until, now)
		if err != nil {
			return err
		}
		if until = to.At; !until.After(since) {
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
	conn, src, err := o.db.connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	prog := newProgress("audit")
	res, err := audit.Run(ctx, cfg, audit.Source{Conn: conn, Config: src, Addr: o.db.addr(src)}, audit.Options{Since: since, Until: until, Margin: o.margin, Wait: o.wait,
		MaxIDs: o.maxIDs, TimeColumn: o.timeColumn, Topics: o.topics,
		Progress: func(n int) { prog.update("%d rows read", n) },
		Warn:     func(msg string) { fmt.Fprintln(os.Stderr, "warning: "+msg) }})
	prog.done()
	if err != nil {
		return err
	}
	rep := res.Report
	doc := auditDoc{Since: since, Tables: res.Tables, Topics: res.Topics, Checkpoint: res.Checkpoint, Executed: res.Executed,
		NoCheckpoint: res.NoCheckpoint, Unkeyed: res.Unkeyed, Report: rep}
	if !until.IsZero() {
		doc.Until = &until
	}
	if o.asJSON {
		if err := writeJSON(os.Stdout, doc); err != nil {
			return err
		}
	} else {
		printAudit(doc)
	}
	switch rep.Verdict {
	case audit.VerdictClean:
		return nil
	case audit.VerdictPending:
		return fmt.Errorf("%w: %s", errAuditPending, res.PendingSentence())
	}
	err = fmt.Errorf("%w: %d missing, %d duplicated, %d phantom", errAuditFailed, rep.Missing.Count, rep.Duplicated.Count, rep.Phantom.Count)
	if rep.Pending.Count > 0 {
		err = fmt.Errorf("%w; %s", err, res.PendingSentence())
	}
	return err
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
	switch {
	case d.Covered:
	case d.Checkpoint == "":
		fmt.Printf("audit: %s: rows without a record are pending\n", d.NoCheckpoint)
	default:
		fmt.Printf("audit: the committed checkpoint (%q) does not cover the source's executed set %q (the relay is behind or stopped): "+
			"rows without a record whose transactions are past it (read from the binlog) are pending, the others missing\n", d.Checkpoint, d.Executed)
	}
	if len(d.Unkeyed) > 0 {
		fmt.Printf("audit: %s: no primary key: rows without a record count as missing (their place before or past the checkpoint cannot be told)\n",
			strings.Join(d.Unkeyed, ", "))
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
	switch d.Verdict {
	case audit.VerdictClean:
		fmt.Println("audit: clean")
	case audit.VerdictPending:
		fmt.Println("audit: " + pendingSentence(d))
	default:
		fmt.Printf("audit: mismatch: %d missing, %d duplicated, %d phantom\n", d.Missing.Count, d.Duplicated.Count, d.Phantom.Count)
		if d.Pending.Count > 0 {
			fmt.Println("audit: " + pendingSentence(d))
		}
	}
}

// pendingSentence is audit.Result.PendingSentence of the document.
func pendingSentence(d auditDoc) string {
	return audit.Result{Report: d.Report, NoCheckpoint: d.NoCheckpoint}.PendingSentence()
}
