//go:build integration

package itest

// Conformance matrix, part 1 (issue 11): statement-logged DML, upserts on
// the outbox, a source transaction longer than the Kafka transaction
// timeout, binlog rotation and compression. Savepoints are in
// shapes_savepoint_test.go, XA shapes in shapes_xa_test.go, all of them at
// once under kill -9 in shapes_mixed_test.go; the driver is shapes.go.

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/client"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// execer runs statements on a connection and fails (the test, or the
// goroutine of the mixed test) on the first error.
type execer func(c *client.Conn, stmts ...string)

// shapeFn writes one shape on the connections cs. live: the relay streams
// while it is written (Straight mode), so the shape may check what is
// visible in between.
type shapeFn func(r *ShapeRun, x execer, cs []*client.Conn, live bool)

// matrix writes the shape once per mode (a subtest each), drives the relay
// to the head and requires the exact result; then after, if any, runs.
func matrix(t *testing.T, modes []Mode, opts ShapeOptions, shape shapeFn, after func(r *ShapeRun)) {
	for _, m := range modes {
		if m == TermEveryCommit {
			t.Run(string(m), func(t *testing.T) { termSweep(t, opts, shape, after) })
			continue
		}
		t.Run(string(m), func(t *testing.T) {
			r := env.NewShapeRun(t, m, opts)
			shape(r, r.Exec, []*client.Conn{r.Conn(), r.Conn(), r.Conn()}, m == Straight)
			if res := r.Drive(); res.Stopped {
				t.Fatalf("%s: the relay stopped by itself (exit %d) on a shape it must relay:\n%s", m, res.Code, lastLines(res.Output, 15))
			}
			r.Finish()
			requireBoundariesHit(t, r)
			if after != nil {
				after(r)
			}
		})
	}
}

// termSweep is the SIGTERM mode of matrix: for k = 1, 2, ... a fresh
// pipeline, the shape, one run stopped by SIGTERM right after its kth Kafka
// commit, a restart to the end and the exact check; until the kth commit
// lies past the shape.
func termSweep(t *testing.T, opts ShapeOptions, shape shapeFn, after func(r *ShapeRun)) {
	limit := opts.MaxTermCommit
	if limit == 0 {
		limit = 40
	}
	inside := 0
	for k := 1; k <= limit; k++ {
		past := false
		t.Run(fmt.Sprintf("commit-%d", k), func(t *testing.T) {
			r := env.NewShapeRun(t, TermEveryCommit, opts)
			shape(r, r.Exec, []*client.Conn{r.Conn(), r.Conn(), r.Conn()}, false)
			in, res := r.TermAt(k)
			if res.Stopped {
				t.Fatalf("the relay stopped by itself (exit %d) on a shape it must relay:\n%s", res.Code, lastLines(res.Output, 15))
			}
			if in {
				inside++
			} else {
				past = true
			}
			if res := r.Resume(); res.Stopped {
				t.Fatalf("the relay restarted after the SIGTERM stopped by itself (exit %d):\n%s", res.Code, lastLines(res.Output, 15))
			}
			r.Finish()
			if after != nil {
				after(r)
			}
		})
		if past || t.Failed() {
			break
		}
	}
	if !t.Failed() && inside == 0 {
		t.Fatalf("no SIGTERM landed inside the shape: it fits in one Kafka commit (max_records %d)", opts.MaxRecords)
	}
}

// requireBoundariesHit fails when a failpoint mode never acted inside the
// shape: then it tested nothing beyond Straight.
func requireBoundariesHit(t *testing.T, r *ShapeRun) {
	t.Helper()
	switch r.Mode {
	case KillAfterFlush, KillAfterCommit:
		if r.Kills < 1 {
			t.Fatalf("the failpoint %s never killed the relay", r.Mode.failpoint(1))
		}
	}
}

