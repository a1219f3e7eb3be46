//go:build integration

package mysqlitest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

// writeShapes commits every MySQL transaction shape the relay frames, in
// an order that interleaves them: BEGIN ... XID with a business table and
// the outbox (several rows events), a large transaction split over Kafka
// transactions, standalone DDL, a compressed and an uncompressed
// transaction, XA prepared then committed, XA prepared then rolled back,
// XA one phase, a former primary's uuid, a tagged GTID.
func writeShapes(t *testing.T, p *mysqlsource.Primary, a *app, biz *mysqlsource.Table) {
	t.Helper()
	commit := func(tx mysqlsource.Tx, rows ...[][]any) {
		t.Helper()
		if _, err := p.Commit(tx); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			a.committed(r)
		}
	}
	alarm := func(n int) [][]any {
		var out [][]any
		for i := 0; i < n; i++ {
			out = append(out, []any{int64(i + 1), "dev-1", "CRITICAL", int64(90 + i), int64(i)})
		}
		return out
	}
	ins := func(parts ...mysqlsource.Insert) []mysqlsource.Insert { return parts }
	// BEGIN, business row, outbox rows in two statements, XID.
	r1, r2 := a.newRows(2, 3, "s"), a.newRows(1, 3, "s")
	commit(mysqlsource.Tx{Inserts: ins(mysqlsource.Insert{Table: biz, Rows: alarm(1)}, mysqlsource.Insert{Table: a.tbl, Rows: r1},
		mysqlsource.Insert{Table: a.tbl, Rows: r2})}, r1, r2)
	// XA prepared; committed further down.
	xaRows := a.rowsOn(3, 2, "xa", "xa")
	commit(mysqlsource.Tx{XA: &mysqlsource.XID{GTRID: "shape-1", BQual: "q", FormatID: 1}, Phase: mysqlsource.XAPrepare,
		Inserts: ins(mysqlsource.Insert{Table: a.tbl, Rows: xaRows})})
	// A large transaction: 12 statements of 3 rows.
	var big []mysqlsource.Insert
	var bigRows [][][]any
	for i := 0; i < 12; i++ {
		r := a.newRows(3, 3, "big")
		big = append(big, mysqlsource.Insert{Table: a.tbl, Rows: r})
		bigRows = append(bigRows, r)
	}
	commit(mysqlsource.Tx{Inserts: big}, bigRows...)
	// Standalone DDL on the business table.
	commit(mysqlsource.Tx{Statement: "ALTER TABLE `app`.`alarm_record` ADD INDEX `by_device` (`device_id`)", DB: "app"})
	// Uncompressed among compressed ones.
	r3 := a.newRows(2, 3, "plain")
	commit(mysqlsource.Tx{Inserts: ins(mysqlsource.Insert{Table: a.tbl, Rows: r3}), Uncompressed: true}, r3)
	// XA rolled back after prepare: never published.
	commit(mysqlsource.Tx{XA: &mysqlsource.XID{GTRID: "shape-2", FormatID: 1}, Phase: mysqlsource.XAPrepare,
		Inserts: ins(mysqlsource.Insert{Table: a.tbl, Rows: a.rowsOn(2, 2, "undone", "undone")})})
	commit(mysqlsource.Tx{Statement: "XA ROLLBACK X'73686170652d32',X'',1", DB: "app"})
	// XA one phase.
	r4 := a.rowsOn(2, 2, "one", "one")
	commit(mysqlsource.Tx{XA: &mysqlsource.XID{GTRID: "shape-3", FormatID: 1}, Phase: mysqlsource.XAOnePhase,
		Inserts: ins(mysqlsource.Insert{Table: a.tbl, Rows: r4})}, r4)
	commit(mysqlsource.Tx{Statement: "XA COMMIT X'73686170652d31',X'71',1", DB: "app"}, xaRows)
	// A former primary's uuid, then a tagged GTID.
	r5 := a.newRows(2, 3, "old")
	commit(mysqlsource.Tx{GTID: "11111111-2222-3333-4444-555555555555:40", Inserts: ins(mysqlsource.Insert{Table: a.tbl, Rows: r5})}, r5)
	r6 := a.newRows(2, 3, "tag")
	commit(mysqlsource.Tx{GTID: p.UUID() + ":shapes:1", Inserts: ins(mysqlsource.Insert{Table: biz, Rows: alarm(2)},
		mysqlsource.Insert{Table: a.tbl, Rows: r6})}, r6)
}

