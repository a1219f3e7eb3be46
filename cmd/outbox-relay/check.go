package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/preflight"
)

// errCheckFailed: at least one preflight item failed (exit code 1).
var errCheckFailed = errors.New("preflight check failed")

func newCheckCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check --config FILE",
		Short: "preflight of every source host and of Kafka",
		Long: `check connects to every source host and to Kafka and reports, one line per
item, PASS, WARN or FAIL with the fix: server settings, grants, the captured
tables and columns, the checkpoint's binlogs, Kafka transactions, topics and
ACLs. It exits 0 when nothing general or Kafka-side fails and at least one
source host is usable, 1 otherwise, 65 when the pipeline's checkpoint is
lost (run refuses to start then: the item names the way out), and 78 when
the configuration file is unreadable or invalid (systemd's
RestartPreventExitStatus stops there).`,
		Example: `  outbox-relay check --config relay.yaml
  outbox-relay check --config relay.yaml --json | jq '.[] | select(.status != "PASS")'`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	asJSON := cmd.Flags().Bool("json", false, "print the items as a JSON array of objects (target, name, status, detail, fix) on one line")
	cmd.RunE = func(*cobra.Command, []string) error { return check(*path, *asJSON) }
	return cmd
}

func check(path string, asJSON bool) error {
	cfg, err := loadConfigFile(path)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// What it checks goes to stderr as it starts (stdout is the report).
	report := preflight.RunTo(ctx, cfg, os.Stderr)
	if asJSON {
		if err := writeJSON(os.Stdout, report); err != nil {
			return err
		}
	} else {
		for _, it := range report {
			fmt.Printf("%-4s  %-28s %-26s %s\n", it.Status, it.Target, it.Name, it.Detail)
			if it.Fix != "" && it.Status != preflight.Pass {
				fmt.Printf("      fix: %s\n", it.Fix)
			}
		}
	}
	if err := report.Err(); err != nil {
		return err // a lost checkpoint: exit 65, as `run` refuses
	}
	if !report.OK() {
		return errCheckFailed
	}
	return nil
}
