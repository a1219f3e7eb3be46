package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/source"
)

// newCheckpointTablesCmd is the operator's deliberate change of what a
// pipeline captures: the relay refuses a checkpoint written with other
// source.tables (checkpoint.ErrTablesChanged) until this records the
// configuration's tables in it, keeping its position, layout and XA state.
func newCheckpointTablesCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tables --config FILE",
		Short: "record the configuration's source.tables in the checkpoint: a deliberate change of the captured tables",
		Long: `tables rewrites the committed checkpoint at the same position with the
configuration's source.tables, the way to add or remove a captured table on
purpose (the relay refuses a checkpoint written capturing other tables). Stop
every instance first. An added table's rows are published from the checkpoint
on, never those before it; a removed table's rows are no longer published. The
layout of an added table is read from the server (its current definition). The
write fences a relay of the pipeline and asks for confirmation (--yes when
stdin is not a terminal).`,
		Example: `  outbox-relay checkpoint tables --config relay.yaml
  outbox-relay checkpoint tables --config relay.yaml --yes </dev/null`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	w := addWriteFlags(cmd.Flags())
	cmd.RunE = func(*cobra.Command, []string) error {
		cfg, err := loadConfigFile(*path)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), checkpoint.DefaultStableWait+cfg.Kafka.RequestTimeout)
		defer cancel()
		store, cur, err := currentCheckpoint(ctx, cfg, true)
		if err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("no checkpoint for %s in %s: nothing to change (a first start records source.tables)", cfg.Name, cfg.Kafka.CheckpointTopic)
		}
		want := checkpoint.TablesOf(cfg.Source.Tables)
		if cur.Tables != nil && slices.Equal(checkpoint.TablesOf(cur.Tables), want) {
			fmt.Printf("checkpoint of %s already records source.tables [%s]: nothing to change\n", cfg.Name, strings.Join(want, ", "))
			return nil
		}
		next := *cur
		next.Tables = want
		next.Time = time.Now().UTC()
		next.Operator = operatorMark("tables", cur.GTIDSet)
		if cur.Schema != nil {
			// Added tables need a layout where the binlog has no column
			// names: their current definitions (checkpointLayout says so).
			src, err := clients.Source(cfg)
			if err != nil {
				return err
			}
			srv, err := source.Inspect(ctx, src)
			if err != nil {
				return err
			}
			if next.Schema, next.Unsigned, err = checkpointLayout(ctx, src, srv, cur, "keep", false, cur.GTIDSet); err != nil {
				return err
			}
		}
		was := "(not recorded)"
		if cur.Tables != nil {
			was = "[" + strings.Join(cur.Tables, ", ") + "]"
		}
		action := fmt.Sprintf("record source.tables [%s] in the checkpoint of %s at %q (was %s)", strings.Join(want, ", "), cfg.Name, cur.GTIDSet, was)
		if err := w.guard(cfg, action); err != nil {
			return err
		}
		log := newLogger(cfg.Log, nil)
		if err := writeCheckpoint(cfg, store, &next, log); err != nil {
			return err
		}
		log.Warn().Str("name", cfg.Name).Str("gtid_set", cur.GTIDSet).Strs("tables", want).Str("was", was).Msg("checkpoint tables: captured tables changed")
		fmt.Printf("checkpoint of %s: tables %s -> [%s] at %s\n", cfg.Name, was, strings.Join(want, ", "), cur.GTIDSet)
		return nil
	}
	return cmd
}
