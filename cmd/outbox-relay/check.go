package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/preflight"
)

// errCheckFailed: at least one preflight item failed (exit code 1).
var errCheckFailed = errors.New("preflight check failed")

func checkCmd(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the items as a JSON array")
	cfg, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report := preflight.Run(ctx, cfg)
	if *asJSON {
		if err := json.NewEncoder(os.Stdout).Encode(report); err != nil {
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
	if !report.OK() {
		return errCheckFailed
	}
	return nil
}
