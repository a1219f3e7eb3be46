package main

// checkpoint skip: move the checkpoint past one source transaction.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

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
