package main

import (
	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "describe the configuration file",
		Long: `config describes the configuration file; docs/configuration.md lists every
key with its type, default, example and meaning.`,
		Example: `  outbox-relay config schema > outbox-relay.schema.json`,
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRun,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "schema",
		Short: "print the JSON Schema (draft 2020-12) of the configuration file",
		Long: `schema prints the JSON Schema (draft 2020-12) of the configuration file, made
from the same definitions as docs/configuration.md: every key with its type,
default, fixed choices and description; unknown keys are refused, as the
relay refuses them. A value may instead refer to environment variables
(${VAR}, ${VAR:-default}). For editors (yaml-language-server) and CI; check
validates further (host:port, GTID sets, the relations between keys).`,
		Example: `  outbox-relay config schema > outbox-relay.schema.json
  # in relay.yaml, for editors with yaml-language-server:
  # yaml-language-server: $schema=outbox-relay.schema.json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := cmd.OutOrStdout().Write(config.JSONSchema())
			return err
		},
	})
	return cmd
}