// lastLines is the end of a relay log: the lines that say why it stopped.
func lastLines(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stopError is the error the relay logged when it stopped by itself.
func stopError(out string) string {
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"fatal"`) {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 {
		return lastLines(out, 3)
	}
	return strings.Join(errs, "\n")
}

// --- savepoints ---

// --- statement-logged DML ---

// Outbox rows logged as statements (a session binlog_format override, or
// MIXED) cannot be published: the relay stops with an error naming the
// GTID, the table, that it was logged as a statement and what to change;
// it publishes nothing of that transaction and nothing after it. Once the
// operator skips the transaction, the rows committed after it are published
// exactly once (the skipped rows never).
func TestShapeStatementLoggedOutboxStops(t *testing.T) {
	BrokerOnlyAsSink(t)
	cases := []struct {
		name     string
		format   string
		tx       bool
		compress bool // log_bin_compress: the statement is a Query_compressed event
		modes    []Mode
	}{
		{"autocommit", "STATEMENT", false, false, []Mode{Straight}},
		{"in-transaction", "STATEMENT", true, false, []Mode{Straight, TermEveryCommit, KillAfterCommit}},
		{"mixed-format", "MIXED", false, false, []Mode{Straight}},
		{"compressed", "STATEMENT", true, true, []Mode{Straight}},
	}
	for _, tc := range cases {
		for _, m := range tc.modes {
			t.Run(tc.name+"/"+string(m), func(t *testing.T) {
				r := env.NewShapeRun(t, m, ShapeOptions{MaxRecords: 1})
				if tc.compress {
					SetGlobal(t, env, "log_bin_compress_min_len", "10")
					SetGlobal(t, env, "log_bin_compress", "ON")
				}
				c, st := r.Conn(), r.Conn()
				qBefore, before := r.Insert("n", 1)
				r.Exec(c, qBefore)
				if m == Straight {
					r.WaitVisible(before...)
				}
				r.Exec(st, "SET SESSION binlog_format='"+tc.format+"'")
				q1, ids := r.Insert("st", 1)
				mark := r.Mark()
				if tc.tx {
					q2, ids2 := r.Insert("st", 2)
					ids = append(ids, ids2...)
					r.Exec(st, "BEGIN", q1, fmt.Sprintf("INSERT INTO %s.alarm_record (device_id, level, temp, seq) VALUES ('st', 'INFO', 1, 1)", r.S.Name), q2, "COMMIT")
				} else {
					r.Exec(st, q1)
				}
				// The transaction that holds the statement, as the server's
				// binlog has it (a CI run once saw the session's @@last_gtid
				// one past it: logged, not trusted).
				gtid := r.GTIDHolding(mark, ids[0])
				if last := r.LastGTID(st); last != gtid {
					t.Logf("%s: the statement is in %s by the binlog, the session's @@last_gtid says %s; binlog since:\n%s",
						m, gtid, last, strings.Join(r.BinlogSince(mark), "\n"))
				}
				r.Skipped = append(r.Skipped, ids...)
				qAfter, after := r.Insert("n", 2)
				r.Exec(c, qAfter)
				res := r.Drive()
				if !res.Stopped {
					t.Fatalf("%s: the relay did not stop at statement-logged DML on %s (GTID %s); of its rows %v are visible (skipped silently if none):\n%s",
						m, r.S.Table(), gtid, r.Visible(ids...), r.Tail())
				}
				msg := stopError(res.Output)
				for _, want := range []string{gtid, r.S.Name, "outbox", "statement", "binlog_format"} {
					if !strings.Contains(strings.ToLower(msg), strings.ToLower(want)) {
						t.Errorf("%s: the stop error does not say %q:\n%s", m, want, msg)
					}
				}
				if v := r.Visible(append(append([]string{}, ids...), after...)...); len(v) > 0 {
					t.Fatalf("%s: published %v of the statement-logged transaction or after it", m, v)
				}
				if cp := r.Checkpoint(); ContainsGTID(cp, gtid) {
					t.Fatalf("%s: the checkpoint %s moved past the statement-logged transaction %s", m, cp.GTIDSet, gtid)
				}
				t.Logf("%s: stopped: %s", m, msg)
				how := operatorSkip(t, r, gtid)
				if res := r.Resume(); res.Stopped {
					t.Fatalf("after %s the relay stopped again (exit %d):\n%s", how, res.Code, lastLines(res.Output, 15))
				}
				r.Finish()
			})
		}
	}
}

// operatorSkip is what the operator does after a statement-logged stop:
// `checkpoint skip --gtid G` when the command exists, else `checkpoint set`
// to the checkpoint's set plus G. Either skips exactly G only when the
// checkpoint already covers the transaction before it (a MariaDB GTID set is
// a high-water mark per domain): the relay must have committed what it read
// before G when it stopped there. It returns the command used.
func operatorSkip(t *testing.T, r *ShapeRun, gtid string) string {
	t.Helper()
	cp := r.Checkpoint()
	var d, srv, seq int
	if _, err := fmt.Sscanf(gtid, "%d-%d-%d", &d, &srv, &seq); err == nil && seq > 1 {
		if prev := fmt.Sprintf("%d-%d-%d", d, srv, seq-1); !ContainsGTID(cp, prev) {
			t.Fatalf("the relay stopped at %s with its checkpoint at %s (partial %+v), behind the transaction before it (%s): "+
				"no operator command can skip only %s (checkpoint skip refuses a GTID that is not the next; set would pass over the ones between). "+
				"When it stops at a transaction, the relay should first commit the complete transactions it read before it", gtid, cp.GTIDSet, cp.Partial, prev, gtid)
		}
	}
	if _, _, code := env.CLI(t, "checkpoint", "skip", "--help"); code == 0 {
		var out, errOut string
		Eventually(t, 10*time.Second, func() error {
			out, errOut, code = env.CLI(t, "checkpoint", "skip", "--config", r.Path, "--gtid", gtid, "--yes")
			if code != 0 && strings.Contains(out+errOut, "looks live") {
				return fmt.Errorf("%s", errOut) // the stop is younger than 3 checkpoint intervals
			}
			return nil
		})
		if code != 0 {
			t.Fatalf("checkpoint skip --gtid %s: exit %d\n%s%s", gtid, code, out, errOut)
		}
		return "checkpoint skip"
	}
	set := GTIDSetWith(t, cp.Flavor, cp.GTIDSet, gtid)
	out, errOut, code := env.CLI(t, "checkpoint", "set", "--config", r.Path, "--gtid", set, "--yes", "--force")
	if code != 0 {
		t.Fatalf("checkpoint set --gtid %s: exit %d\n%s%s", set, code, out, errOut)
	}
	return "checkpoint set --gtid " + set
}

// Statement-logged DML on tables the relay does not capture: with
// source.statement_dml warn the relay goes on (every outbox row once); by
// default (fail: a trigger on such a table could write outbox rows that are
// then not in the binlog) it stops naming the GTID, the table and the fix.
func TestShapeStatementLoggedBusinessTable(t *testing.T) {
	BrokerOnlyAsSink(t)
	t.Run("warn", func(t *testing.T) {
		matrix(t, AllModes, ShapeOptions{Setup: func(cfg *config.Config) { SetStatementDML(cfg, "warn") }}, shapeStatementBusiness, nil)
	})
	t.Run("default-fail", func(t *testing.T) {
		var has bool
		r := env.NewShapeRun(t, Straight, ShapeOptions{Setup: func(cfg *config.Config) { has = SetStatementDML(cfg, "") }})
		if !has {
			t.Skip("this version has no source.statement_dml: statement-logged DML of other tables never stops it")
		}
		c, st := r.Conn(), r.Conn()
		q, before := r.Insert("sbf", 1)
		r.Exec(c, q)
		r.WaitVisible(before...)
		r.Exec(st, "SET SESSION binlog_format='STATEMENT'",
			fmt.Sprintf("INSERT INTO %s.alarm_record (device_id, level, temp, seq) VALUES ('stmt', 'INFO', 1, 1)", r.S.Name))
		gtid := r.LastGTID(st)
		q, after := r.Insert("sbf", 1)
		r.Exec(c, q)
		res := r.Drive()
		if !res.Stopped {
			t.Fatalf("with the default source.statement_dml the relay did not stop at statement-logged DML of %s.alarm_record (%s)", r.S.Name, gtid)
		}
		msg := stopError(res.Output)
		for _, want := range []string{gtid, r.S.Name + ".alarm_record", "statement"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the stop error does not say %q:\n%s", want, msg)
			}
		}
		if v := r.Visible(after...); len(v) > 0 {
			t.Fatalf("published %v, committed after the transaction it stopped at", v)
		}
	})
}

func shapeStatementBusiness(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	c, st := cs[0], cs[1]
	alarm := fmt.Sprintf("INSERT INTO %s.alarm_record (device_id, level, temp, seq) VALUES ('stmt', 'INFO', 1, 1)", r.S.Name)
	x(c, r.Must("sb", 2))
	x(st, "SET SESSION binlog_format='STATEMENT'", alarm,
		fmt.Sprintf("UPDATE %s.alarm_record SET temp = temp + 1 WHERE device_id = 'stmt'", r.S.Name),
		"BEGIN", alarm, alarm, fmt.Sprintf("DELETE FROM %s.alarm_record WHERE device_id = 'stmt' LIMIT 1", r.S.Name), "COMMIT")
	x(c, "BEGIN", r.Must("sb", 2), "COMMIT")
	x(st, "SET SESSION binlog_format='MIXED'", alarm, "SET SESSION binlog_format='ROW'")
	x(c, r.Must("sb", 1))
}

// --- upserts on the outbox ---

// INSERT ... ON DUPLICATE KEY UPDATE and REPLACE on the outbox table: where
// a key exists MariaDB logs an UPDATE (REPLACE too, for this table), where
// it does not an INSERT. router.invalid_op applies: warn publishes the
// inserts only and counts the rest in outbox_relay_invalid_ops_total; fatal
// stops naming the operation. Nothing silent either way.
func TestShapeUpsertOnOutbox(t *testing.T) {
	BrokerOnlyAsSink(t)
	t.Run("warn", func(t *testing.T) {
		matrix(t, AllModes, ShapeOptions{Setup: func(cfg *config.Config) { cfg.Router.InvalidOp = "warn" }}, shapeUpserts, func(r *ShapeRun) {
			// Nothing silent: the skipped UPDATEs are logged (the metric is
			// checked in warn-metric, on one process).
			if !regexp.MustCompile(`(?i)"level":"warn"[^\n]*update`).MatchString(r.AllLogs()) {
				r.T.Fatalf("%s: no warning about the upserts' UPDATEs of outbox rows in any relay log:\n%s", r.Mode, r.Tail())
			}
		})
	})
	t.Run("warn-metric", func(t *testing.T) {
		r := env.NewShapeRun(t, Straight, ShapeOptions{Setup: func(cfg *config.Config) {
			cfg.Router.InvalidOp = "warn"
			cfg.HTTP.Listen = freeAddr(t)
		}})
		shapeUpserts(r, r.Exec, []*client.Conn{r.Conn()}, true)
		if res := r.Drive(); res.Stopped {
			t.Fatalf("stopped on upserts with invalid_op warn:\n%s", lastLines(res.Output, 10))
		}
		if got := scrape(t, r.Cfg.HTTP.Listen, "outbox_relay_invalid_ops_total"); got != 3 {
			t.Fatalf("outbox_relay_invalid_ops_total = %v, want 3 (three rows updated by upserts)", got)
		}
		r.Finish()
	})
	for _, tc := range []struct {
		name, stmt string
	}{
		{"fatal-odku", "INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', 'shape', 'f', 'ShapeEvent', '{}') ON DUPLICATE KEY UPDATE event_type = 'Again'"},
		{"fatal-replace", "REPLACE INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', 'shape', 'f', 'ShapeEvent', '{}')"},
	} {
		for _, m := range []Mode{Straight, TermEveryCommit} {
			t.Run(tc.name+"/"+string(m), func(t *testing.T) {
				// One batch per source transaction: the upsert's transaction
				// is never split, so none of it may be published.
				r := env.NewShapeRun(t, m, ShapeOptions{MaxRecords: 100, Setup: func(cfg *config.Config) { cfg.Router.InvalidOp = "fatal" }})
				c := r.Conn()
				q1, first := r.Insert("f", 1)
				r.Exec(c, q1)
				if m == Straight {
					r.WaitVisible(first...)
				}
				q2, inTx := r.Insert("f", 1)
				mark := r.Mark()
				r.Exec(c, "BEGIN", q2, fmt.Sprintf(tc.stmt, r.S.Table(), first[0]), "COMMIT")
				// By the server's binlog: a CI run saw the session's
				// @@last_gtid one past the transaction (see GTIDHolding).
				gtid := r.GTIDHolding(mark, inTx[0])
				q3, later := r.Insert("f", 1)
				r.Exec(c, q3)
				res := r.Drive()
				if !res.Stopped {
					t.Fatalf("%s: the relay did not stop at an UPDATE of an outbox row with invalid_op fatal (GTID %s):\n%s", m, gtid, r.Tail())
				}
				msg := stopError(res.Output)
				for _, want := range []string{"update", gtid, r.S.Table()} {
					if !strings.Contains(msg, want) {
						t.Errorf("%s: the stop error does not name %q:\n%s", m, want, msg)
					}
				}
				if v := r.Visible(append(inTx, later...)...); len(v) > 0 {
					t.Fatalf("%s: published %v of the upsert's transaction or after it", m, v)
				}
				if v := r.Visible(first...); m == Straight && len(v) != 1 {
					t.Fatalf("%s: the row published before the upsert is gone", m)
				}
				r.CheckSoFar("after the stop")
			})
		}
	}
}

func shapeUpserts(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	c := cs[0]
	q, ids := r.Insert("up", 1)
	x(c, q)
	upd := func(verb, id, tail string) string {
		return fmt.Sprintf(`%s INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', 'shape', 'up', 'ShapeEvent', '{"seq":999999}')%s`,
			verb, r.S.Table(), id, tail)
	}
	// An existing key: an UPDATE in the binlog, never published.
	x(c, upd("INSERT", ids[0], " ON DUPLICATE KEY UPDATE event_type = 'Upserted'"))
	// A new key: a plain INSERT, published.
	qn, _ := r.Insert("up", 1)
	x(c, qn+" ON DUPLICATE KEY UPDATE event_type = 'Upserted'")
	qr, rids := r.Insert("up", 1)
	x(c, strings.Replace(qr, "INSERT INTO", "REPLACE INTO", 1))
	// REPLACE of an existing key: MariaDB logs an UPDATE for this table.
	x(c, upd("REPLACE", rids[0], ""))
	// Inside a transaction, between inserts.
	qa, aids := r.Insert("up", 1)
	x(c, "BEGIN", qa, upd("INSERT", aids[0], " ON DUPLICATE KEY UPDATE event_type = 'Upserted'"), r.Must("up", 1), "COMMIT")
	x(c, r.Must("up", 1))
}

