//go:build integration

package mysqlitest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

// Former primaries' uuids with gaps, and (8.4) tagged GTIDs: every
// transaction is published once and the checkpoint is exactly the
// server's gtid_executed, gaps and tags included.
func TestMySQLSeveralUUIDsGapsAndTags(t *testing.T) {
	const old1, old2 = "11111111-1111-1111-1111-111111111111", "99999999-9999-9999-9999-999999999999"
	for _, version := range []string{v80, v84} {
		t.Run(version, func(t *testing.T) {
			p := startPrimary(t, mysqlsource.Options{Version: version, UUID: "5a5a5a5a-0000-4000-8000-000000000001"})
			a := newApp(t, p)
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, "mysql", p.Addr())
			cfg.Source.Start = "earliest"
			gtids := []string{old1 + ":1", old1 + ":2", old1 + ":3", old1 + ":10", old1 + ":11", old2 + ":7", "", ""}
			if version == v84 {
				gtids = append(gtids, p.UUID()+":outbox_batch:1", p.UUID()+":outbox_batch:2", old2+":a_tag:5")
			}
			for i, g := range gtids[:4] {
				a.commit(t, g, a.newRows(1+i%2, 3, ""))
			}
			r := itest.RunRelay(t, cfg)
			r.WaitReady(t)
			for i, g := range gtids[4:] {
				a.commit(t, g, a.newRows(1+i%2, 3, "live"))
			}
			exec := p.Executed()
			if !strings.Contains(exec.Flat(), ":1-3:10-11") {
				t.Fatalf("gtid_executed %s has no gap", exec.Flat())
			}
			got := waitCheckpoint(t, cfg, exec.Flat(), time.Minute)
			requireExact(t, k, cfg, a)
			if norm(got) != norm(exec.Flat()) {
				t.Fatalf("checkpoint %q, gtid_executed %q", got, exec.Flat())
			}
			if version == v84 && !strings.Contains(got, "outbox_batch:1-2") {
				t.Fatalf("checkpoint %q lacks the tagged GTIDs", got)
			}
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// norm compares GTID sets regardless of the order of their groups.
func norm(s string) string {
	parts := strings.Split(strings.ReplaceAll(strings.ToLower(s), "\n", ""), ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	sortStrings(parts)
	return strings.Join(parts, ",")
}

// binlog_row_metadata MINIMAL: table maps carry no column names, so the
// relay follows the CREATE TABLE and ALTER TABLE it reads from the binlog
// (start earliest) or the information_schema columns (start now), and an
// ALTER TABLE that adds a column in the middle of the outbox.
func TestMySQLMinimalMetadata(t *testing.T) {
	for _, start := range []string{"earliest", "now"} {
		t.Run(start, func(t *testing.T) {
			p := startPrimary(t, mysqlsource.Options{Version: v84, RowMetadata: "MINIMAL"})
			a := newApp(t, p)
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, "mysql", p.Addr())
			cfg.Source.Start = start
			if start == "earliest" {
				a.commit(t, "", a.newRows(3, 2, "before"))
			}
			r := itest.RunRelay(t, cfg)
			r.WaitReady(t)
			for i := 0; i < 10; i++ {
				a.commit(t, "", a.newRows(2, 3, "live"))
			}
			// A column added in the middle: only the tracked DDL tells
			// the relay where aggregate_id and payload now are.
			cols := append(append(append([]mysqlsource.Column{}, mysqlsource.OutboxColumns[:4]...),
				mysqlsource.Column{Name: "trace_id", Type: mysqlsource.Varchar64}), mysqlsource.OutboxColumns[4:]...)
			if err := p.AlterTable(a.tbl, cols, "ALTER TABLE `app`.`outbox` ADD COLUMN `trace_id` varchar(64) NOT NULL AFTER `aggregate_id`"); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 5; i++ {
				rows := a.newRows(2, 3, "altered")
				for j, r := range rows {
					rows[j] = append(append(append([]any{}, r[:4]...), "trace-"+r[1].(string)), r[4:]...)
				}
				if _, err := p.Commit(mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: rows}}}); err != nil {
					t.Fatal(err)
				}
				for j, r := range rows { // the app's view: without the new column
					rows[j] = append(append([]any{}, r[:4]...), r[5:]...)
				}
				a.committed(rows)
			}
			waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
			defer func() {
				if t.Failed() {
					t.Logf("relay logs:\n%s", r.Logs())
				}
			}()
			requireExact(t, k, cfg, a)
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// binlog_transaction_compression ON: transactions arrive as a GTID event
// and a zstd Transaction_payload event; one transaction stays
// uncompressed in between, as MySQL leaves some.
func TestMySQLCompressedTransactions(t *testing.T) {
	p := startPrimary(t, mysqlsource.Options{Version: v80, Compression: true})
	a := newApp(t, p)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", p.Addr())
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	for i := 0; i < 20; i++ {
		rows := a.newRows(1+i*10, 7, "z")
		if i == 10 {
			if _, err := p.Commit(mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: rows}}, Uncompressed: true}); err != nil {
				t.Fatal(err)
			}
			a.committed(rows)
			continue
		}
		a.commit(t, "", rows)
	}
	waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, a)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// MySQL XA: prepared then committed (published at XA COMMIT), prepared
// then rolled back (never published), one phase, and a prepared
// transaction across a relay restart.
func TestMySQLXA(t *testing.T) {
	p := startPrimary(t, mysqlsource.Options{Version: v84})
	a := newApp(t, p)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", p.Addr())
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	xa := func(x mysqlsource.XID, phase mysqlsource.XAPhase, rows [][]any) {
		t.Helper()
		if _, err := p.Commit(mysqlsource.Tx{XA: &x, Phase: phase, Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: rows}}}); err != nil {
			t.Fatal(err)
		}
	}
	stmt := func(q string) {
		t.Helper()
		if _, err := p.Commit(mysqlsource.Tx{Statement: q, DB: "app"}); err != nil {
			t.Fatal(err)
		}
	}
	committed := mysqlsource.XID{GTRID: "order-1", BQual: "b1", FormatID: 1}
	rows := a.newRows(3, 2, "xa1")
	xa(committed, mysqlsource.XAPrepare, rows)
	a.commit(t, "", a.rowsOn(1, 2, "other", "plain")) // commits while order-1 is prepared
	stmt("XA COMMIT X'6f726465722d31',X'6231',1")
	a.committed(rows)

	rolled := mysqlsource.XID{GTRID: "order-2", FormatID: 1}
	xa(rolled, mysqlsource.XAPrepare, a.newRows(2, 2, "xa2-undone"))
	stmt("XA ROLLBACK X'6f726465722d32',X'',1")

	one := a.newRows(2, 2, "xa3")
	xa(mysqlsource.XID{GTRID: "order-3", FormatID: 1}, mysqlsource.XAOnePhase, one)
	a.committed(one)

	pending := a.newRows(2, 2, "xa4")
	xa(mysqlsource.XID{GTRID: "order-4", FormatID: 1}, mysqlsource.XAPrepare, pending)
	waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, a) // order-4 is prepared, not committed: not published
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	r = itest.RunRelay(t, cfg)
	r.WaitReady(t)
	stmt("XA COMMIT X'6f726465722d34',X'',1")
	a.committed(pending)
	waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, a)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// A server with a long history of primaries: gtid_executed of 45 uuids is
// over 1,024 characters (SHOW VARIABLES would cut it); the relay reads it
// whole, publishes every transaction and its checkpoint equals it; `check`
// passes with that checkpoint.
func TestMySQLLongGTIDExecuted(t *testing.T) {
	p := startPrimary(t, mysqlsource.Options{Version: v80})
	a := newApp(t, p)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", p.Addr())
	cfg.Source.Start = "earliest"
	for i := 0; i < 45; i++ {
		a.commit(t, fmt.Sprintf("%08x-0000-4000-8000-%012x:%d", i+1, i+1, 1+i%7), a.newRows(1, 4, ""))
	}
	if n := len(p.Executed().Flat()); n <= 1024 {
		t.Fatalf("gtid_executed is %d characters", n)
	}
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	a.commit(t, "", a.newRows(2, 4, "live"))
	got := waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
	requireExact(t, k, cfg, a)
	if norm(got) != norm(p.Executed().Flat()) {
		t.Fatalf("checkpoint %q\ngtid_executed %q", got, p.Executed().Flat())
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := env.CLI(t, "check", "--config", itest.WriteConfig(t, cfg))
	if code != 0 {
		t.Fatalf("check with a long checkpoint: exit %d\n%s\n%s", code, out, errOut)
	}
}
