package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/rs/zerolog"
)

func checkpointCmd(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: checkpoint show|history|set|reset|skip --config FILE", errUsage)
	}
	switch args[0] {
	case "show":
		return checkpointShow(args[1:])
	case "history":
		return checkpointHistory(args[1:])
	case "set":
		return checkpointSet(args[1:])
	case "reset":
		return checkpointReset(args[1:])
	case "skip":
		return checkpointSkip(args[1:])
	default:
		return fmt.Errorf("%w: unknown checkpoint command %q", errUsage, args[0])
	}
}

func checkpointStore(cfg config.Config) (*checkpoint.Store, error) {
	opts, err := relay.KafkaOpts(cfg)
	if err != nil {
		return nil, err
	}
	return checkpoint.NewStore(cfg.Kafka.CheckpointTopic, opts...), nil
}

// currentCheckpoint opens cfg's store and loads its committed checkpoint
// (nil when there is none) for a command that writes a new one. When the
// checkpoint topic is held back by an open transaction of this pipeline
// itself (a relay killed between flush and commit), the checkpoint visible
// is the newest committed one, and the write aborts that transaction: it
// goes on with a warning. Held back by another pipeline, the visible one may
// be stale: strict commands fail, the others go on with a warning.
func currentCheckpoint(ctx context.Context, cfg config.Config, strict bool) (*checkpoint.Store, *checkpoint.Checkpoint, error) {
	store, err := checkpointStore(cfg)
	if err != nil {
		return nil, nil, err
	}
	cp, err := store.Load(ctx, cfg.Name)
	var held *checkpoint.HeldBackError
	if !errors.As(err, &held) {
		return store, cp, err
	}
	own := len(held.Holders) > 0
	for _, h := range held.Holders {
		own = own && h.TransactionalID == cfg.Name
	}
	switch {
	case own:
		fmt.Fprintf(os.Stderr, "warning: %s's own open transaction (a relay stopped between flush and commit) is aborted by this write\n", cfg.Name)
	case strict:
		return nil, nil, err
	default:
		fmt.Fprintf(os.Stderr, "warning: %v\nthe previous checkpoint shown below may not be the newest\n", err)
	}
	return store, held.Visible, nil
}

// checkpointShow prints the committed checkpoint. While a transaction open
// on the checkpoint topic (another pipeline's, crashed between producing its
// checkpoint and committing) hides records from read_committed readers
// beyond --wait, it cannot tell which checkpoint is the newest: it exits 1
// with an error naming the transactional id that holds the topic back, and
// prints nothing on stdout with --json; without --json it first prints the
// last visible checkpoint under a warning that a newer one may exist.
func checkpointShow(args []string) error {
	fs := flag.NewFlagSet("checkpoint show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON object")
	wait := fs.Duration("wait", checkpoint.DefaultStableWait, "how long to wait for transactions open on the checkpoint topic to end")
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *wait+cfg.Kafka.RequestTimeout)
	defer cancel()
	store, err := checkpointStore(cfg)
	if err != nil {
		return err
	}
	cp, err := store.WithStableWait(*wait).Load(ctx, cfg.Name)
	if held, ok := errors.AsType[*checkpoint.HeldBackError](err); ok && !*asJSON {
		fmt.Printf("WARNING: not final: %s holds records not yet visible to readers; a newer checkpoint of %s may be among them\n", cfg.Kafka.CheckpointTopic, cfg.Name)
		for _, h := range held.Holders {
			id := h.TransactionalID
			if id == "" {
				id = "(unknown)"
			}
			fmt.Printf("held back by: transactional id %s (producer id %d, from offset %d)\n", id, h.ProducerID, h.StartOffset)
		}
		if held.Visible == nil {
			fmt.Printf("last visible: no checkpoint for %s\n", cfg.Name)
		} else {
			fmt.Println("last visible checkpoint (possibly not the newest):")
			printCheckpoint(held.Visible)
		}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		if cp == nil {
			return fmt.Errorf("no checkpoint for %s in %s", cfg.Name, cfg.Kafka.CheckpointTopic)
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(cp)
	}
	if cp == nil {
		fmt.Printf("no checkpoint for %s in %s: the relay starts at source.start (%s)\n", cfg.Name, cfg.Kafka.CheckpointTopic, cfg.Source.Start)
		return nil
	}
	printCheckpoint(cp)
	return nil
}