// --- a source transaction longer than the Kafka transaction timeout ---

// One outbox row, 200,000 rows of another table, another outbox row, in one
// source transaction that streams (through a throttling proxy) for longer
// than kafka.transaction_timeout: the relay must not let the broker abort
// its Kafka transaction (commit a partial checkpoint in time, or tell a
// timed-out transaction from a fence and retry): both rows published once,
// never "fenced", never a stop.
func TestShapeLongTransactionPastKafkaTimeout(t *testing.T) {
	proxy := StartThrottle(t, env.DB.Addr, 3<<20) // ~6.4 MB of binlog: ~2 s, twice the timeout
	// max_records 2: the first two outbox rows share a Kafka transaction
	// that stays open while the business rows stream.
	opts := ShapeOptions{MaxRecords: 2, SourceAddr: proxy.Addr, RunTimeout: 2 * time.Minute, Setup: func(cfg *config.Config) {
		cfg.Kafka.TransactionTimeout = time.Second // the least the configuration takes
		cfg.Source.HeartbeatPeriod = 2 * time.Second
	}}
	matrix(t, []Mode{Straight, TermEveryCommit, KillAfterCommit, KillAfterPartial}, opts, shapeLongTransaction, nil)
}

func shapeLongTransaction(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	c := cs[0]
	start := time.Now()
	x(c, "BEGIN", r.Must("long", 1),
		fmt.Sprintf(`INSERT INTO %s.alarm_record (device_id, level, temp, seq)
			SELECT CONCAT('dev-', seq %% 10), 'INFO', seq %% 100, seq FROM %s.seq_1_to_200000`, r.S.Name, r.S.Name),
		r.Must("long", 2), "COMMIT")
	x(c, r.Must("long", 1))
	r.T.Logf("long transaction written in %s", time.Since(start).Round(time.Millisecond))
}

