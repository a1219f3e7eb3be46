//go:build integration

package mysqlitest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// A MySQL session's binlog_row_image=MINIMAL and
// binlog_row_value_options=PARTIAL_JSON, with binlog_row_metadata FULL and
// MINIMAL: UPDATEs of the outbox logged with the key before and the
// changed payload after, and as PARTIAL_UPDATE_ROWS_EVENT, are the router's
// invalid operations, counted, never a stop (the partial update stopped
// the relay as a rows event it could not frame); an INSERT whose image
// lacks its defaulted columns stops the relay at its transaction (exit
// 78, naming it), after publishing every row before it once.
func TestMySQLSessionRowImages(t *testing.T) {
	for _, md := range []string{"FULL", "MINIMAL"} {
		t.Run(md, func(t *testing.T) {
			p := startPrimary(t, mysqlsource.Options{Version: v84, RowMetadata: md})
			a := newApp(t, p)
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, "mysql", p.Addr())
			r := itest.RunRelay(t, cfg)
			r.WaitReady(t)
			a.commit(t, "", a.newRows(3, 2, "before"))

			row := a.newRows(1, 1, "updated")[0]
			a.commit(t, "", [][]any{row})
			changed := append([]any{}, row...)
			changed[5] = `{"deviceId":"dev-0","seq":99}`
			key := []bool{true, false, false, false, false, false, false}
			payload := []bool{false, false, false, false, false, true, false}
			if _, err := p.Commit(mysqlsource.Tx{Updates: []mysqlsource.Update{
				{Table: a.tbl, Rows: [][2][]any{{row, changed}}, Before: key, After: payload},
				{Table: a.tbl, Rows: [][2][]any{{changed, row}}, PartialJSON: true},
			}}); err != nil {
				t.Fatal(err)
			}
			a.commit(t, "", a.newRows(2, 2, "after-updates"))
			waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
			if n := testutil.ToFloat64(r.Metrics.InvalidOps.WithLabelValues("app.outbox", "update")); n != 2 {
				t.Fatalf("outbox_relay_invalid_ops_total{op=\"update\"} = %v, want 2", n)
			}

			before := p.Executed().Flat()
			defaulted := a.newRows(1, 1, "defaulted")
			minimal := []bool{true, true, true, true, false, false, true} // event_type and payload left to their defaults
			g, err := p.Commit(mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: defaulted, Logged: minimal}}})
			if err != nil {
				t.Fatal(err)
			}
			err = r.StoppedWith(t)
			if !errors.Is(err, binlog.ErrPartialRowImage) || relay.ExitCode(err) != relay.ExitConfig {
				t.Fatalf("relay stopped with %v (exit %d); want ErrPartialRowImage, exit %d", err, relay.ExitCode(err), relay.ExitConfig)
			}
			for _, want := range []string{"transaction " + g.String() + " ", "app.outbox", "lacks column(s) event_type, payload:",
				"checkpoint skip --gtid " + g.String()} {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not say %q", err, want)
				}
			}
			cp, lerr := itest.Store(t, cfg).Load(context.Background(), cfg.Name)
			if lerr != nil || cp == nil || cp.GTIDSet != before {
				t.Fatalf("checkpoint %+v (%v), want %s: just before the stopped transaction", cp, lerr, before)
			}
			requireExact(t, k, cfg, a)
		})
	}
}