func printCheckpoint(cp *checkpoint.Checkpoint) {
	fmt.Printf("name:        %s\n", cp.Name)
	fmt.Printf("flavor:      %s\n", cp.Flavor)
	fmt.Printf("gtid_set:    %s\n", cp.GTIDSet)
	if cp.Partial != nil {
		fmt.Printf("partial:     %d rows of %s published\n", cp.Partial.Rows, cp.Partial.GTID)
	}
	fmt.Printf("source:      %s (server %s)\n", cp.Host, cp.ServerID)
	fmt.Printf("written:     %s (%s ago)\n", cp.Time.Format(time.RFC3339), time.Since(cp.Time).Round(time.Second))
	if !cp.CommitTime.IsZero() {
		fmt.Printf("last commit: %s\n", cp.CommitTime.UTC().Format(time.RFC3339))
	}
	fmt.Printf("events:      %d\n", cp.Events)
}

func checkpointHistory(args []string) error {
	fs := flag.NewFlagSet("checkpoint history", flag.ContinueOnError)
	n := fs.Int("n", 20, "how many of the newest checkpoints")
	asJSON := fs.Bool("json", false, "print a JSON array")
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	store, err := checkpointStore(cfg)
	if err != nil {
		return err
	}
	list, err := store.History(ctx, cfg.Name, *n)
	if err != nil {
		return err
	}
	if *asJSON {
		if list == nil {
			list = []*checkpoint.Checkpoint{}
		}
		return json.NewEncoder(os.Stdout).Encode(list)
	}
	if len(list) == 0 {
		fmt.Printf("no checkpoints for %s in %s\n", cfg.Name, cfg.Kafka.CheckpointTopic)
		return nil
	}
	fmt.Printf("%-25s %10s  %s\n", "WRITTEN", "EVENTS", "GTID SET")
	for _, cp := range list {
		partial := ""
		if cp.Partial != nil {
			partial = fmt.Sprintf(" (+%d rows of %s)", cp.Partial.Rows, cp.Partial.GTID)
		}
		fmt.Printf("%-25s %10d  %s%s\n", cp.Time.UTC().Format(time.RFC3339), cp.Events, cp.GTIDSet, partial)
	}
	return nil
}

// checkpointSkip is the operator's way past a source transaction the relay
// stopped on and cannot publish (statement-logged DML on the outbox, an
// event it cannot open): it adds that one GTID to the committed checkpoint's
// set, keeping the rest of the checkpoint (layout, counters), and drops a
// partial that belongs to it. The transaction's rows are never published.
// It refuses a GTID the checkpoint already covers, and one that is not the
// next transaction after the checkpoint (MariaDB: the next sequence number
// of its domain; MySQL: the next number of its server_uuid[:tag]) unless
// --force. The write is the same as set's: it fences a relay of the
// pipeline, and asks for confirmation (--yes when stdin is not a terminal).
func checkpointSkip(args []string) error {
	fs := flag.NewFlagSet("checkpoint skip", flag.ContinueOnError)
	gtid := fs.String("gtid", "", "the one GTID to skip: MariaDB domain-server-sequence, MySQL server_uuid[:tag]:number")
	w := writeFlags{
		force: fs.Bool("force", false, "skip a GTID that is not the next after the checkpoint, and write even though a relay with this name looks live (it is fenced and stops)"),
		yes:   fs.Bool("yes", false, "do not ask for confirmation"),
	}
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	if *gtid = strings.TrimSpace(*gtid); *gtid == "" {
		return fmt.Errorf("%w: --gtid GTID is required", errUsage)
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkpoint.DefaultStableWait+cfg.Kafka.RequestTimeout)
	defer cancel()
	store, cur, err := currentCheckpoint(ctx, cfg, true)
	if err != nil {
		return err
	}
	if cur == nil {
		return fmt.Errorf("no checkpoint for %s in %s: nothing to skip from (use checkpoint set)", cfg.Name, cfg.Kafka.CheckpointTopic)
	}
	next, err := skipGTID(cur, *gtid, *w.force)
	if err != nil {
		return err
	}
	action := fmt.Sprintf("skip transaction %s of %s: checkpoint %q -> %q; its rows are never published", *gtid, cfg.Name, cur.GTIDSet, next.GTIDSet)
	if err := w.guard(cfg, cur, action); err != nil {
		return err
	}
	log := newLogger(cfg.Log, nil)
	if err := writeCheckpoint(cfg, store, next, log); err != nil {
		return err
	}
	ev := log.Warn().Str("name", cfg.Name).Str("gtid", *gtid).Str("from", cur.GTIDSet).Str("to", next.GTIDSet)
	if cur.Partial != nil && next.Partial == nil {
		ev = ev.Int64("partial_rows_dropped", cur.Partial.Rows)
	}
	ev.Msg("checkpoint skip: transaction skipped, its rows are not published")
	fmt.Printf("checkpoint of %s: skipped %s: %s -> %s\n", cfg.Name, *gtid, cur.GTIDSet, next.GTIDSet)
	if cur.Partial != nil && next.Partial == nil {
		fmt.Printf("dropped partial: %d rows of %s had been published\n", cur.Partial.Rows, cur.Partial.GTID)
	}
	return nil
}

