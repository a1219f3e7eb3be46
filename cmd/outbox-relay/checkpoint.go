package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/source"
)

func newCheckpointCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint show|history|set|skip|reset|tables --config FILE",
		Short: "inspect or move the pipeline's stored position",
		Long: `checkpoint reads and writes the pipeline's checkpoint (its GTID set and state),
stored in kafka.checkpoint_topic under the pipeline name. set, skip and reset
write in a Kafka transaction with the relay's transactional id, so a live
relay is fenced; they refuse while a relay of the pipeline runs (a member of
its lock group, active or standby) unless --force, and ask for confirmation
(--yes when stdin is not a terminal).`,
		Example: `  outbox-relay checkpoint show --config relay.yaml --json
  outbox-relay checkpoint history --config relay.yaml -n 5
  outbox-relay checkpoint set --config relay.yaml --to now --yes`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	cmd.AddCommand(newCheckpointShowCmd(), newCheckpointHistoryCmd(), newCheckpointSetCmd(), newCheckpointSkipCmd(), newCheckpointResetCmd(),
		newCheckpointTablesCmd())
	return cmd
}

func checkpointStore(cfg config.Config) (*checkpoint.Store, error) {
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return nil, err
	}
	// exactly-once, every checkpoint of the pipeline is transactional
	return k.CheckpointStore(), nil
}

// currentCheckpoint opens cfg's store and loads its committed checkpoint
// (nil when there is none) for a command that writes a new one. When the
// checkpoint topic is held back by an open transaction of this pipeline
// itself (a relay killed between flush and commit), the checkpoint visible
// is the newest committed one, and the write aborts that transaction: it
// goes on with a warning. Held back by another pipeline, the visible one may
// be stale: strict commands fail, the others go on with a warning.
func currentCheckpoint(ctx context.Context, cfg config.Config, strict bool) (*checkpoint.Store, *checkpoint.Checkpoint, error) {
	store, loaded, _, err := currentState(ctx, cfg, strict)
	return store, loaded.Checkpoint, err
}

// currentState is currentCheckpoint with all that was loaded (a reset
// marker's operator and partition counts, checkpoint.Loaded); known is
// false when only the part visible past an open transaction was read.
func currentState(ctx context.Context, cfg config.Config, strict bool) (store *checkpoint.Store, loaded checkpoint.Loaded, known bool, err error) {
	store, err = checkpointStore(cfg)
	if err != nil {
		return nil, loaded, false, err
	}
	loaded, err = store.LoadState(ctx, cfg.Name)
	var held *checkpoint.HeldBackError
	if !errors.As(err, &held) {
		return store, loaded, err == nil, err
	}
	own := len(held.Holders) > 0
	for _, h := range held.Holders {
		own = own && slices.Contains(checkpoint.TransactionalIDs(cfg.Name), h.TransactionalID)
	}
	switch {
	case own:
		fmt.Fprintf(os.Stderr, "warning: %s's own open transaction (a relay stopped between flush and commit) is aborted by this write\n", cfg.Name)
	case strict:
		return nil, checkpoint.Loaded{}, false, err
	default:
		fmt.Fprintf(os.Stderr, "warning: %v\nthe previous checkpoint shown below may not be the newest\n", err)
	}
	return store, checkpoint.Loaded{Checkpoint: held.Visible}, false, nil
}

// checkpointShow prints the committed checkpoint. While a transaction open
// on the checkpoint topic (another pipeline's, crashed between producing its
// checkpoint and committing) hides records from read_committed readers
// beyond --wait, it cannot tell which checkpoint is the newest: it exits 1
// with an error naming the transactional id that holds the topic back, and
// prints nothing on stdout with --json; without --json it first prints the
// last visible checkpoint under a warning that a newer one may exist.
func newCheckpointShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show --config FILE",
		Short: "print the committed checkpoint",
		Long: `show prints the committed checkpoint of the pipeline. While a transaction open
on the checkpoint topic hides newer records beyond --wait it exits 1 naming
the transactional id that holds it (text mode first prints the last visible
checkpoint, marked not final).`,
		Example: `  outbox-relay checkpoint show --config relay.yaml
  outbox-relay checkpoint show --config relay.yaml --json | jq -r .gtid_set`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print a JSON object (gtid_set, flavor, partial, xa, time, events, ...) on one line")
	wait := cmd.Flags().Duration("wait", checkpoint.DefaultStableWait, "how long to wait for transactions open on the checkpoint topic to end")
	cmd.RunE = func(*cobra.Command, []string) error {
		if *wait < 0 {
			return usageErr("--wait %s: want a duration of 0 or more, such as 10s", *wait)
		}
		cfg, err := loadConfigFile(*path)
		if err != nil {
			return err
		}
		return checkpointShow(cfg, asJSON, wait)
	}
	return cmd
}