// The MySQL shapes under each way the relay can stop: straight through,
// SIGTERM after its first Kafka commit, kill -9 after a flush, after a
// commit and after a partial commit of a split transaction, restarted
// until the checkpoint covers gtid_executed; then exactly once.
func TestMySQLShapeMatrix(t *testing.T) {
	for _, fp := range []string{"", "any-commit:1:term", "after-flush:2", "after-commit:1", "after-partial:1"} {
		name := fp
		if name == "" {
			name = "straight"
		}
		t.Run(name, func(t *testing.T) {
			opts := mysqlsource.Options{Version: v84, Compression: true, RowMetadata: "MINIMAL"}
			if fp == "" {
				opts.BinlogChecksum = "NONE" // binlog events without checksums, with the other settings
			}
			p := startPrimary(t, opts)
			a := newApp(t, p)
			biz, err := p.CreateTable("app", "alarm_record", []mysqlsource.Column{{Name: "id", Type: mysqlsource.Bigint},
				{Name: "device_id", Type: mysqlsource.Varchar64}, {Name: "level", Type: mysqlsource.Varchar64},
				{Name: "temp", Type: mysqlsource.Int}, {Name: "seq", Type: mysqlsource.Bigint}}, "")
			if err != nil {
				t.Fatal(err)
			}
			k := itest.StartKafka(t)
			cfg := relayConfig(t, k, "mysql", p.Addr())
			cfg.Kafka.Batch.MaxRecords = 2
			if fp == "after-flush:2" {
				// Each run leaves a Kafka transaction open and the next one
				// waits out the lease: fewer, larger batches keep it short.
				cfg.Kafka.Batch.MaxRecords = 8
			}
			cfg.Log.Level = "info"
			path := itest.WriteConfig(t, cfg)
			first := env.StartProc(t, path) // pins `now` before the shapes
			waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)
			if fp != "" {
				if code, err := first.Terminate(30 * time.Second); err != nil || code != 0 {
					t.Fatalf("first run: exit %d, %v", code, err)
				}
			}
			writeShapes(t, p, a, biz)
			head := p.Executed().Flat()
			if fp == "" {
				waitCheckpoint(t, cfg, head, time.Minute)
				requireExact(t, k, cfg, a)
				return
			}
			runs, last := 0, (*itest.Proc)(nil)
			for ; runs < 60 && !covers(t, cfg, head); runs++ {
				proc := env.StartProc(t, path, "OUTBOX_RELAY_FAILPOINT="+fp)
				last = proc
				itest.Eventually(t, time.Minute, func() error {
					if proc.Exited() || covers(t, cfg, head) {
						return nil
					}
					return fmt.Errorf("run %d still going", runs)
				})
				if !proc.Exited() {
					// A kill failpoint may fire at the final commit of the
					// SIGTERM stop: killed is fine, another exit is not.
					if code, err := proc.Terminate(30 * time.Second); err != nil || code != 0 && !proc.Killed() {
						t.Fatalf("run %d: exit %d, %v\n%s", runs, code, err, proc.Output())
					}
				} else if code, _ := proc.Wait(time.Second); code != 0 && !proc.Killed() && fp == "any-commit:1:term" {
					t.Fatalf("run %d: exit %d after SIGTERM\n%s", runs, code, proc.Output())
				}
			}
			if !covers(t, cfg, head) {
				t.Fatalf("checkpoint does not cover %s after %d runs", head, runs)
			}
			requireExact(t, k, cfg, a)
			t.Logf("%s: %d runs", fp, runs)
			if os.Getenv("MYSQLITEST_DEBUG") != "" && last != nil {
				t.Log(last.Exited(), last.Killed(), last.Output())
			}
		})
	}
}

// covers reports whether the committed checkpoint holds every GTID of head
// and no partial transaction.
func covers(t *testing.T, cfg configT, head string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cp, err := itest.Store(t, cfg).Load(ctx, cfg.Name)
	if err != nil || cp == nil || cp.Partial != nil {
		return false
	}
	have, err1 := binlog.ParseSet("mysql", cp.GTIDSet)
	want, err2 := binlog.ParseSet("mysql", head)
	return err1 == nil && err2 == nil && have.Contain(want)
}
