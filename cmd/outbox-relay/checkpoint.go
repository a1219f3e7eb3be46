package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
// Without a checkpoint it says why, judged as `run` judges it
// (ha.LoadJudged): a first start or a reset exits 0, a lost checkpoint 65,
// in text and --json alike.
func newCheckpointShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "show --config FILE",
		Short: "print the committed checkpoint",
		Long: `show prints the committed checkpoint of the pipeline. Without one it says
why, as run judges it: a first start or an operator's reset (the relay starts
at source.start: exit 0), or a lost checkpoint (the pipeline had one and the
checkpoint topic was deleted, created again or emptied: run refuses to start;
exit 65, naming the way out: checkpoint set or checkpoint reset). A principal
that may not read the lock group's record (DESCRIBE on the group and the lock
topic), which tells the two apart, cannot tell: exit 1. With --json a pipeline
without a checkpoint prints {"name", "checkpoint_topic", "checkpoint": null,
"state": "first-start"|"reset"|"lost"|"unknown", "detail", "start"}, with the
same exit codes. While a transaction open on the
checkpoint topic hides newer records beyond --wait it exits 1 naming the
transactional id that holds it (text mode first prints the last visible
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

// absentDoc is checkpoint show --json without a checkpoint.
type absentDoc struct {
	Name       string    `json:"name"`
	Topic      string    `json:"checkpoint_topic"`
	Checkpoint *struct{} `json:"checkpoint"` // always null: there is none
	State      string    `json:"state"`
	Detail     string    `json:"detail"`
	Start      string    `json:"start"`
}

// absentState names a verdict without a checkpoint in absentDoc.
func absentState(v checkpoint.Verdict) string {
	switch v {
	case checkpoint.Lost:
		return "lost"
	case checkpoint.FirstStart:
		return "first-start"
	case checkpoint.Undecided:
		return "unknown"
	}
	return "reset"
}

func checkpointShow(cfg config.Config, asJSON *bool, wait *time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), *wait+cfg.Kafka.RequestTimeout)
	defer cancel()
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return err
	}
	loaded, j, err := ha.LoadJudged(ctx, cfg, k, k.CheckpointStore().WithStableWait(*wait))
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
	if cp := loaded.Checkpoint; cp != nil {
		if *asJSON {
			return writeJSON(os.Stdout, cp)
		}
		printCheckpoint(cp)
		return nil
	}
	if *asJSON {
		doc := absentDoc{Name: cfg.Name, Topic: cfg.Kafka.CheckpointTopic, State: absentState(j.Verdict), Detail: j.Say, Start: cfg.Source.Start}
		if err := writeJSON(os.Stdout, doc); err != nil {
			return err
		}
	} else if j.Err == nil {
		fmt.Println(j.Say)
	}
	return j.Err // lost: exit 65, the error naming what and the way out
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
	if fp := cp.Fingerprint; fp != nil {
		fmt.Printf("last rows:   %s, %d rows of %s (%s): a source host must hold it to be used\n", fp.GTID, fp.Rows,
			strings.Join(fp.Tables, ", "), fp.Digest)
	} else {
		fmt.Printf("last rows:   none recorded: source hosts are used without proving they hold the checkpoint's history\n")
	}
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

func newCheckpointSetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "set --config FILE --gtid SET | --to now|earliest | --from-debezium",
		Short: "move the position to a GTID set, the source's current or oldest position, or where Debezium stopped",
		Long: `set writes a new checkpoint: a later position skips events, an earlier one