func checkpointShow(cfg config.Config, asJSON *bool, wait *time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), *wait+cfg.Kafka.RequestTimeout)
	defer cancel()
	store, err := checkpointStore(cfg)
	if err != nil {
		return err
	}
	cp, reset, err := store.WithStableWait(*wait).LoadWithReset(ctx, cfg.Name)
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
		return writeJSON(os.Stdout, cp)
	}
	if cp == nil && reset != nil {
		fmt.Printf("no checkpoint for %s in %s: reset by %s at %s (it was at %s): the relay starts at source.start (%s)\n", cfg.Name,
			cfg.Kafka.CheckpointTopic, reset.User, reset.Time.Format(time.RFC3339), cmp.Or(reset.From, "(none)"), cfg.Source.Start)
		return nil
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
	if cp.SourceUID != "" && cp.SourceUID != cp.ServerID {
		fmt.Printf("source:      %s (server %s, server_uid %s)\n", cp.Host, cp.ServerID, cp.SourceUID)
	} else {
		fmt.Printf("source:      %s (server %s)\n", cp.Host, cp.ServerID)
	}
	fmt.Printf("written:     %s (%s ago)\n", cp.Time.Format(time.RFC3339), time.Since(cp.Time).Round(time.Second))
	if !cp.CommitTime.IsZero() {
		fmt.Printf("last commit: %s\n", cp.CommitTime.UTC().Format(time.RFC3339))
	}
	fmt.Printf("events:      %d\n", cp.Events)
	if op := cp.Operator; op != nil {
		fmt.Printf("written by:  checkpoint %s, %s at %s (it was at %s)\n", op.Command, op.User, op.Time.Format(time.RFC3339), cmp.Or(op.From, "(none)"))
	}
}

func newCheckpointHistoryCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "history --config FILE [-n N]",
		Short: "list recent committed checkpoints, oldest first",
		Long: `history lists the newest committed checkpoints of the pipeline with their
times, event counts and GTID sets, as far back as compaction of the
checkpoint topic kept them.`,
		Example: `  outbox-relay checkpoint history --config relay.yaml
  outbox-relay checkpoint history --config relay.yaml -n 5 --json`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	n := cmd.Flags().IntP("limit", "n", 20, "how many of the newest checkpoints (1 or more)")
	asJSON := cmd.Flags().Bool("json", false, "print a JSON array of checkpoints on one line")
	cmd.RunE = func(*cobra.Command, []string) error {
		if *n < 1 {
			return usageErr("-n %d: want a count of 1 or more", *n)
		}
		cfg, err := loadConfigFile(*path)
		if err != nil {
			return err
		}
		return checkpointHistory(cfg, n, asJSON)
	}
	return cmd
}

func checkpointHistory(cfg config.Config, n *int, asJSON *bool) error {
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
		return writeJSON(os.Stdout, list)
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
func newCheckpointSkipCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "skip --config FILE --gtid GTID",
		Short: "pass over one source transaction the relay stopped on and cannot publish",
		Long: `skip adds one GTID, the next transaction after the checkpoint (else --force),
to the committed checkpoint, keeping its layout and XA state: the recovery
from a stop on statement-logged DML or a transaction the relay cannot open.
That transaction's rows are never published.`,
		Example: `  outbox-relay checkpoint skip --config relay.yaml --gtid 0-1-11
  outbox-relay checkpoint skip --config relay.yaml --gtid 3e11fa47-71ca-11e1-9e33-c80aa9429562:11 --yes`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	gtid := cmd.Flags().String("gtid", "", "the one GTID to skip: MariaDB domain-server-sequence, MySQL server_uuid[:tag]:number")
	w := writeFlags{
		force: cmd.Flags().Bool("force", false, "skip a GTID that is not the next after the checkpoint, and write even though a relay of this pipeline is running (it is fenced, its open transaction aborted)"),
		yes:   cmd.Flags().Bool("yes", false, "do not ask for confirmation"),
	}
	cmd.RunE = func(*cobra.Command, []string) error {
		if *gtid = strings.TrimSpace(*gtid); *gtid == "" {
			return usageErr("--gtid GTID is required")
		}
		cfg, err := loadConfigFile(*path)
		if err != nil {
			return err
		}
		return checkpointSkip(cfg, gtid, w)
	}
	return cmd
}

