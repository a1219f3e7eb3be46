// Command outbox-relay publishes committed transactional-outbox rows from a
// MySQL or MariaDB binlog to Kafka. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	name, usage string
	run         func(args []string) error
}

func commands() []command {
	return []command{
		{"run", "run --config FILE [--print-config]: relay until SIGINT/SIGTERM", runCmd},
		{"check", "check --config FILE: preflight of source and Kafka", checkCmd},
		{"checkpoint", "checkpoint show|history|set|skip|reset --config FILE: inspect or move the position", checkpointCmd},
		{"dev", "dev kafka|mariadb ...: embedded broker and scratch database for local work", devCmd},
		{"version", "version: print the version", func([]string) error { fmt.Println("outbox-relay", version); return nil }},
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: outbox-relay COMMAND [flags]")
	for _, c := range commands() {
		fmt.Fprintln(os.Stderr, "  "+c.usage)
	}
}

// errUsage marks a command-line mistake: exit code 2.
var errUsage = errors.New("usage")

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	for _, c := range commands() {
		if c.name == os.Args[1] {
			err := c.run(os.Args[2:])
			switch {
			case err == nil:
				return
			case errors.Is(err, flag.ErrHelp): // --help: the flag set printed its usage
				return
			case errors.Is(err, errUsage):
				fmt.Fprintln(os.Stderr, "outbox-relay:", err)
				os.Exit(2)
			case c.name == "run":
				// Supervisors act on these (README "Exit codes").
				fmt.Fprintln(os.Stderr, "outbox-relay:", err)
				os.Exit(relay.ExitCode(err))
			default:
				fmt.Fprintln(os.Stderr, "outbox-relay:", err)
				os.Exit(1)
			}
		}
	}
	usage()
	os.Exit(2)
}
