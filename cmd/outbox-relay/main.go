// Command outbox-relay publishes committed transactional-outbox rows from a
// MySQL or MariaDB binlog to Kafka. See README.md.
//
// The command line is built on github.com/spf13/cobra (flags anywhere,
// --help with descriptions and examples on every command, generated shell
// completion). Exit codes: 0 success or help, 1 an error, 2 a command-line
// mistake (unknown command or flag, a bad flag value, an extra argument),
// 65 a lost checkpoint (checkpoint.ErrLost) and 78 a configuration error
// (the file invalid or unreadable) in every command, 75 `audit` with rows
// not yet published and nothing else found, and `run` adds relay.ExitCode's
// codes.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// command is a subcommand that parses its own arguments with the standard
// flag package (loadConfig does the usual --config handling). Register one
// in commands(); it appears in the help with usage as its description.
type command struct {
	name, usage string
	run         func(args []string) error
}

// commands lists the subcommands that parse their own flags.
func commands() []command {
	return []command{}
}

// cobraCommands lists the subcommands built as cobra commands.
func cobraCommands() []*cobra.Command {
	return []*cobra.Command{newRunCmd(), newCheckCmd(), newCheckpointCmd(), newDevCmd(), newVersionCmd(),
		newSchemaCmd(), newPruneCmd(), newReplayCmd(), newDeadLetterCmd(), newConfigCmd(), newAuditCmd()}
}

// errUsage marks a command-line mistake: exit code 2.
var errUsage = errors.New("usage")

// usageErr wraps a command-line mistake in errUsage.
func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs the command line args and returns the process exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	if args == nil {
		args = []string{} // cobra reads os.Args for nil
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	usageMistakes(root) // after SetOut: the completion command keeps the writer it is made with
	cmd, err := root.ExecuteC()
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return relay.ExitOK
	}
	if errors.Is(err, errUsage) {
		fmt.Fprintln(stderr, "outbox-relay:", strings.TrimPrefix(err.Error(), "usage: "))
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return relay.ExitUsage
	}
	if cmd.Name() == "run" && cmd.Parent() == root {
		// Supervisors act on these (README "Exit codes"); the last line
		// says the code, after the log's `relay stopped` when there is a log.
		code := relay.ExitCode(err)
		fmt.Fprintf(stderr, "outbox-relay: %v (exit %d)\n", err, code)
		return code
	}
	fmt.Fprintln(stderr, "outbox-relay:", err)
	if errors.Is(err, checkpoint.ErrLost) {
		// Every command that reads the checkpoint says so as `run` does.
		return relay.ExitData
	}
	if errors.Is(err, errAuditPending) {
		return exitAuditPending
	}
	if errors.Is(err, config.ErrInvalid) {
		// The same in every command: `check` run by hand or by a
		// supervisor means the same as `run` (README "Exit codes").
		return relay.ExitConfig
	}
	return relay.ExitError
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "outbox-relay",
		Short: "publish committed transactional-outbox rows from a MySQL/MariaDB binlog to Kafka",
		Long: `outbox-relay reads the row-based binlog of a MySQL or MariaDB server from a GTID
position, turns each committed INSERT into a captured outbox table into a Kafka
record, and stores its position in Kafka: exactly once by default.

Exit codes: 0 success (and help), 1 an error, 2 a command-line mistake,
65 a lost checkpoint, 78 a configuration error (every command); audit
exits 75 when rows are only pending; run adds 65, 66 and 75 (see
README "Exit codes").`,
		Example: `  outbox-relay check --config relay.yaml
  outbox-relay run --config relay.yaml
  outbox-relay checkpoint show --config relay.yaml --json`,
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE:          groupRun,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetFlagErrorFunc(flagError)
	for _, c := range cobraCommands() {
		root.AddCommand(c)
	}
	for _, c := range commands() {
		root.AddCommand(legacyCommand(c))
	}
	for _, c := range root.Commands() {
		setFlagErrors(c)
	}
	return root
}

// usageMistakes makes every command-line mistake exit 2 in cobra's own
// commands too: an unknown shell for completion, arguments a command does
// not take, an unknown help topic.
func usageMistakes(root *cobra.Command) {
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(_ *cobra.Command, args []string) error {
			cmd, rest, err := root.Find(args)
			if err != nil || cmd == nil || len(rest) > 0 {
				return usageErr("unknown help topic %q", strings.Join(args, " "))
			}
			return cmd.Help()
		},
	})
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" && !c.Runnable() {
			c.Args, c.RunE = cobra.ArbitraryArgs, groupRun
			setFlagErrors(c)
		}
	}
}

// legacyCommand adapts a command parsing its own flags: its arguments are
// passed on untouched.
func legacyCommand(c command) *cobra.Command {
	run := c.run
	return &cobra.Command{
		Use:                c.name,
		Short:              c.usage,
		DisableFlagParsing: true,
		RunE:               func(_ *cobra.Command, args []string) error { return run(args) },
	}
}

// groupRun is the action of a command that only groups subcommands: without
// arguments it prints its help, anything else is an unknown subcommand,
// with cobra's suggestions of what was meant (cobra makes them only for
// a command without Args and RunE, which the root and groups are not).
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	names := []string{}
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default, set where it suggests
	}
	if near := cmd.SuggestionsFor(args[0]); len(near) > 0 {
		return usageErr("unknown command %q for %q: did you mean %s? (want one of: %s)", args[0], cmd.CommandPath(),
			strings.Join(near, " or "), strings.Join(names, ", "))
	}
	return usageErr("unknown command %q for %q (want one of: %s)", args[0], cmd.CommandPath(), strings.Join(names, ", "))
}

// flagError marks flag parsing errors as usage errors. In a command that
// groups subcommands, an unknown subcommand comes before the flags that
// follow it (`chekc --config x` names "chekc", not --config).
func flagError(cmd *cobra.Command, err error) error {
	if cmd.HasSubCommands() && len(cmd.Flags().Args()) > 0 {
		return groupRun(cmd, cmd.Flags().Args())
	}
	return fmt.Errorf("%w: %w", errUsage, err)
}

func setFlagErrors(c *cobra.Command) {
	c.SetFlagErrorFunc(flagError)
	if args := c.Args; args != nil {
		c.Args = func(cmd *cobra.Command, a []string) error {
			if err := args(cmd, a); err != nil && !errors.Is(err, errUsage) {
				return fmt.Errorf("%w: %w", errUsage, err)
			} else if err != nil {
				return err
			}
			return nil
		}
	}
	for _, s := range c.Commands() {
		setFlagErrors(s)
	}
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErr("%s takes no arguments, got %q", cmd.CommandPath(), strings.Join(args, " "))
	}
	return nil
}
