package relay

// Stops of the commit pipeline (a commit in flight, records held behind
// it): fatal stops, bad rows, lost leases and slow XA look-ups commit what
// ended before them and nothing after, on the scripted relay-loop harness
// (script_test.go).

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/source"
)

// A fatal stop inside a transaction, or at a transaction boundary, first
// commits the transactions that ended before it, so the checkpoint is just
// before the stopped one. The failure guarded against: a fatal stop on a
// transaction whose rows the loop has already read (statement-logged DML
// after a row-logged outbox INSERT in the same transaction: a session with
// binlog_format=MIXED; an event the relay cannot open after outbox rows),
// or a fatal stop the loop itself decides at a source transaction boundary
// (XA COMMIT of an XA transaction prepared before the relay's start, whose
// documented recovery is also `checkpoint skip --gtid`), leaves the
// transactions that ENDED before it uncommitted: the commit-before-the-stop
// in consume only runs for reader stops, and only when curGTID == "". The
// checkpoint then stays two (or more) transactions behind the GTID the
// error names, and for good: a restart reads tx 2 and the stopped
// transaction in one hand-off (not caught up at tx 2's commit), so tx 2 is
// again in the open batch when the stop comes. `checkpoint skip --gtid G3`
// refuses (G3 is not the next after the checkpoint); with --force on
// MariaDB the domain's position jumps to G3 and tx 2, committed on the
// source, is never published (lost).
//
// The pipelined shape: tx 2 ended where the reader had caught up, with tx
// 1's commit in flight it is only held (wantCommit); the stop that follows
// must commit it, not drop it.
func TestPipelineFatalStopCommitsEndedTransactions(t *testing.T) {
	realTime(t)
	type shape struct {
		name string
		// stop builds the third transaction and returns how many of the
		// script's events to feed and the reader's error to send after
		// them (nil: the loop stops by itself).
		stop func(s *script) (feed int, readErr error)
	}
	shapes := []shape{
		{"statement-logged-after-rows", func(s *script) (int, error) {
			s.tx(s.insert("order", "3", 2))
			// The reader hands the rows event on, then meets the statement.
			return s.through(3) - 1, fmt.Errorf("%w: transaction %s changed app.outbox with a statement", binlog.ErrStatementLogged, s.gtid(3))
		}},
		{"unreadable-event-after-rows", func(s *script) (int, error) {
			s.tx(s.insert("order", "3", 1))
			// An event the relay cannot open, after the outbox rows of a
			// transaction that touched a captured table.
			return s.through(3) - 1, fmt.Errorf("%w: transaction %s: cannot read event", binlog.ErrUnframed, s.gtid(3))
		}},
		{"xa-commit-prepared-before-start", func(s *script) (int, error) {
			s.xaCommit("u,,1") // its prepare is not in the binlog read: ErrUnknownXA
			return s.through(3), nil
		}},
	}
	for _, sh := range shapes {
		for _, pipelined := range []bool{true, false} {
			name := sh.name + map[bool]string{true: "/tx1-commit-in-flight", false: "/one-hand-off"}[pipelined]
			t.Run(name, func(t *testing.T) {
				s := newScript("mariadb")
				s.tx(s.insert("order", "1", 1))
				s.tx(s.insert("order", "2", 1))
				feed, stopErr := sh.stop(s)
				h := newHarness(t, s, nil)
				if pipelined {
					slowEndTxn(h, time.Second)
				} else {
					h.batch = 0
				}
				a := h.start()
				if pipelined {
					a.feed(s.through(1)) // caught up: tx 1's commit in flight for 1 s
					a.feed(s.through(2)) // caught up: tx 2 held, due when tx 1's commit ends
				}
				a.feed(feed)
				if stopErr != nil {
					a.readErr <- stopErr
				}
				err := a.wait()
				cp := h.load()
				t.Logf("loop returned (fatal %v): %v; checkpoint %q", errclass.Fatal(err), err, cp.GTIDSet)
				if !errclass.Fatal(err) {
					t.Fatalf("not a fatal stop: %v", err)
				}
				if cp.GTIDSet != s.set(2) {
					t.Errorf("fatal stop naming %s with the checkpoint at %q, not %q: tx %s ended before the stop and is not committed; "+
						"`checkpoint skip --gtid %s` refuses (not the next after the checkpoint), and with --force (MariaDB) "+
						"moves the domain to %s: %s is never published",
						s.gtid(3), cp.GTIDSet, s.set(2), s.gtid(2), s.gtid(3), s.gtid(3), s.gtid(2))
				}
				// A restart (the operator's first move) reads tx 2 and the
				// stop in one hand-off: the checkpoint never reaches tx 2.
				h.batch = 0
				b := h.start()
				b.feed(feed)
				if stopErr != nil {
					b.readErr <- stopErr
				}
				err = b.wait()
				if cp := h.load(); cp.GTIDSet != s.set(2) {
					t.Errorf("after a restart: %v (fatal %v), checkpoint still %q (want %q): the stop is permanent, with tx %s behind the checkpoint",
						err, errclass.Fatal(err), cp.GTIDSet, s.set(2), s.gtid(2))
				}
			})
		}
	}
}