// skipGTID returns a copy of cur whose set also covers gtid, one GTID in
// cur's flavor, with a partial of gtid dropped. It refuses a GTID cur
// covers, and, unless force, one that is not the next after cur.
func skipGTID(cur *checkpoint.Checkpoint, gtid string, force bool) (*checkpoint.Checkpoint, error) {
	set, err := binlog.ParseSet(cur.Flavor, cur.GTIDSet)
	if err != nil {
		return nil, fmt.Errorf("checkpoint of %s: %w", cur.Name, err)
	}
	one, err := binlog.ParseSet(cur.Flavor, gtid)
	if err != nil {
		return nil, fmt.Errorf("%w: --gtid: %w", errUsage, err)
	}
	if set.Contain(one) {
		return nil, fmt.Errorf("the checkpoint of %s (%s) already covers %s: nothing to skip", cur.Name, cur.GTIDSet, gtid)
	}
	var prev string // the GTID that must be covered for gtid to be the next
	switch o := one.(type) {
	case *mysql.MariadbGTIDSet:
		if len(o.Sets) != 1 {
			return nil, fmt.Errorf("%w: --gtid %q: give one GTID, domain-server-sequence", errUsage, gtid)
		}
		for d, g := range o.Sets {
			if g.SequenceNumber > 1 {
				prev = fmt.Sprintf("%d-%d-%d", d, g.ServerID, g.SequenceNumber-1)
			}
		}
	case *mysql.MysqlGTIDSet:
		n := 0
		for sid, tags := range *o {
			for tag, ivs := range tags {
				for _, iv := range ivs {
					n += int(iv.Stop - iv.Start)
					if iv.Start > 1 {
						prev = sid.String()
						if tag.String() != "" {
							prev += ":" + tag.String()
						}
						prev += fmt.Sprintf(":%d", iv.Start-1)
					}
				}
			}
		}
		if n != 1 {
			return nil, fmt.Errorf("%w: --gtid %q: give one GTID, server_uuid[:tag]:number", errUsage, gtid)
		}
	default:
		return nil, fmt.Errorf("%w: --gtid %q: unknown flavor %s", errUsage, gtid, cur.Flavor)
	}
	covered := prev == ""
	if !covered {
		p, err := binlog.ParseSet(cur.Flavor, prev)
		covered = err == nil && set.Contain(p)
	}
	if !covered && !force {
		return nil, fmt.Errorf("%s is not the transaction right after the checkpoint of %s (%s): skipping it would also pass over the transactions in between; "+
			"give the GTID the relay stopped on, or pass --force", gtid, cur.Name, cur.GTIDSet)
	}
	if err := set.Update(gtid); err != nil {
		return nil, fmt.Errorf("add %s to %s: %w", gtid, cur.GTIDSet, err)
	}
	next := *cur
	next.GTIDSet = set.String()
	if cur.Partial != nil && cur.Partial.GTID == gtid {
		next.Partial = nil
	}
	next.Time = time.Now().UTC()
	return &next, nil
}

// writeFlags are shared by set and reset.
type writeFlags struct {
	force, yes *bool
}

func addWriteFlags(fs *flag.FlagSet) writeFlags {
	return writeFlags{
		force: fs.Bool("force", false, "write even though a relay with this name looks live (it is fenced and stops)"),
		yes:   fs.Bool("yes", false, "do not ask for confirmation"),
	}
}

