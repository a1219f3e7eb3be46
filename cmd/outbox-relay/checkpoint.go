package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

func checkpointCmd(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: checkpoint show|history --config FILE", errUsage)
	}
	switch args[0] {
	case "show":
		return checkpointShow(args[1:])
	default:
		return fmt.Errorf("%w: unknown checkpoint command %q", errUsage, args[0])
	}
}

func checkpointStore(cfg config.Config) *checkpoint.Store {
	return checkpoint.NewStore(cfg.Kafka.CheckpointTopic, relay.KafkaOpts(cfg)...)
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
	cp, err := checkpointStore(cfg).Load(ctx, cfg.Name)
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
