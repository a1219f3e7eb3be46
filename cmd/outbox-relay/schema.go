package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/outbox"
)

func newSchemaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema --config FILE [--flavor mysql|mariadb] [--consumed-event]",
		Short: "print the CREATE TABLE of each captured outbox table for the router's columns",
		Long: `schema prints, for every table in source.tables, the CREATE TABLE that matches
the router settings (router.preset outbox or debezium, the *_column names,
timestamp, schema version, tracing and additional columns), for MySQL 8.0+ and/or
MariaDB 10.6+ (source.flavor; auto prints both). Nothing is connected to.
--consumed-event adds the idempotent consumer's table (package inbox).`,
		Example: `  outbox-relay schema --config relay.yaml
  outbox-relay schema --config relay.yaml --flavor mysql --consumed-event | mysql app`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	flavor := cmd.Flags().String("flavor", "", "mysql | mariadb (default: source.flavor; auto prints both)")
	consumed := cmd.Flags().Bool("consumed-event", false, "also print the consumed_event table of the idempotent consumer")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *path == "" {
			return usageErr("--config FILE is required")
		}
		// nothing is connected to: the password's variable need not be set
		cfg, err := configErr(config.LoadOffline(*path))
		if err != nil {
			return err
		}
		return printSchema(cmd.OutOrStdout(), cfg, *flavor, *consumed)
	}
	return cmd
}

// printSchema writes the DDL of cfg's outbox tables.
func printSchema(w io.Writer, cfg config.Config, flavor string, consumed bool) error {
	if flavor == "" {
		flavor = string(cfg.Source.Flavor)
	}
	var flavors []outbox.Flavor
	switch flavor {
	case "auto":
		flavors = []outbox.Flavor{outbox.MySQL, outbox.MariaDB}
	case string(outbox.MySQL), string(outbox.MariaDB):
		flavors = []outbox.Flavor{outbox.Flavor(flavor)}
	default:
		return usageErr("--flavor %q: want mysql or mariadb", flavor)
	}
	for _, f := range flavors {
		for _, t := range cfg.Source.Tables {
			ddl, err := outbox.CreateTable(f, tableSpec(cfg, t))
			if err != nil {
				return fmt.Errorf("schema of %s: %w", t, err)
			}
			fmt.Fprintln(w, ddl)
		}
		if consumed {
			fmt.Fprintf(w, "-- %s: the idempotent consumer's table (package inbox)\n%s;\n\n", f, inbox.DDL(inbox.DefaultTable))
		}
	}
	return nil
}

// tableSpec describes table t under cfg's router settings.
func tableSpec(cfg config.Config, t string) outbox.TableSpec {
	rc := cfg.Router.For(t)
	spec := outbox.TableSpec{
		Table:         t,
		Columns:       writerColumns(rc),
		Debezium:      rc.Preset == "debezium",
		SchemaVersion: rc.SchemaVersionColumn,
	}
	for _, f := range rc.AdditionalFields {
		spec.Additional = append(spec.Additional, f.Column)
	}
	return spec
}

// writerColumns maps router settings to the writer's column names.
func writerColumns(rc config.RouterConfig) outbox.Columns {
	return outbox.Columns{
		EventID: rc.EventIDColumn, AggregateType: rc.AggregateTypeColumn, AggregateID: rc.AggregateIDColumn,
		EventType: rc.EventTypeColumn, Payload: rc.PayloadColumn, Timestamp: strings.TrimSpace(rc.TimestampColumn),
		TracingSpanContext: rc.TracingColumn,
	}
}