// guard refuses while a relay looks live and asks for confirmation.
func (w writeFlags) guard(cfg config.Config, cur *checkpoint.Checkpoint, action string) error {
	if cur != nil && !*w.force {
		if age := time.Since(cur.Time); age < 3*cfg.Kafka.CheckpointInterval {
			return fmt.Errorf("a relay named %s looks live (it checkpointed %s ago, within 3 x kafka.checkpoint_interval): stop it first, or pass --force to fence it",
				cfg.Name, age.Round(time.Millisecond))
		}
	}
	if *w.yes {
		return nil
	}
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return fmt.Errorf("%w: not a terminal: pass --yes to %s", errUsage, action)
	}
	fmt.Fprintf(os.Stderr, "%s? [y/N] ", action)
	answer, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return fmt.Errorf("not confirmed: nothing changed")
	}
	return nil
}

func checkpointSet(args []string) error {
	fs := flag.NewFlagSet("checkpoint set", flag.ContinueOnError)
	gtid := fs.String("gtid", "", "the new GTID set, in the server's notation")
	to := fs.String("to", "", "now | earliest: the source's current or oldest position")
	layoutFrom := fs.String("schema", "", "the column layout stored with the position (for servers without binlog_row_metadata=FULL): "+
		"keep (the previous checkpoint's) | server (the tables' current definitions); default: server with --to now, "+
		"else keep when the previous checkpoint has one")
	w := addWriteFlags(fs)
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	if (*gtid == "") == (*to == "") {
		return fmt.Errorf("%w: give exactly one of --gtid SET and --to now|earliest", errUsage)
	}
	if *to != "" && *to != "now" && *to != "earliest" {
		return fmt.Errorf("%w: --to %q: want now or earliest", errUsage, *to)
	}
	if *layoutFrom != "" && *layoutFrom != "keep" && *layoutFrom != "server" {
		return fmt.Errorf("%w: --schema %q: want keep or server", errUsage, *layoutFrom)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	src, err := relay.SourceConfig(cfg)
	if err != nil {
		return err
	}
	srv, err := binlog.Inspect(ctx, src)
	if err != nil {
		return err
	}
	pos := *gtid
	switch *to {
	case "now":
		pos = srv.Head
	case "earliest":
		pos = srv.Earliest
	}
	if _, err := binlog.ParseSet(srv.Flavor, pos); err != nil {
		return err
	}
	if err := srv.CheckNotPurged(pos); err != nil {
		return err
	}
	store, cur, err := currentCheckpoint(ctx, cfg, false)
	if err != nil {
		return err
	}
	from := "(none)"
	var events int64
	if cur != nil {
		from, events = cur.GTIDSet, cur.Events
	}
	layout, err := checkpointLayout(ctx, src, srv, cur, *layoutFrom, *to == "now", pos)
	if err != nil {
		return err
	}
	if err := w.guard(cfg, cur, fmt.Sprintf("move the checkpoint of %s from %q to %q", cfg.Name, from, pos)); err != nil {
		return err
	}
	cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: pos, Flavor: srv.Flavor, ServerID: srv.ServerID, Host: srv.Addr,
		Time: time.Now().UTC(), Events: events, Schema: layout}
	if cur != nil && cur.XA != nil {
		if pos == cur.GTIDSet {
			cp.XA = cur.XA // same position: the prepared XA transactions are still pending
		} else {
			fmt.Fprintf(os.Stderr, "warning: the checkpoint listed %d prepared XA transactions; at the new position the relay "+
				"knows none, so an XA COMMIT of one of them stops it (`checkpoint skip` past it once its outbox rows, if any, "+
				"are published)\n", len(cur.XA.Prepared))
		}
	}
	log := newLogger(cfg.Log, nil)
	if err := writeCheckpoint(cfg, store, cp, log); err != nil {
		return err
	}
	log.Info().Str("name", cfg.Name).Str("from", from).Str("to", pos).Msg("checkpoint set")
	fmt.Printf("checkpoint of %s: %s -> %s\n", cfg.Name, from, pos)
	return nil
}