func checkpointSkip(cfg config.Config, gtid *string, w writeFlags) error {
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
	if err := w.live(cfg); err != nil {
		return err
	}
	if err := skipReached(ctx, cfg, next.GTIDSet, *w.force); err != nil {
		return err
	}
	action := fmt.Sprintf("skip transaction %s of %s: checkpoint %q -> %q; its rows are never published", *gtid, cfg.Name, cur.GTIDSet, next.GTIDSet)
	if err := w.confirm(action); err != nil {
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
	next.Operator = operatorMark("skip", cur.GTIDSet)
	return &next, nil
}

// writeFlags are shared by set and reset.
type writeFlags struct {
	force, yes *bool
}

func addWriteFlags(fs *pflag.FlagSet) writeFlags {
	return writeFlags{
		force: fs.Bool("force", false, "write even though a relay of this pipeline is running (a member of its lock group): it is fenced, its open transaction aborted"),
		yes:   fs.Bool("yes", false, "do not ask for confirmation"),
	}
}

// overNewer lets set and reset replace a checkpoint in a newer format (the
// way back after a downgrade), or one written outside a transaction, with
// --force only: which relay wrote it, and whether it still runs, is
// unknown. Other errors come back as they are.
func (w writeFlags) overNewer(err error) error {
	if errors.Is(err, checkpoint.ErrNotTransactional) {
		if !*w.force {
			return fmt.Errorf("%w; pass --force to replace it", err)
		}
		fmt.Fprintf(os.Stderr, "warning: %v: replacing it (--force)\n", err)
		return nil
	}
	if err == nil || !errors.Is(err, checkpoint.ErrNewerFormat) {
		return err
	}
	if !*w.force {
		return fmt.Errorf("%w: a newer outbox-relay wrote it and may still be running: stop it, then pass --force to replace its checkpoint", err)
	}
	fmt.Fprintf(os.Stderr, "warning: %v: replacing it (--force)\n", err)
	return nil
}

// guard refuses while a relay of the pipeline runs (ha.RefuseLive: a
// member of its lock group, active or standby; one that exited, on an
// error too, is none), unless --force, and asks for confirmation.
func (w writeFlags) guard(cfg config.Config, action string) error {
	if err := w.live(cfg); err != nil {
		return err
	}
	return w.confirm(action)
}

// live is guard's liveness half: one function for every command.
// --force passes a running relay only when the write fences it
// (exactly-once): an at-least-once relay writes no transactions.
func (w writeFlags) live(cfg config.Config) error {
	if *w.force && cfg.Kafka.Delivery == config.ExactlyOnce {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	k, err := clients.NewKafka(cfg)
	if err == nil {
		err = ha.RefuseLive(ctx, cfg, k.Admin())
	}
	if err != nil && *w.force && !errors.Is(err, ha.ErrRelayLive) {
		fmt.Fprintf(os.Stderr, "warning: %v: going on (--force)\n", err)
		return nil
	}
	return err
}

// confirm is guard's confirmation half.
func (w writeFlags) confirm(action string) error {
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

func newCheckpointSetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "set --config FILE --gtid SET | --to now|earliest",
		Short: "move the position to a GTID set, or to the source's current or oldest position",
		Long: `set writes a new checkpoint: a later position skips events, an earlier one
publishes them again. The captured tables' column layout is kept from the
previous checkpoint or read from the server (--schema). A --gtid set naming
transactions the source has not executed (a typo, another server's GTID) is
refused unless --force, and so is one whose binlogs the source has purged.`,
		Example: `  outbox-relay checkpoint set --config relay.yaml --to now
  outbox-relay checkpoint set --config relay.yaml --gtid 0-1-100 --schema keep --yes`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	gtid := cmd.Flags().String("gtid", "", "the new GTID set, in the server's notation")
	to := cmd.Flags().String("to", "", "now | earliest: the source's current or oldest position")
	layoutFrom := cmd.Flags().String("schema", "", "the column layout stored with the position (for servers without binlog_row_metadata=FULL): "+
		"keep (the previous checkpoint's) | server (the tables' current definitions); default: server with --to now, "+
		"else keep when the previous checkpoint has one")
	w := addWriteFlags(cmd.Flags())
	cmd.RunE = func(*cobra.Command, []string) error {
		if (*gtid == "") == (*to == "") {
			return usageErr("give exactly one of --gtid SET and --to now|earliest")
		}
		if *to != "" && *to != "now" && *to != "earliest" {
			return usageErr("--to %q: want now or earliest", *to)
		}
		if *layoutFrom != "" && *layoutFrom != "keep" && *layoutFrom != "server" {
			return usageErr("--schema %q: want keep or server", *layoutFrom)
		}
		cfg, err := loadConfigFile(*path)
		if err != nil {
			return err
		}
		return checkpointSet(cfg, gtid, to, layoutFrom, w)
	}
	return cmd
}

func checkpointSet(cfg config.Config, gtid, to, layoutFrom *string, w writeFlags) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	src, err := clients.Source(cfg)
	if err != nil {
		return err
	}
	srv, err := source.Inspect(ctx, src)
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
	if err := source.CheckNotPurged(srv, pos); err != nil {
		return err
	}
	if *to == "" {
		if err := reachedBy(srv, "set", pos, *w.force); err != nil {
			return err
		}
	}
	store, loaded, known, err := currentState(ctx, cfg, false)
	if err := w.overNewer(err); err != nil {
		return err
	}
	cur := loaded.Checkpoint
	placed, _ := carried(loaded, known)
	from, prev := "(none)", ""
	var events int64
	if cur != nil {
		from, prev, events = cur.GTIDSet, cur.GTIDSet, cur.Events
	}
	layout, signs, err := checkpointLayout(ctx, src, srv, cur, *layoutFrom, *to == "now", pos)
	if err != nil {
		return err
	}
	if err := w.guard(cfg, fmt.Sprintf("move the checkpoint of %s from %q to %q", cfg.Name, from, pos)); err != nil {
		return err
	}
	cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: pos, Flavor: srv.Flavor, ServerID: srv.ServerID, Host: srv.Addr, SourceUID: srv.UID,
		Time: time.Now().UTC(), Events: events, Schema: layout, Unsigned: signs, Operator: operatorMark("set", prev)}
	cp.Provisional = keptProvisional(cur, layout)
	cp.Tables = checkpoint.TablesOf(cfg.Source.Tables) // set records the configuration's tables
	// Keys stay placed by the recorded partition counts (also those a reset
	// marker carries): a set never moves an aggregate to another partition
	// (kafka.on_partitions_added).
	cp.Partitions = placed
	if cur != nil && cur.XA != nil {
		if pos == cur.GTIDSet {
			cp.XA = cur.XA // same position: the prepared XA transactions are still pending
			cp.XA = xaSigns(cp.XA, layout, signs)
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

// writeCheckpoint commits cp (nil: a tombstone) with a deadline of its own,
// so that the time a user took to confirm does not count against it:
// exactly-once in a transaction that fences the relay, at-least-once
// without one, as its relay writes (no transactional id needed). A
// checkpoint committed but held back from readers by an older open
// transaction is a warning: it is written, and visible once that ends.
func writeCheckpoint(cfg config.Config, store *checkpoint.Store, cp *checkpoint.Checkpoint, log zerolog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	if err := ensureCheckpointTopic(ctx, cfg, store); err != nil {
		return err
	}
	var err error
	if cfg.Kafka.Delivery == config.ExactlyOnce {
		err = store.Write(ctx, cfg.Name, cfg.Kafka.TransactionLanes, cp)
	} else {
		// as its relay writes them: no transactional id needed, none fenced
		err = store.WritePlain(ctx, cfg.Name, cp)
	}
	if errors.Is(err, checkpoint.ErrNotVisible) {
		log.Warn().Err(err).Str("topic", store.Topic()).
			Msg("checkpoint committed; readers see it once the older open transaction on the topic ends (at most the producers' transaction timeout)")
		return nil
	}
	return err
}
