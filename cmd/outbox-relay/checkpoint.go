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

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
	"github.com/rs/zerolog"
)

func checkpointCmd(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: checkpoint show|history|set|reset --config FILE", errUsage)
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
// (nil when there is none).
func currentCheckpoint(ctx context.Context, cfg config.Config) (*checkpoint.Store, *checkpoint.Checkpoint, error) {
	store, err := checkpointStore(cfg)
	if err != nil {
		return nil, nil, err
	}
	cp, err := store.Load(ctx, cfg.Name)
	return store, cp, err
}

func checkpointShow(args []string) error {
	fs := flag.NewFlagSet("checkpoint show", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print a JSON object")
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Kafka.RequestTimeout)
	defer cancel()
	_, cp, err := currentCheckpoint(ctx, cfg)
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
	store, cur, err := currentCheckpoint(ctx, cfg)
	if err != nil {
		return err
	}
	from := "(none)"
	var events int64
	if cur != nil {
		from, events = cur.GTIDSet, cur.Events
	}
	if err := w.guard(cfg, cur, fmt.Sprintf("move the checkpoint of %s from %q to %q", cfg.Name, from, pos)); err != nil {
		return err
	}
	cp := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: pos, Flavor: srv.Flavor, ServerID: srv.ServerID, Host: srv.Addr,
		Time: time.Now().UTC(), Events: events}
	log := newLogger(cfg.Log, nil)
	if err := writeCheckpoint(cfg, store, cp, log); err != nil {
		return err
	}
	log.Info().Str("name", cfg.Name).Str("from", from).Str("to", pos).Msg("checkpoint set")
	fmt.Printf("checkpoint of %s: %s -> %s\n", cfg.Name, from, pos)
	return nil
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
	store, cur, err := currentCheckpoint(ctx, cfg)
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
