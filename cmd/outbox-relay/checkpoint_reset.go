package main

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
)

// checkpoint reset: the operator's explicit way back to source.start. It
// writes a reset marker (checkpoint.ResetMarker), not a tombstone, so that
// the relay tells a reset from a checkpoint that vanished, and fences a
// running relay (with --force) like set and skip.

func newCheckpointResetCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "reset --config FILE",
		Short: "delete the checkpoint: the relay then starts at source.start",
		Long: `reset replaces the checkpoint with a reset marker (who, when, from which
position): the relay then starts at source.start and logs the reset. With
--force a running relay is fenced (both transactional ids: its open
transaction is aborted) and starts there too.`,
		Example: `  outbox-relay checkpoint reset --config relay.yaml
  outbox-relay checkpoint reset --config relay.yaml --yes </dev/null`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	w := addWriteFlags(cmd.Flags())
	cmd.RunE = func(*cobra.Command, []string) error {
		cfg, err := loadConfigFile(*path)
		if err != nil {
			return err
		}
		return checkpointReset(cfg, w)
	}
	return cmd
}

func checkpointReset(cfg config.Config, w writeFlags) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	store, loaded, known, err := currentState(ctx, cfg, false)
	newer := err != nil
	if err := w.overNewer(err); err != nil {
		return err
	}
	cur := loaded.Checkpoint
	from := "(a newer format)"
	switch {
	case cur != nil:
		from = cur.GTIDSet
	case !newer:
		// Still written: the marker is the operator's word that the relay
		// starts at source.start, also where it stopped because the
		// checkpoint it had is gone (checkpoint.ErrLost).
		from = "(none)"
	}
	placed, resetFrom := carried(loaded, known)
	if cur == nil && resetFrom != "" {
		from = resetFrom // reset again: the position the first reset replaced
	}
	if err := w.guard(cfg, fmt.Sprintf("delete the checkpoint of %s (at %s); the relay then starts at source.start (%s)", cfg.Name, strconv.Quote(from), cfg.Source.Start)); err != nil {
		return err
	}
	log := newLogger(cfg.Log, nil)
	prev := resetFrom
	if cur != nil {
		prev = cur.GTIDSet
	}
	// A reset marker, not a tombstone: the relay tells the operator's reset
	// (start at source.start) from a checkpoint that vanished (stop).
	// It carries the partition counts keys are placed by, as set does.
	marker := checkpoint.ResetMarker(cfg.Name, *operatorMark(checkpoint.CommandReset, prev), placed)
	if err := writeCheckpoint(cfg, store, marker, log); err != nil {
		return err
	}
	log.Info().Str("name", cfg.Name).Str("from", from).Msg("checkpoint reset")
	fmt.Printf("checkpoint of %s: %s -> (none)\n", cfg.Name, from)
	fmt.Printf("the relay starts at source.start (%s), and logs the reset; a running relay was fenced (its open transaction aborted) and starts there too\n", cfg.Source.Start)
	return nil
}

// carried is what a command replacing the checkpoint keeps of the
// pipeline's state, from what currentState loaded: the partition counts it
// places keys by (kafka.on_partitions_added), the checkpoint's or, without
// one, those a reset marker carries (a reset moves the position, not the
// keys; a reset or set after it keeps them too); and, after a reset, the
// position that reset replaced (resetFrom), which a second reset keeps
// naming. When the newest record was not read (a newer or non-transactional
// one replaced with --force, an open transaction holding the topic back)
// it warns that no partition counts are kept.
func carried(loaded checkpoint.Loaded, known bool) (placed map[string]int32, resetFrom string) {
	if cp := loaded.Checkpoint; cp != nil {
		return cp.Partitions, ""
	}
	if !known {
		fmt.Fprintln(os.Stderr, "warning: the newest record was not read: no recorded partition counts kept; the relay places keys by each output topic's count when it first writes to it")
		return nil, ""
	}
	if loaded.ResetBy != nil {
		resetFrom = loaded.ResetBy.From
	}
	return loaded.Partitions, resetFrom
}
