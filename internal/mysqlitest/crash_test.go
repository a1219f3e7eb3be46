//go:build integration

package mysqlitest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

// kill -9 of the relay process at random instants while an application
// commits on a MySQL 8.4 double (compressed transactions, a tagged GTID
// now and then, an XA transaction prepared and committed later, binlog
// rotations): the final relay completes the stream exactly once.
func TestMySQLCrashKill9(t *testing.T) {
	p := startPrimary(t, mysqlsource.Options{Version: v84, Compression: true})
	a := newApp(t, p)
	k := itest.StartKafka(t)
	cfg := relayConfig(t, k, "mysql", p.Addr())
	cfg.Kafka.Batch.MaxRecords = 50 // more, smaller Kafka transactions: more instants to land in
	cfg.Log.Level = "info"
	path := itest.WriteConfig(t, cfg)
	proc := env.StartProc(t, path)
	waitCheckpoint(t, cfg, p.Executed().Flat(), time.Minute)

	wrote, stop := make(chan error, 1), make(chan struct{})
	go func() {
		var pending *mysqlsource.XID
		var pendingRows [][]any
		for i := 0; ; i++ {
			select {
			case <-stop:
				wrote <- nil
				return
			default:
			}
			rows := a.newRows(1+i%3, 6, "")
			tx := mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: rows}}}
			switch {
			case i%97 == 0:
				tx.GTID = fmt.Sprintf("%s:crash:%d", p.UUID(), i+1)
			case i%101 == 50 && pending == nil:
				// XA on its own aggregates: its rows commit at XA COMMIT.
				rows = a.rowsOn(2, 2, fmt.Sprintf("xa%d", i), "xa")
				pending, pendingRows = &mysqlsource.XID{GTRID: fmt.Sprintf("x%d", i), FormatID: 1}, rows
				tx = mysqlsource.Tx{XA: pending, Phase: mysqlsource.XAPrepare, Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: rows}}}
				rows = nil
			case i%101 == 70 && pending != nil:
				if _, err := p.Commit(mysqlsource.Tx{Statement: fmt.Sprintf("XA COMMIT X'%x',X'',1", pending.GTRID), DB: "app"}); err != nil {
					wrote <- err
					return
				}
				a.committed(pendingRows)
				pending = nil
			}
			if _, err := p.Commit(tx); err != nil {
				wrote <- err
				return
			}
			a.committed(rows)
			if i%300 == 299 {
				p.Rotate() // FLUSH BINARY LOGS: rotate, format description, Previous_gtids mid-stream
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	store := itest.Store(t, cfg)
	position := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cp, err := store.Load(ctx, cfg.Name)
		if err != nil || cp == nil {
			return ""
		}
		return cp.GTIDSet
	}
	const kills = 15
	for i := 0; i < kills; i++ {
		// Each incarnation first commits something (it holds the lease and
		// streams), then dies at a random instant: mid-batch, mid-commit.
		before := position()
		itest.Eventually(t, time.Minute, func() error {
			if proc.Exited() {
				t.Fatalf("relay exited by itself:\n%s", proc.Output())
			}
			if position() == before {
				return fmt.Errorf("incarnation %d has committed nothing yet", i)
			}
			return nil
		})
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		proc.Kill()
		proc = env.StartProc(t, path)
	}
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	waitCheckpoint(t, cfg, p.Executed().Flat(), 2*time.Minute)
	recs := requireExact(t, k, cfg, a)
	if proc.Exited() {
		t.Fatalf("relay exited by itself:\n%s", proc.Output())
	}
	t.Logf("%d kills, %d records, gtid_executed %s", kills, len(recs), p.Executed().Flat())
}
