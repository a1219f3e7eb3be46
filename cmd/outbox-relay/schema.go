package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/source"
)

func newSchemaCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema --config FILE [--flavor mysql|mariadb] [--consumed-event]",
		Short: "print the CREATE TABLE of each captured outbox table for the router's columns",
		Long: `schema prints, for every table in source.tables, the CREATE TABLE that matches
the router settings (router.preset outbox or debezium, the *_column names,
timestamp, schema version, tracing and additional columns), for one server
flavor: MySQL 8.0+ or MariaDB 10.6+, so that the output can be piped into a
client. The flavor is --flavor, else source.flavor; with source.flavor auto
(the default) schema asks the configured source which it runs (the first of
source.hosts that answers; the password is needed then), and when none
answers it stops naming --flavor. With a flavor given, nothing is connected
to and no secret is needed (an unset password variable is fine).
--consumed-event adds the idempotent consumer's table (package inbox).`,
		Example: `  outbox-relay schema --config relay.yaml --flavor mariadb
  outbox-relay schema --config relay.yaml --flavor mysql --consumed-event | mysql app
  RELAY_MYSQL_PASSWORD=... outbox-relay schema --config relay.yaml | mariadb app`,
		Args: noArgs,
	}
	path := configFlag(cmd)
	flavor := cmd.Flags().String("flavor", "", "mysql | mariadb (default: source.flavor; auto asks the source)")
	consumed := cmd.Flags().Bool("consumed-event", false, "also print the consumed_event table of the idempotent consumer")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if *path == "" {
			return usageErr("--config FILE is required")
		}
		// nothing is connected to unless the flavor must be asked: the
		// password's variable need not be set
		cfg, err := configErr(config.LoadOffline(*path))
		if err != nil {
			return err
		}
		f := *flavor
		if f == "" {
			f = string(cfg.Source.Flavor)
		}
		switch f {
		case string(outbox.MySQL), string(outbox.MariaDB):
		case string(config.FlavorAuto):
			if f, err = askFlavor(cmd.Context(), *path, cmd.ErrOrStderr()); err != nil {
				return err
			}
		default:
			return usageErr("--flavor %q: want mysql or mariadb", f)
		}
		return printSchema(cmd.OutOrStdout(), cfg, outbox.Flavor(f), *consumed)
	}
	return cmd
}

// errFlavorUnknown: schema could not ask the source which flavor it runs.
var errFlavorUnknown = errors.New("source.flavor is auto and the source could not be asked which it runs")

// askFlavor asks the source of the configuration at path which flavor it
// runs (the first of source.hosts that answers) and says so on w.
func askFlavor(ctx context.Context, path string, w io.Writer) (string, error) {
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("%w (%w): pass --flavor mysql or --flavor mariadb, or set source.flavor", errFlavorUnknown, err)
	}
	cfg, err := configErr(config.Load(path))
	if err != nil {
		return fail(err)
	}
	src, err := clients.Source(cfg)
	if err != nil {
		return fail(err)
	}
	var errs []error
	for _, h := range src.Hosts {
		conn, err := binlog.Connect(ctx, src, h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vars, err := source.Variables(conn)
		conn.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", h, err))
			continue
		}
		f := source.DetectFlavor(vars)
		fmt.Fprintf(w, "schema: source.flavor is auto: %s runs %s (%s): printing the %s table (--flavor chooses)\n", h, f, vars["version"], f)
		return f, nil
	}
	return fail(errors.Join(errs...))
}

// printSchema writes the DDL of cfg's outbox tables for flavor f.
func printSchema(w io.Writer, cfg config.Config, f outbox.Flavor, consumed bool) error {
	if f != outbox.MySQL && f != outbox.MariaDB {
		return usageErr("--flavor %q: want mysql or mariadb", f)
	}
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