// The XA COMMIT of an XA transaction prepared before the relay's first
// start (another application's, in flight at `start: now`; it wrote no
// captured table: the benign case, only logged) makes the loop look its
// prepare up in the server's binlogs (SHOW BINLOG EVENTS, paged, newest
// binlog first, up to 5 minutes) in the middle of a batch, with the Kafka
// transaction open: nothing commits it meanwhile (the tick cannot run, the
// loop is blocked; no commit is in flight to hold the records instead).
// A lookup longer than what is left of kafka.transaction_timeout lets the
// broker abort the transaction; the commit after it fails (ErrTxnTimedOut,
// not fatal), and every restart reads the same batch, looks the same XA
// transaction up again (no verdict is kept), and fails the same way: the
// relay never gets past it. Here the transaction timeout is 2 s and the
// lookup takes 2.5 s (the defaults are 60 s and up to 5 minutes; the
// lookup reads the newest binlogs from their start up to the commit, in
// pages of 10,000 events, each page re-read from the file's start by the
// server).
func TestPipelineXALookupLongerThanTransactionTimeoutGetsPast(t *testing.T) {
	realTime(t)
	s := newScript("mariadb")
	s.tx(s.insert("order", "1", 2))
	s.xaCommit("other-app,,1") // prepared before the relay's start, by another application
	s.tx(s.insert("order", "1", 1))
	h := newHarness(t, s, func(c *config.Config) { c.Kafka.TransactionTimeout = 2 * time.Second })
	h.batch = 0 // catch-up: tx 1's rows and the XA COMMIT in one hand-off
	var lookups atomic.Int32
	h.relay.findXAPrepare = func(ctx context.Context, _ *binlog.Server, xid, _ string) (*source.XAPrepare, error) {
		lookups.Add(1)
		select {
		case <-time.After(2500 * time.Millisecond): // SHOW BINLOG EVENTS through large binlogs
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &source.XAPrepare{GTID: "0-1-0", Tables: []string{"billing.ledger"}}, nil // no captured table
	}
	var last error
	for i := range 3 {
		a := h.start()
		a.feedAll() // the loop commits where it caught up, after the lookup
		for deadline := time.Now().Add(10 * time.Second); a.running() && h.load().GTIDSet != s.end() && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
		}
		if last = a.term(); last == nil {
			break
		}
		t.Logf("attempt %d: %v", i+1, last)
	}
	cp := h.load()
	t.Logf("%d lookups; checkpoint %q", lookups.Load(), cp.GTIDSet)
	if last != nil {
		t.Fatalf("three attempts failed the same way (the broker aborted the transaction left open across the XA lookup), checkpoint still %q: %v", cp.GTIDSet, last)
	}
	h.verify()
}

