//go:build integration

package mysqlitest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
	"github.com/outbox-relay/outbox-relay/schema"
)

// outboxIfNotExists is the outbox's CREATE TABLE as migration tools write it.
var outboxIfNotExists = strings.Replace(fmt.Sprintf(mysqlsource.OutboxDDL, "app", "outbox"), "CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1)

// appOn is an app writing tbl (created by the test).
func appOn(p *mysqlsource.Primary, tbl *mysqlsource.Table) *app {
	return &app{p: p, tbl: tbl, seq: map[string]int64{}, rows: map[string]string{}, value: map[string]string{}}
}

// MySQL with binlog_row_metadata MINIMAL (its default) and an outbox created
// with CREATE TABLE IF NOT EXISTS, as migration tools write it: a brand-new
// table created while the relay runs at `start: now`, the table created
// before the rows from `start: earliest`, and the migration run again on a
// table that exists (MySQL logs the statement though it does nothing) after a
// start position that does not hold the table's CREATE: every row is
// published exactly once, in order per aggregate. When the table that exists
// has another layout than the statement says, the relay stops at its first
// rows, publishing none of them, with ErrSchemaMismatch wrapping
// schema.ErrProvisional.
func TestMySQLCreateTableIfNotExists(t *testing.T) {
	cases := []struct {
		name  string
		start string // now | earliest | "set": the head after a plain CREATE TABLE
		// reDDL: the IF NOT EXISTS text logged again on the existing table
		// ("" none).
		reDDL string
		stops bool
	}{
		{name: "brand-new table at start now", start: "now"},
		{name: "start earliest", start: "earliest"},
		{name: "migration run again on the table", start: "set", reDDL: outboxIfNotExists},
		{name: "migration of another layout on the table", start: "set", stops: true,
			reDDL: strings.Replace(strings.Replace(outboxIfNotExists, "  `created_at` datetime(3)", "  `created_at_x` int", 1),
				"  `id` bigint NOT NULL AUTO_INCREMENT,\n", "  `id` bigint NOT NULL AUTO_INCREMENT,\n  `created_at` datetime(3) NOT NULL,\n", 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := startPrimary(t, mysqlsource.Options{Version: v84, RowMetadata: "MINIMAL"})
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, "mysql", p.Addr())
			var a *app
			create := func(ddl string) {
				tbl, err := p.CreateTable("app", "outbox", mysqlsource.OutboxColumns, ddl)
				if err != nil {
					t.Fatal(err)
				}
				a = appOn(p, tbl)
			}
			switch c.start {
			case "earliest":
				create(outboxIfNotExists)
				a.commit(t, "", a.newRows(3, 2, "before"))
			case "set":
				create("")
				cfg.Source.Start = p.Executed().Flat()
				if err := p.AlterTable(a.tbl, mysqlsource.OutboxColumns, c.reDDL); err != nil {
					t.Fatal(err)
				}
			}
			if c.start != "set" {
				cfg.Source.Start = c.start
			}
			r := itest.RunRelay(t, cfg)
			r.WaitReady(t)
			defer func() {
				if t.Failed() {
					t.Logf("relay logs:\n%s", r.Logs())
				}
			}()
			if a == nil {
				create(outboxIfNotExists)
			}
			for i := 0; i < 5; i++ {
				a.commit(t, "", a.newRows(2, 3, "live"))
			}
			if c.stops {
				err := r.StoppedWith(t)
				if !errors.Is(err, binlog.ErrSchemaMismatch) || !errors.Is(err, schema.ErrProvisional) || !strings.Contains(err.Error(), "app.outbox") {
					t.Fatalf("relay stopped with %v, want ErrSchemaMismatch wrapping schema.ErrProvisional naming app.outbox", err)
				}
				if n := len(itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix)); n != 0 {
					t.Fatalf("%d records published", n)
				}
				return
			}
			want, err := binlog.ParseSet("mysql", p.Executed().Flat())
			if err != nil {
				t.Fatal(err)
			}
			itest.Eventually(t, time.Minute, func() error { // fails at once if the relay stops
				select {
				case <-r.Done():
					t.Fatalf("relay stopped: %v", r.Err())
				default:
				}
				cp, err := itest.Store(t, cfg).Load(context.Background(), cfg.Name)
				if err != nil || cp == nil {
					return fmt.Errorf("no checkpoint yet (%v)", err)
				}
				if have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet); err != nil || !have.Contain(want) || cp.Partial != nil {
					return fmt.Errorf("checkpoint at %s, want %s", cp.GTIDSet, want)
				}
				return nil
			})
			requireExact(t, k, cfg, a)
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
