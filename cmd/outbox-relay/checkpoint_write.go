package main

// What the commands that write a checkpoint share (set, skip, reset, tables):
// the flags that guard a write against a running relay and a newer checkpoint,
// and the write itself.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
)

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