// The lease is lost (i) while the commit in flight waits for its EndTxn
// and the loop holds the next batch, (ii) while the commit in flight
// flushes (its produce held at the broker; records lingering), (iii) with
// an open batch lingering in the client and no commit in flight. Each
// time the loop returns ha.ErrLeaseLost at once, nothing it held is
// produced, and what reaches read_committed readers is exactly what the
// committed checkpoints cover: the next active instance publishes the
// rest once.
func TestPipelineLeaseLostAroundInFlightCommit(t *testing.T) {
	for _, when := range []string{"in-endtxn", "in-flush", "open-batch-lingering"} {
		t.Run(when, func(t *testing.T) {
			s := newScript("mariadb")
			s.tx(s.insert("order", "1", 2))
			s.tx(s.insert("order", "1", 2))
			s.tx(s.insert("order", "1", 1))
			h := newHarness(t, s, func(c *config.Config) { c.Kafka.Linger = time.Second })
			reached := make(chan struct{}, 8)
			switch when {
			case "in-endtxn":
				var n atomic.Int32
				h.kafka.ControlKey(int16(kmsg.EndTxn), func(kmsg.Request) (kmsg.Response, error, bool) {
					h.kafka.KeepControl()
					if n.Add(1) == 2 {
						reached <- struct{}{}
						h.kafka.SleepControl(func() { time.Sleep(400 * time.Millisecond) })
					}
					return nil, nil, false
				})
			case "in-flush":
				var n atomic.Int32
				h.kafka.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
					h.kafka.KeepControl()
					for _, tp := range req.(*kmsg.ProduceRequest).Topics {
						if tp.Topic != h.cfg.Kafka.CheckpointTopic && n.Add(1) == 1 {
							reached <- struct{}{}
							h.kafka.SleepControl(func() { time.Sleep(400 * time.Millisecond) })
						}
					}
					return nil, nil, false
				})
			}
			ls := ha.NewLease(context.Background())
			a := h.startLeased(ls)
			switch when {
			case "open-batch-lingering":
				a.feed(s.through(1) - 1) // rows produced, lingering (1 s), no commit
				time.Sleep(50 * time.Millisecond)
			default:
				a.feed(s.through(1)) // caught up: the commit starts
				<-reached
				a.feed(s.through(2)) // held
			}
			ls.Lose("test")
			err := a.wait()
			t.Logf("loop returned %v", err)
			if !errors.Is(err, ha.ErrLeaseLost) {
				t.Errorf("loop returned %v, want ha.ErrLeaseLost", err)
			}
			cp := h.load()
			t.Logf("checkpoint after the loss: %q", cp.GTIDSet)
			h.verifyPublished(s.want[:cp.Events])
			h.kafka.DropControl()
			h.start().finish()
			h.verify()
		})
	}
}

// A fatal stop from the reader (statement-logged DML at the next GTID) while
// the commit of the transactions before it is in flight, and that commit
// fails (EndTxn refused), with and without records held behind it. The
// stop's contract must hold: nothing after the transaction is published,
// the checkpoint stays just before it, so the recovery `checkpoint skip
// --gtid <G>` (G the next transaction after the checkpoint) works. A fatal
// stop with the checkpoint further back would make skip refuse, and `skip
// --force` on MariaDB would drop the transactions in between (never
// published). The failed commit must be reported, not dropped by
// settleInflight.
func TestPipelineFatalStopWhileInFlightCommitFails(t *testing.T) {
	realTime(t)
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "nothing-held", true: "records-held"}[held], func(t *testing.T) {
			s := newScript("mariadb")
			s.tx(s.insert("order", "1", 1))
			s.tx(s.insert("order", "1", 1))
			h := newHarness(t, s, nil)
			var refuse atomic.Bool
			h.kafka.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				h.kafka.KeepControl()
				h.kafka.SleepControl(func() { time.Sleep(200 * time.Millisecond) })
				if !refuse.Load() {
					return nil, nil, false
				}
				resp := req.(*kmsg.EndTxnRequest).ResponseKind().(*kmsg.EndTxnResponse)
				resp.ErrorCode = kerr.UnknownServerError.Code
				return resp, nil, true
			})
			a := h.start()
			refuse.Store(true)
			n := 2
			if held {
				a.feed(s.through(1)) // commit of tx 1 in flight (to be refused)
				a.feed(s.through(2)) // tx 2 held
			} else {
				h.batch = 0
				a.feed(s.through(2)) // one reader batch, caught up at its end: the commit of tx 1-2 in flight
			}
			a.readErr <- fmt.Errorf("%w: gtid %s", binlog.ErrStatementLogged, s.gtid(3))
			err := a.wait()
			refuse.Store(false)
			cp := h.load()
			t.Logf("loop returned %v (fatal %v); checkpoint %q", err, errclass.Fatal(err), cp.GTIDSet)
			if errclass.Fatal(err) && cp.GTIDSet != s.set(n) {
				t.Errorf("fatal stop before %s with the checkpoint at %q, not %q (the transaction before it): `checkpoint skip --gtid %s` refuses; with --force it skips %s..%s unpublished",
					s.gtid(3), cp.GTIDSet, s.set(n), s.gtid(3), s.gtid(1), s.gtid(2))
			}
			if errclass.Fatal(err) {
				return
			}
			// Not fatal: the next attempt reaches the stop again, with the
			// transactions before it committed.
			b := h.start()
			b.feed(s.through(2))
			b.readErr <- fmt.Errorf("%w: gtid %s", binlog.ErrStatementLogged, s.gtid(3))
			err = b.wait()
			if cp := h.load(); !errclass.Fatal(err) || cp.GTIDSet != s.set(2) {
				t.Errorf("second attempt: %v (fatal %v), checkpoint %q; want the stop with the checkpoint at %q", err, errclass.Fatal(err), cp.GTIDSet, s.set(2))
			}
		})
	}
}