// checkpointLayout is the column layout checkpoint set stores with pos: the
// relay decodes rows with it when the binlog carries no column names, so
// dropping it would leave the relay unable to read the outbox there. mode
// "keep" takes the previous checkpoint's (shadow tables of an online schema
// change included); "server" the captured tables' current definitions;
// "" picks server for --to now (the head matches today's definitions) and
// keep when there is a previous layout, else server. Captured tables the
// kept layout lacks come from the server. Neither source is certain for a
// position in the past: stderr says which was taken and when it is right.
func checkpointLayout(ctx context.Context, src binlog.Config, srv *binlog.Server, cur *checkpoint.Checkpoint, mode string, now bool, pos string) (map[string][]string, error) {
	if mode == "" {
		mode = "server"
		if !now && cur != nil && cur.Schema != nil {
			mode = "keep"
		}
	}
	note := ""
	if srv.ColumnNames {
		note = " (the server logs column names, binlog_row_metadata=FULL: rows are decoded with those; the layout is a fallback)"
	}
	out := map[string][]string{}
	missing := src.Tables
	if mode == "keep" {
		if cur == nil || cur.Schema == nil {
			return nil, fmt.Errorf("%w: --schema keep: there is no previous checkpoint with a layout to keep", errUsage)
		}
		missing = nil
		for t, cols := range cur.Schema {
			out[t] = cols
		}
		for _, t := range src.Tables {
			if _, ok := out[t]; !ok {
				missing = append(missing, t)
			}
		}
		fmt.Fprintf(os.Stderr, "layout: kept the previous checkpoint's (at %s): right only if no DDL changed the captured tables between %s and %s%s\n",
			cur.GTIDSet, cur.GTIDSet, pos, note)
	}
	if len(missing) > 0 {
		current, err := binlog.CurrentColumns(ctx, src, srv.Addr)
		if err != nil && !srv.ColumnNames {
			return nil, err
		}
		if err != nil { // rows carry their column names: the layout is only a fallback
			fmt.Fprintf(os.Stderr, "layout: not stored: %v%s\n", err, note)
			missing = nil
		}
		var took []string
		for _, t := range missing {
			cols, ok := current[t]
			if !ok {
				fmt.Fprintf(os.Stderr, "layout: %s not found on %s (missing, or no SELECT granted on it): its layout is unknown, "+
					"its rows need column names in the binlog (binlog_row_metadata=FULL)\n", t, srv.Addr)
				continue
			}
			out[t] = cols
			took = append(took, t)
		}
		if len(took) > 0 {
			fmt.Fprintf(os.Stderr, "layout: took the current definition of %s from %s: right only if no DDL changed it after %s%s\n",
				strings.Join(took, ", "), srv.Addr, pos, note)
		}
	}
	for _, t := range src.Tables {
		if cols, ok := out[t]; ok {
			fmt.Fprintf(os.Stderr, "layout: %s: %s\n", t, strings.Join(cols, ", "))
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

func checkpointReset(args []string) error {
	fs := flag.NewFlagSet("checkpoint reset", flag.ContinueOnError)
	w := addWriteFlags(fs)
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	store, cur, err := currentCheckpoint(ctx, cfg, false)
	if err != nil {
		return err
	}
	if cur == nil {
		fmt.Printf("no checkpoint for %s: nothing to reset\n", cfg.Name)
		return nil
	}
	if err := w.guard(cfg, cur, fmt.Sprintf("delete the checkpoint of %s (at %q); the relay then starts at source.start (%s)", cfg.Name, cur.GTIDSet, cfg.Source.Start)); err != nil {
		return err
	}
	log := newLogger(cfg.Log, nil)
	if err := writeCheckpoint(cfg, store, nil, log); err != nil {
		return err
	}
	log.Info().Str("name", cfg.Name).Str("from", cur.GTIDSet).Msg("checkpoint reset")
	fmt.Printf("checkpoint of %s: %s -> (none)\n", cfg.Name, cur.GTIDSet)
	return nil
}

// writeCheckpoint commits cp (nil: a tombstone) with a deadline of its own,
// so that the time a user took to confirm does not count against it. A
// checkpoint committed but held back from readers by an older open
// transaction is a warning: it is written, and visible once that ends.
func writeCheckpoint(cfg config.Config, store *checkpoint.Store, cp *checkpoint.Checkpoint, log zerolog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	err := store.Write(ctx, cfg.Name, cp)
	if errors.Is(err, checkpoint.ErrNotVisible) {
		log.Warn().Err(err).Str("topic", store.Topic()).
			Msg("checkpoint committed; readers see it once the older open transaction on the topic ends (at most the producers' transaction timeout)")
		return nil
	}
	return err
}
