//go:build integration

package itest

// Partial row images where a transaction is published otherwise than
// whole at its commit: committed in parts (larger than the batch), and XA
// transactions (their rows are published at their XA COMMIT, dropped at
// their XA ROLLBACK).

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// auditVerdict is what these tests read of `audit --json`, and its exit code.
type auditVerdict struct {
	Verdict string
	Missing struct{ IDs []string }
	Pending struct{ IDs []string }
	Code    int
}

// runAudit runs `audit --since 1h --json` for the configuration at path.
func runAudit(t *testing.T, path string) auditVerdict {
	t.Helper()
	out, errOut, code := env.CLI(t, "audit", "--since", "1h", "--json", "--config", path)
	var v auditVerdict
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("audit: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	v.Code = code
	slices.Sort(v.Missing.IDs)
	slices.Sort(v.Pending.IDs)
	return v
}

// A session with binlog_row_image=MINIMAL writes a transaction larger than
// the batch (kafka.batch.max_records 2) whose last INSERT leaves columns to
// their defaults: the relay has published its first rows, committed in
// parts, when it meets the partial image. The stop says how many of its
// rows were published (not "nothing of the transaction"), and the way past
// it: skip it, then replay the rows audit names missing. Audit, meanwhile,
// reads the binlog past the checkpoint's part of the transaction and
// counts the rest of it pending (exit 75); once skipped, missing (exit 1);
// once replayed, clean. The stop said "nothing of the transaction is
// published" and to replay all its rows (4 duplicates), and audit failed
// on the partial image it read past the checkpoint (exit 1, no verdict).
func TestPartialImageLateInASplitTransactionSaysWhatWasPublished(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg, path, r := defaultsPipeline(t, func(c *config.Config) { c.Kafka.Batch.MaxRecords = 2 })
	sessionTx(t, env.DB, "", insertAll(s.Table(), "first", "a", "{}"))
	var stmts []string
	for i := range 5 {
		stmts = append(stmts, insertAll(s.Table(), fmt.Sprintf("whole-%d", i), "a", fmt.Sprintf(`{"seq":%d}`, i+1)))
	}
	stmts = append(stmts, defaultedInsert(s.Table(), "defaulted", "b"))
	stopped := sessionTx(t, env.DB, "MINIMAL", stmts...)

	err := r.StoppedWith(t)
	checkPartialImageStop(t, r, err, stopped, s.Table(), "lacks column(s) event_type, payload, note:")
	if !strings.Contains(err.Error(), "its first 4 rows were published") || strings.Contains(err.Error(), "nothing of the transaction is published") {
		t.Fatalf("the stop does not say that 4 rows of the transaction were published: %v", err)
	}
	cp, lerr := Store(t, cfg).Load(t.Context(), cfg.Name)
	if lerr != nil || cp == nil || cp.Partial == nil || cp.Partial.GTID != stopped || cp.Partial.Rows != 4 {
		t.Fatalf("checkpoint %+v (%v): want 4 rows of %s published", cp, lerr, stopped)
	}
	published := func() []string {
		var ids []string
		for _, rec := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
			ids = append(ids, rec.ID)
		}
		slices.Sort(ids)
		return ids
	}
	if got, want := published(), []string{"first", "whole-0", "whole-1", "whole-2", "whole-3"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want %v", got, want)
	}

	rest := []string{"defaulted", "whole-4"}
	if v := runAudit(t, path); v.Verdict != "pending" || v.Code != 75 || !slices.Equal(v.Pending.IDs, rest) || len(v.Missing.IDs) > 0 {
		t.Fatalf("audit at the stop: %+v; want the rest of the transaction pending (exit 75)", v)
	}
	if out, errOut, code := env.CLI(t, "checkpoint", "skip", "--config", path, "--gtid", stopped, "--yes"); code != 0 {
		t.Fatalf("checkpoint skip: exit %d\n%s%s", code, out, errOut)
	}
	v := runAudit(t, path)
	if v.Verdict != "mismatch" || v.Code != 1 || !slices.Equal(v.Missing.IDs, rest) {
		t.Fatalf("audit after the skip: %+v; want the rest of the transaction missing (exit 1)", v)
	}
	args := []string{"replay", "--config", path, "--yes"}
	for _, id := range v.Missing.IDs {
		args = append(args, "--event-id", id)
	}
	if out, errOut, code := env.CLI(t, args...); code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	if v := runAudit(t, path); v.Verdict != "clean" || v.Code != 0 {
		t.Fatalf("audit after the replay: %+v; want clean", v)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	sessionTx(t, env.DB, "", insertAll(s.Table(), "later", "a", `{"seq":9}`))
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if got, want := published(), []string{"defaulted", "first", "later", "whole-0", "whole-1", "whole-2", "whole-3", "whole-4"}; !slices.Equal(got, want) {
		t.Fatalf("published %v, want each row once", got)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// xaPrepared prepares one XA transaction of stmts on a session of its own
// whose binlog_row_image is image, and returns the server's last GTID after
// its XA PREPARE and a function that ends it (XA COMMIT or XA ROLLBACK) on
// the same session: another session may not find the xid until the server
// has handed the transaction over from this one.
func xaPrepared(t *testing.T, image, xid string, stmts ...string) (string, func(end string)) {
	t.Helper()
	c, err := env.DB.Root()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	run := func(qs ...string) {
		t.Helper()
		for _, q := range qs {
			if _, err := c.Execute(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
	run(append(append([]string{"SET SESSION binlog_row_image=" + image, "XA START '" + xid + "'"}, stmts...),
		"XA END '"+xid+"'", "XA PREPARE '"+xid+"'")...)
	return Head(t, env.DB), func(end string) { run(end + " '" + xid + "'") }
}

// An XA transaction whose INSERT image lacks columns is decided at its end,
// as its rows are published: prepared, it holds nothing up (the relay
// publishes the transactions after it); its XA COMMIT stops the relay
// there, exit 78, naming the commit's GTID, the XA transaction and its
// prepare; the way past it the error names (replay its rows, skip the
// commit) then publishes everything once, and the restart, which reads
// again from before the prepare (listed in the checkpoint), does not stop
// on it again. Rolled back, its rows are never published and nothing
// stops. The relay stopped at the XA PREPARE, even of a transaction rolled
// back later, and the skip of the prepare it named was followed by a stop
// at the XA COMMIT as unknown, whose way out (checkpoint set before the
// prepare) led back to the first stop.
func TestPartialImageInAnXATransactionStopsAtItsCommit(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg, path, r := defaultsPipeline(t, nil)
	_, end := xaPrepared(t, "MINIMAL", "rolled", defaultedInsert(s.Table(), "xa-rolled", "x"))
	end("XA ROLLBACK")
	prepared, end := xaPrepared(t, "MINIMAL", "held", defaultedInsert(s.Table(), "xa-held", "x"))
	sessionTx(t, env.DB, "", insertAll(s.Table(), "after-prepare", "a", `{"seq":1}`))
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute) // prepared, it holds nothing up
	end("XA COMMIT")
	commit := Head(t, env.DB)
	err := r.StoppedWith(t)
	checkPartialImageStop(t, r, err, commit, s.Table(), "lacks column(s) event_type, payload, note:")
	if !strings.Contains(err.Error(), "XA") || !strings.Contains(err.Error(), prepared) {
		t.Fatalf("the stop does not name the XA transaction and its prepare %s: %v", prepared, err)
	}
	if out, errOut, code := env.CLI(t, "replay", "--config", path, "--event-id", "xa-held", "--yes"); code != 0 {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := env.CLI(t, "checkpoint", "skip", "--config", path, "--gtid", commit, "--yes"); code != 0 {
		t.Fatalf("checkpoint skip: exit %d\n%s%s", code, out, errOut)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	sessionTx(t, env.DB, "", insertAll(s.Table(), "after-commit", "a", `{"seq":2}`))
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() || rep.Received != 3 {
		t.Fatalf("want after-prepare, xa-held (replayed) and after-commit once: %s", rep)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}

// An XA transaction whose only outbox row lacks columns is prepared, the
// relay restarts with the prepare behind its checkpoint, and the XA COMMIT
// comes after the restart: the checkpoint lists the transaction with its
// row, the restart reads it again from before its prepare, and its XA
// COMMIT stops the relay, named, with nothing of it published. Listed
// with 0 rows (the partial image was handed on without rows), the restart
// did not read the prepare again, and the XA COMMIT published nothing and
// stopped nothing: the row was lost without a word.
func TestPartialImageInAnXATransactionPreparedAcrossARestartStopsAtItsCommit(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg, _, r := defaultsPipeline(t, nil)
	prepared, end := xaPrepared(t, "MINIMAL", "held", defaultedInsert(s.Table(), "xa-held", "x"))
	sessionTx(t, env.DB, "", insertAll(s.Table(), "after-prepare", "a", `{"seq":1}`))
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	cp, err := Store(t, cfg).Load(t.Context(), cfg.Name)
	if err != nil || cp == nil || !cp.Replays() || len(cp.XA.Prepared) != 1 || cp.XA.Prepared[0].GTID != prepared || cp.XA.Prepared[0].Rows != 1 {
		t.Fatalf("checkpoint %+v (%v): want the XA transaction prepared at %s listed with its row, read again at the restart", cp, err, prepared)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	end("XA COMMIT")
	commit := Head(t, env.DB)
	err = r.StoppedWith(t)
	checkPartialImageStop(t, r, err, commit, s.Table(), "lacks column(s) event_type, payload, note:")
	if !strings.Contains(err.Error(), prepared) {
		t.Fatalf("the stop does not name the XA transaction's prepare %s: %v", prepared, err)
	}
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); rep.Received != 1 || len(rep.Duplicates) > 0 {
		t.Fatalf("want after-prepare alone, once: %s", rep)
	}
}

// A transaction with a partial image that the operator skipped is read
// again when the relay resumes from before an XA transaction still
// prepared (the checkpoint lists it): the relay publishes nothing of it
// and does not stop on it again, and publishes the XA transaction at its
// commit and what follows, once.
func TestSkippedPartialImageReadAgainFromBeforeAPreparedXADoesNotStop(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg, path, r := defaultsPipeline(t, nil)
	_, end := xaPrepared(t, "FULL", "held", insertAll(s.Table(), "xa-held", "a", `{"seq":1}`))
	stopped := sessionTx(t, env.DB, "MINIMAL", defaultedInsert(s.Table(), "defaulted", "b"))
	checkPartialImageStop(t, r, r.StoppedWith(t), stopped, s.Table(), "lacks column(s) event_type, payload, note:")
	if out, errOut, code := env.CLI(t, "checkpoint", "skip", "--config", path, "--gtid", stopped, "--yes"); code != 0 {
		t.Fatalf("checkpoint skip: exit %d\n%s%s", code, out, errOut)
	}
	cp, err := Store(t, cfg).Load(t.Context(), cfg.Name)
	if err != nil || cp == nil || !cp.Replays() {
		t.Fatalf("checkpoint %+v (%v): want it to list the prepared XA transaction, read again at the restart", cp, err)
	}
	sessionTx(t, env.DB, "", insertAll(s.Table(), "after-skip", "b", `{"seq":2}`))
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	end("XA COMMIT")
	sessionTx(t, env.DB, "", insertAll(s.Table(), "after-commit", "a", `{"seq":3}`))
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if len(rep.Duplicates)+len(rep.Unexpected)+len(rep.OutOfOrder)+len(rep.WrongKey) > 0 || rep.Received != 3 ||
		!slices.Equal(rep.Missing, []string{"defaulted"}) {
		t.Fatalf("want xa-held, after-skip and after-commit once, the skipped row not: %s", rep)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}