// At-least-once: a split transaction and a bad row (dead-letter off:
// a stop) in the transaction after it. SIGTERM after every event must
// publish every row exactly once (the final checkpoint follows every
// acknowledgement); the fatal stop must commit what ended before it,
// keep the checkpoint just before the bad row's transaction, and never
// publish a row of that transaction beyond its committed parts.
func TestPipelineAtLeastOnceStops(t *testing.T) {
	build := func() *script {
		s := newScript("mariadb")
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 2), s.insert("order", "2", 2), s.insert("order", "1", 1)) // split at 2
		s.tx(s.insert("order", "2", 1))
		return s
	}
	t.Run("sigterm-after-every-event", func(t *testing.T) {
		t.Parallel()
		s := build()
		h := newHarness(t, s, maxRecords(2))
		for k := 1; k < len(s.events); k++ {
			a := h.startAtLeastOnce()
			a.feed(k)
			if err := a.term(); err != nil {
				t.Fatalf("SIGTERM after event %d: %v", k, err)
			}
		}
		a := h.startAtLeastOnce()
		a.feedAll()
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		h.verify()
	})
	t.Run("bad-row", func(t *testing.T) {
		t.Parallel()
		s := build()
		s.tx(s.insert("order", "1", 1), s.insert("order", "1", 1))
		bad := spoil(s, s.eventIndex(4, 1), 0)
		h := newHarness(t, s, maxRecords(2))
		h.batch = 0
		a := h.startAtLeastOnce()
		a.feedAll()
		err := a.wait()
		if !errors.Is(err, ErrBadRow) {
			t.Fatalf("%v, want ErrBadRow for %s", err, bad)
		}
		cp := h.load()
		t.Logf("checkpoint %q partial %+v events %d", cp.GTIDSet, cp.Partial, cp.Events)
		if cp.GTIDSet != s.set(3) || cp.Partial != nil && cp.Partial.GTID != s.gtid(4) {
			t.Errorf("checkpoint %q partial %+v after the stop at %s, want %q", cp.GTIDSet, cp.Partial, s.gtid(4), s.set(3))
		}
		h.verifyPublished(s.want[:cp.Events])
	})
}

// A bad row stops the loop while a commit is in flight (EndTxn held 400
// ms): (i) the commit of tx 1 with tx 2's records held behind it; (ii) the
// commit of a part of the transaction the bad row is in. The stop waits
// for the commit, commits what it held of ended transactions, and leaves
// the checkpoint just before the stopped transaction with a partial that
// counts what read_committed consumers see of it.
func TestPipelineStopWhileCommitInFlight(t *testing.T) {
	realTime(t)
	for _, shape := range []string{"ended-held", "partial-in-flight"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			s := newScript("mariadb")
			s.tx(s.insert("order", "1", 1))
			s.tx(s.insert("order", "2", 1))
			s.tx(s.insert("order", "1", 3), s.insert("order", "2", 2))
			s.tx(s.insert("order", "1", 1))
			spoil(s, s.eventIndex(3, 1), 1)
			h := newHarness(t, s, maxRecords(3))
			slowEndTxn(h, 400*time.Millisecond)
			a := h.start()
			switch shape {
			case "ended-held":
				a.feed(s.through(1)) // caught up: in flight
				a.feed(s.through(2)) // held
				a.feedAll()          // tx 3: 3 rows fill the batch with tx 2's: a part
			case "partial-in-flight":
				a.feed(s.through(2))
				time.Sleep(900 * time.Millisecond) // tx 1 and 2 committed
				a.feed(s.eventIndex(3, 0) + 1)     // 3 rows: a part, in flight
				a.feedAll()
			}
			err := a.wait()
			if !errors.Is(err, ErrBadRow) {
				t.Fatalf("%v, want ErrBadRow", err)
			}
			cp := h.load()
			t.Logf("checkpoint %q partial %+v events %d", cp.GTIDSet, cp.Partial, cp.Events)
			if cp.GTIDSet != s.set(2) || cp.Partial != nil && cp.Partial.GTID != s.gtid(3) {
				t.Fatalf("checkpoint %q partial %+v, want %q", cp.GTIDSet, cp.Partial, s.set(2))
			}
			var rows int64
			if cp.Partial != nil {
				rows = cp.Partial.Rows
			}
			if cp.Events != 2+rows {
				t.Errorf("checkpoint counts %d events, %d published", cp.Events, 2+rows)
			}
			h.verifyPublished(s.want[:2+rows])
			h.verifyNoOpenTransaction()
			if got := eventsTotal(t, h); got != float64(2+rows) {
				t.Errorf("outbox_relay_events_total %v, %d published", got, 2+rows)
			}
		})
	}
}