// --- binlog rotation ---

// FLUSH BINARY LOGS between transactions, twice in a row, and while another
// connection holds an open transaction with outbox rows that commits into
// the new file.
func TestShapeBinlogRotation(t *testing.T) {
	BrokerOnlyAsSink(t)
	matrix(t, AllModes, ShapeOptions{}, shapeRotation, nil)
}

func shapeRotation(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	c, d := cs[0], cs[1]
	open := "rot-open-" + r.XID()
	x(c, r.Must("rot", 1), "FLUSH BINARY LOGS")
	x(c, "BEGIN", r.Must("rot", 3), "COMMIT")
	x(c, "FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
	x(d, "BEGIN", r.Must(open, 2))
	x(c, r.Must("rot", 1))
	x(c, "FLUSH BINARY LOGS")
	x(d, r.Must(open, 1))
	x(c, r.Must("rot", 1))
	x(d, "COMMIT")
	x(c, r.Must("rot", 1))
}

// --- MariaDB binlog compression ---

// log_bin_compress=ON with a small log_bin_compress_min_len: rows events
// become Write_compressed_rows, statements (SAVEPOINT too) Query_compressed.
// Single-row and multi-row transactions exactly once.
func TestShapeCompressedBinlog(t *testing.T) {
	BrokerOnlyAsSink(t)
	matrix(t, AllModes, ShapeOptions{}, func(r *ShapeRun, x execer, cs []*client.Conn, live bool) {
		SetGlobal(r.T, r.Env, "log_bin_compress_min_len", "10")
		SetGlobal(r.T, r.Env, "log_bin_compress", "ON")
		shapeCompressed(r, x, cs, live)
	}, nil)
}

func shapeCompressed(r *ShapeRun, x execer, cs []*client.Conn, _ bool) {
	c := cs[0]
	x(c, r.Must("cz", 1))
	x(c, "BEGIN", r.Must("cz", 3), r.Must("cz", 1), "SAVEPOINT compressed_savepoint_name", r.Must("cz", 2), "COMMIT")
	bulk := r.XID() // the bulk rows' own aggregate: their seq restarts at 1
	x(c, fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT CONCAT('%s-cz-bulk-', seq), 'shape', '%s', 'Bulk', JSON_OBJECT('seq', seq) FROM %s.seq_1_to_7`, r.S.Table(), bulk, bulk, r.S.Name))
	x(c, r.Must("cz", 1))
}