publishes them again. The captured tables' column layout is kept from the
previous checkpoint or read from the server (--schema). A --gtid set naming
transactions the source has not executed (a typo, another server's GTID) is
refused unless --force, and so is one whose binlogs the source has purged.

--from-debezium takes over from a stopped Debezium MySQL connector with the
Outbox Event Router: it reads the connector's committed offset (Kafka
Connect's offsets topic, or --offsets-file), walks the binlog from the start
of the offset's binlog file to the source's head routing each outbox row as
the relay does, and reads which of them have records in Kafka (header id):
the new position is right after them, a part of a transaction included. It
prints the position and the first event the relay will publish; a
translation Kafka does not prove (a row published after one that is not,
records where the relay would not place them, an offset past Kafka's
records, a connector still running) is refused unless --force.`,
		Example: `  outbox-relay checkpoint set --config relay.yaml --to now
  outbox-relay checkpoint set --config relay.yaml --gtid 0-1-100 --schema keep --yes
  outbox-relay checkpoint set --config relay.yaml --from-debezium --connector outbox-connector --dry-run
  outbox-relay checkpoint set --config relay.yaml --from-debezium --offsets-file /var/lib/debezium/offsets.dat --yes`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	gtid := cmd.Flags().String("gtid", "", "the new GTID set, in the server's notation")
	to := cmd.Flags().String("to", "", "now | earliest: the source's current or oldest position")
	layoutFrom := cmd.Flags().String("schema", "", "the column layout stored with the position (for servers without binlog_row_metadata=FULL): "+
		"keep (the previous checkpoint's) | server (the tables' current definitions); default: server with --to now, "+
		"else keep when the previous checkpoint has one")
	w := addWriteFlags(cmd.Flags())
	dbz := addDebeziumFlags(cmd.Flags())
	cmd.Flags().Lookup("force").Usage = "write even though a relay of this pipeline is running (a member of its lock group: it is fenced, its open transaction " +
		"aborted); with --gtid, a set the source has not executed; with --from-debezium, a translation Kafka does not prove"
	cmd.RunE = func(*cobra.Command, []string) error {
		if err := dbz.check(); err != nil {
			return err
		}
		if *dbz.from {
			if *gtid != "" || *to != "" || *layoutFrom != "" {
				return usageErr("--from-debezium takes no --gtid, --to or --schema: the position and its layout come from the binlog")
			}
			cfg, err := loadConfigFile(*path)
			if err != nil {
				return err
			}
			return checkpointFromDebezium(cfg, dbz, w)
		}
		if (*gtid == "") == (*to == "") {
			return usageErr("give exactly one of --gtid SET, --to now|earliest and --from-debezium")
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
	base, err := loadSetBase(ctx, cfg, w)
	if err != nil {
		return err
	}
	layout, signs, err := checkpointLayout(ctx, src, srv, base.cur, *layoutFrom, *to == "now", pos)
	if err != nil {
		return err
	}
	if err := w.guard(cfg, fmt.Sprintf("move the checkpoint of %s from %q to %q", cfg.Name, base.from, pos)); err != nil {
		return err
	}
	cp := base.next(cfg, srv, pos, layout, signs)
	from, store := base.from, base.store
	log := newLogger(cfg.Log, nil)
	if err := writeCheckpoint(cfg, store, cp, log); err != nil {
		return err
	}
	log.Info().Str("name", cfg.Name).Str("from", from).Str("to", pos).Msg("checkpoint set")
	fmt.Printf("checkpoint of %s: %s -> %s\n", cfg.Name, from, pos)
	return nil
}

// setBase is what checkpoint set replaces and keeps: the store, the
// committed checkpoint (nil: none), its position ("(none)" without one)
// and the partition counts keys are placed by.
type setBase struct {
	store  *checkpoint.Store
	cur    *checkpoint.Checkpoint
	from   string
	placed map[string]int32
}

func loadSetBase(ctx context.Context, cfg config.Config, w writeFlags) (setBase, error) {
	store, loaded, known, err := currentState(ctx, cfg, false)
	if err := w.overNewer(err); err != nil {
		return setBase{}, err
	}
	b := setBase{store: store, cur: loaded.Checkpoint, from: "(none)"}
	b.placed, _ = carried(loaded, known)
	if b.cur != nil {
		b.from = b.cur.GTIDSet
	}
	return b, nil
}

// next is the checkpoint set writes at pos of srv with layout and signs:
// the operator's mark, the configuration's tables, the events counted so
// far, and the partition counts of the one it replaces.
func (b setBase) next(cfg config.Config, srv *binlog.Server, pos string, layout, signs map[string][]string) *checkpoint.Checkpoint {
	cur, prev := b.cur, ""
	var events int64
	if cur != nil {
		prev, events = cur.GTIDSet, cur.Events
	}
	cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: pos, Flavor: srv.Flavor, ServerID: srv.ServerID, Host: srv.Addr, SourceUID: srv.UID,
		Time: time.Now().UTC(), Events: events, Schema: layout, Unsigned: signs, Operator: operatorMark("set", prev)}
	cp.Provisional = keptProvisional(cur, layout)
	cp.Tables = checkpoint.TablesOf(cfg.Source.Tables) // set records the configuration's tables
	// Keys stay placed by the recorded partition counts (also those a reset
	// marker carries): a set never moves an aggregate to another partition
	// (kafka.on_partitions_added).
	cp.Partitions = b.placed
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
	return cp
}
