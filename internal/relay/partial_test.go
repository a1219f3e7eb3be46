package relay

// Partial commits of a source transaction split by the batch bounds (its
// records kept apart in loop.pending until it ends; loop.stop commits what
// ended before a stop at a transaction; SIGTERM drops the open
// transaction's records; the partial moves only at flush time): cases on
// the scripted harness (script_test.go).

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A transaction larger than the batch (max_records 3: 9 rows in three rows
// events) stops the relay at a bad row after one or more of its parts were
// committed. The checkpoint must stay before the transaction with a
// partial that counts exactly the rows a read_committed consumer sees (the
// pending rows before the bad one are dropped, never counted); a restart
// must reach the same stop and publish nothing more; and `checkpoint skip`
// of that GTID (which drops its partial) must let the relay go on with the
// next transaction. Same with SIGTERM and a crash at the same place
// instead of the bad row: the restart then publishes everything once.
func TestPartialCommitsThenStopKeepsPartial(t *testing.T) {
	for _, batch := range []int{1, 0} {
		for _, how := range []string{"bad-row", "sigterm", "crash"} {
			t.Run(how+"/batch="+strconv.Itoa(batch), func(t *testing.T) {
				t.Parallel()
				s := newScript("mariadb")
				s.tx(s.insert("order", "1", 1))
				s.tx(s.insert("order", "1", 3), s.insert("order", "2", 3), s.insert("order", "1", 3))
				s.tx(s.insert("order", "1", 1))
				var bad string
				if how == "bad-row" {
					bad = spoil(s, s.eventIndex(2, 2), 1) // the 8th row of tx 2
				}
				h := newHarness(t, s, maxRecords(3))
				h.batch = batch
				a := h.start()
				var err error
				switch how {
				case "bad-row":
					a.feedAll()
					err = a.wait()
					if !errors.Is(err, ErrBadRow) {
						t.Fatalf("loop returned %v, want ErrBadRow for %s", err, bad)
					}
				case "sigterm":
					a.feed(s.eventIndex(2, 2) + 1) // all three rows events, not the commit
					err = a.term()
				case "crash":
					a.feed(s.eventIndex(2, 2) + 1)
					err = a.crash()
					if errors.Is(err, errCrash) {
						err = nil
					}
				}
				if err != nil && how != "bad-row" {
					t.Fatal(err)
				}
				cp := h.load()
				t.Logf("%s: %v; checkpoint %q partial %+v events %d", how, err, cp.GTIDSet, cp.Partial, cp.Events)
				if cp.GTIDSet != s.set(1) || cp.Partial == nil || cp.Partial.GTID != s.gtid(2) {
					t.Fatalf("checkpoint %q partial %+v, want %q with a partial of %s", cp.GTIDSet, cp.Partial, s.set(1), s.gtid(2))
				}
				published := 1 + int(cp.Partial.Rows)
				if cp.Events != int64(published) {
					t.Errorf("checkpoint counts %d events, %d published", cp.Events, published)
				}
				h.verifyPublished(s.want[:published])
				h.verifyNoOpenTransaction()
				if how != "bad-row" {
					h.start().finish()
					h.verify()
					return
				}
				// The restart reaches the same stop; nothing more goes out.
				b := h.start()
				b.feedAll()
				if err := b.wait(); !errors.Is(err, ErrBadRow) {
					t.Fatalf("restart: %v, want the same ErrBadRow", err)
				}
				again := h.load()
				if again.GTIDSet != cp.GTIDSet || *again.Partial != *cp.Partial {
					t.Errorf("restart moved the checkpoint: %q %+v, was %q %+v", again.GTIDSet, again.Partial, cp.GTIDSet, cp.Partial)
				}
				h.verifyPublished(s.want[:published])
				// checkpoint skip --gtid <tx 2>: the rest of tx 2 is the
				// operator's; tx 3 is published.
				next := *again
				next.GTIDSet, next.Partial, next.Time = s.set(2), nil, time.Now().UTC()
				h.writeCheckpoint(&next)
				h.start().finish()
				var want []outboxRow
				want = append(want, s.want[:published]...)
				want = append(want, s.want[len(s.want)-1])
				h.verifyPublished(want)
				h.verifyNoOpenTransaction()
				if cp := h.load(); cp.GTIDSet != s.end() || cp.Partial != nil {
					t.Errorf("after skip: checkpoint %q partial %+v", cp.GTIDSet, cp.Partial)
				}
			})
		}
	}
}

// A bad row sent to the dead-letter topic is a record of the transaction
// like any other: it waits in pending with the rest of the transaction,
// and SIGTERM (or a crash) before the transaction's end drops it; the
// restart routes it again. The dead-letter topic must end up with it once
// and outbox_relay_events_total must count what was committed, per
// outcome, with nothing counted for the records dropped from pending.
func TestPartialDeadLetterInPendingAcrossStops(t *testing.T) {
	for _, stop := range []string{"term", "crash"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			s := newScript("mariadb")
			s.tx(s.insert("order", "1", 1))
			s.tx(s.insert("order", "1", 2), s.insert("order", "2", 2), s.insert("order", "1", 1))
			s.tx(s.insert("order", "2", 1))
			bad := spoil(s, s.eventIndex(2, 1), 0)
			h := newHarness(t, s, func(c *config.Config) {
				c.Router.OnError = "dead-letter"
				c.Router.DeadLetterTopic = c.Router.TopicPrefix + "dead"
			})
			h.stopEvery(func(a *attempt) error {
				if stop == "term" {
					return a.term()
				}
				if err := a.crash(); !errors.Is(err, errCrash) {
					return err
				}
				return nil
			}, nil)
			var recs []*kgo.Record
			for _, r := range h.consume() {
				if r.Topic != h.cfg.Router.DeadLetterTopic {
					recs = append(recs, r)
				}
			}
			dead := h.topicIDs(h.cfg.Router.DeadLetterTopic)
			if !slices.Equal(dead, []string{bad}) {
				t.Errorf("dead-letter topic holds %v, want [%s] once", dead, bad)
			}
			seen := map[string]int{}
			for _, r := range recs {
				seen[header(r, "id")]++
			}
			for _, w := range s.want {
				if seen[w.id] != 1 {
					t.Errorf("row %s published %d times", w.id, seen[w.id])
				}
			}
			if got, want := eventsTotal(t, h), float64(len(s.want)+1); got != want {
				t.Errorf("outbox_relay_events_total %v, %v records committed (checkpoint counts %d)", got, want, h.load().Events)
			}
			if cp := h.load(); cp.Events != int64(len(s.want)+1) {
				t.Errorf("checkpoint counts %d events, %d committed", cp.Events, len(s.want)+1)
			}
		})
	}
}

// An XA COMMIT whose held rows outnumber the batch (max_records 2, five
// rows) is published in parts under the XA COMMIT group's GTID; its fifth
// row is bad. The stop keeps the checkpoint before the XA COMMIT, with the
// XA transaction still listed (Resume before its prepare) and the partial
// counting the rows out: 2 (a part is committed at the row after a full
// one, so rows 3-4 wait for row 5, which stops the relay). A restart reads again from before the prepare,
// collects the rows, skips those published and stops at the same row (not
// at a row-count mismatch, which would also be fatal but name another
// recovery); `checkpoint skip` of the XA COMMIT ends it.
func TestPartialXACommitSplitThenBadRow(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("x,,1", s.insert("order", "2", 3), s.insert("order", "3", 2))
		s.tx(s.insert("order", "1", 1))
		s.xaCommit("x,,1")
		s.tx(s.insert("order", "1", 1))
		bad := spoil(s, s.eventIndex(2, 1), 1) // the prepare's 5th row
		h := newHarness(t, s, maxRecords(2))
		var first *checkpoint.Checkpoint
		for round := range 2 {
			a := h.start()
			a.feedAll()
			err := a.wait()
			if !errors.Is(err, ErrBadRow) {
				t.Fatalf("round %d: %v, want ErrBadRow for %s", round, err, bad)
			}
			cp := h.load()
			t.Logf("round %d: %v; checkpoint %q partial %+v xa %+v", round, err, cp.GTIDSet, cp.Partial, cp.XA)
			if cp.GTIDSet != s.set(3) || cp.Partial == nil || cp.Partial.GTID != s.gtid(4) || cp.Partial.Rows != 2 {
				t.Fatalf("round %d: checkpoint %q partial %+v, want %q with 2 rows of %s", round, cp.GTIDSet, cp.Partial, s.set(3), s.gtid(4))
			}
			if round == 1 && *cp.Partial != *first.Partial {
				t.Errorf("the restart moved the partial: %+v, was %+v", cp.Partial, first.Partial)
			}
			if round == 0 {
				first = cp
			}
			if !cp.Replays() || len(cp.XA.Prepared) != 1 {
				t.Fatalf("round %d: XA state %+v: the XA transaction must stay listed until its last row is out", round, cp.XA)
			}
			// tx 1, tx 3 and the XA's rows the partial counts.
			h.verifyPublished(s.want[:2+first.Partial.Rows])
		}
		cp := h.load()
		next := *cp
		set, _ := binlog.ParseSet(flavor, cp.GTIDSet)
		_ = set.Update(s.gtid(4))
		next.GTIDSet, next.Partial, next.Time = set.String(), nil, time.Now().UTC()
		h.writeCheckpoint(&next)
		h.start().finish()
		// The XA's rows after the partial are the operator's (skip).
		h.verifyPublished(slices.Concat(s.want[:2+first.Partial.Rows], s.want[len(s.want)-1:]))
		if cp := h.load(); cp.GTIDSet != s.end() || cp.Partial != nil || cp.XA != nil {
			t.Errorf("after skip: checkpoint %q partial %+v xa %+v", cp.GTIDSet, cp.Partial, cp.XA)
		}
		h.verifyNoOpenTransaction()
	})
}

// A split transaction's partial survives only for the next transaction
// read: the checkpoint names it (partial {G, n}), and the restart skips
// G's first n rows only if G is the first outbox transaction it reads. A
// source host whose binlog orders independent transactions differently (a
// MariaDB replica applying two domains in parallel, the relay failing over
// to it through source.hosts; or a MySQL replica with a multi-threaded
// applier and replica_preserve_commit_order off) sends another
// transaction first. With and without outbox rows in that transaction,
// G's partial must be kept (its flush at its commit must not overwrite
// l.partial), or G's first part is published a second time.
func TestPartialKeptWhenAnotherTransactionComesFirst(t *testing.T) {
	for _, between := range []bool{true, false} {
		t.Run(map[bool]string{true: "with-outbox-rows", false: "other-tables-only"}[between], func(t *testing.T) {
			s := newScript("mariadb")
			d := &domains{s: s, set: newMDSet(), seq: map[uint32]uint64{}}
			d.tx(0, s.insert("order", "1", 1))                            // 0-1-1
			d.tx(1, s.insert("customer", "9", 1))                         // 1-1-1
			d.tx(0, s.insert("order", "1", 2), s.insert("order", "1", 2)) // 0-1-2: split at max_records 2
			if between {
				d.tx(1, s.insert("customer", "9", 1)) // 1-1-2
			} else {
				d.tx(1)
			}
			d.tx(0, s.insert("order", "1", 1)) // 0-1-3
			h := newHarness(t, s, maxRecords(2))
			a := h.start()
			a.feed(s.eventIndex(3, 1) + 1) // 0-1-2's second rows event: a part committed at its first row
			h.waitCheckpoint("partial", func(cp *checkpoint.Checkpoint) bool { return cp.Partial != nil })
			if err := a.crash(); !errors.Is(err, errCrash) {
				t.Fatal(err)
			}
			cp := h.load()
			t.Logf("checkpoint %q partial %+v", cp.GTIDSet, cp.Partial)
			// The relay fails over to a server that logged 1-1-2 before 0-1-2.
			h.s = reorder(s, []int{1, 2, 4, 3, 5})
			h.start().finish()
			h.verifyPublished(s.want)
			h.verifyNoOpenTransaction()
		})
	}
}

// A source transaction that fits in a batch is not split because ended,
// uncommitted transactions fill the batch: they are committed without it.
// The failure guarded against: a source transaction that fits in a batch (2
// rows, max_records 4) read right after ended transactions that are not
// committed yet (3 rows, one hand-off: the reader has not caught up at
// their commit) is split anyway: batchFull counts the open batch and
// pending together, so at its first row flushPending moves it into the
// batch and startCommit commits it with a partial. Nothing forces that:
// pending is kept apart precisely so that the ended transactions can be
// committed without it. The consequences: (i) a read_committed consumer
// sees a transaction that is not larger than kafka.batch.max_records in two
// Kafka transactions (README: only a transaction larger than max_records is
// committed in parts), which in a catch-up happens at nearly every batch
// boundary; (ii) a stop at a bad row in it (here its 2nd row) publishes
// part of the transaction it stops on ("nothing after the transaction is
// published"; the operator's `checkpoint skip --gtid` must then drop a
// partial and the rows after it are to be published by hand), although the
// commit of what ended before it could have left it whole.
func TestPartialSmallTransactionNotSplitAtBatchBoundary(t *testing.T) {
	for _, bad := range []bool{false, true} {
		t.Run(map[bool]string{false: "ends", true: "bad-row-stops"}[bad], func(t *testing.T) {
			t.Parallel()
			s := newScript("mariadb")
			s.tx(s.insert("order", "1", 3))
			s.tx(s.insert("order", "2", 1), s.insert("order", "2", 1))
			s.tx(s.insert("order", "1", 1))
			var badID string
			if bad {
				badID = spoil(s, s.eventIndex(2, 1), 0)
			}
			h := newHarness(t, s, maxRecords(4))
			h.batch = 0 // catch-up: one hand-off
			a := h.start()
			a.feedAll()
			var err error
			if bad {
				err = a.wait()
				if !errors.Is(err, ErrBadRow) {
					t.Fatalf("%v, want ErrBadRow for %s", err, badID)
				}
			} else if err = a.term(); err != nil {
				t.Fatal(err)
			}
			for i, cp := range h.history() {
				if cp.Partial != nil {
					t.Errorf("checkpoint %d: %q partial %+v: the 2-row transaction %s (max_records 4) was committed in parts",
						i, cp.GTIDSet, *cp.Partial, s.gtid(2))
				}
			}
			if bad {
				cp := h.load()
				// Only tx 1 is published: nothing of the transaction stopped on.
				if cp.GTIDSet != s.set(1) || cp.Partial != nil {
					t.Errorf("stop at %s: checkpoint %q partial %+v, want %q and no partial", s.gtid(2), cp.GTIDSet, cp.Partial, s.set(1))
				}
				for _, r := range h.consume() {
					if id := header(r, "id"); id == s.want[3].id {
						t.Errorf("row %s of the transaction the relay stopped on (%s) is visible to read_committed consumers", id, s.gtid(2))
					}
				}
				return
			}
			h.verify()
		})
	}
}

// The delete-after-insert pattern (INSERT the outbox rows, DELETE them in
// the same transaction) with router.invalid_op fatal, in a transaction
// split by max_records 2, SIGTERM and crash after every event: a restart
// inside the transaction skips the published rows (partial) but must still
// count them as inserted, or the DELETE is taken for an invalid operation
// and the relay stops for good. A fatal UPDATE after a committed part stops
// with the checkpoint before the transaction and the partial counting what
// went out.
func TestPartialDeleteAfterInsertAcrossPartials(t *testing.T) {
	build := func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 2), s.insert("order", "2", 2), s.insert("order", "1", 1))
		deleteLast(s, 5)
		s.tx(s.insert("order", "2", 1))
		return s
	}
	matrix(t, build, func(c *config.Config) {
		c.Kafka.Batch.MaxRecords = 2
		c.Router.InvalidOp = config.InvalidOpFatal
	})
	t.Run("update-after-part", func(t *testing.T) {
		t.Parallel()
		s := newScript("mariadb")
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 3), s.insert("order", "2", 1))
		end := s.ends[1]
		s.events[end-1].Op = binlog.OpUpdate // the 4th row is an UPDATE
		s.want = slices.DeleteFunc(s.want, func(r outboxRow) bool { return r.id == "e5" })
		s.tx(s.insert("order", "2", 1))
		h := newHarness(t, s, func(c *config.Config) {
			c.Kafka.Batch.MaxRecords = 2
			c.Router.InvalidOp = config.InvalidOpFatal
		})
		for range 2 {
			a := h.start()
			a.feedAll()
			if err := a.wait(); !errors.Is(err, ErrInvalidOp) {
				t.Fatalf("%v, want ErrInvalidOp", err)
			}
			cp := h.load()
			t.Logf("checkpoint %q partial %+v events %d", cp.GTIDSet, cp.Partial, cp.Events)
			if cp.GTIDSet != s.set(1) || cp.Partial == nil || cp.Partial.GTID != s.gtid(2) || cp.Events != 1+cp.Partial.Rows {
				t.Fatalf("checkpoint %q partial %+v events %d", cp.GTIDSet, cp.Partial, cp.Events)
			}
			h.verifyPublished(s.want[:cp.Events])
		}
	})
}

// A prepared XA transaction with outbox rows (the checkpoint resumes
// before it) and a transaction split by max_records that then stops on a
// bad row: the stop's checkpoint keeps both the XA state and the partial;
// every restart reads again from before the prepare (replaying, nothing
// republished), skips the published part and stops at the same row,
// writing no checkpoint that moves anything.
func TestPartialStopInSplitTransactionWhileXAPrepared(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("x,,1", s.insert("order", "3", 2))
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 2), s.insert("order", "2", 2), s.insert("order", "1", 2))
		s.xaCommit("x,,1")
		spoil(s, s.eventIndex(4, 2), 0)
		h := newHarness(t, s, maxRecords(2))
		var first *checkpoint.Checkpoint
		for round := range 3 {
			h.batch = round % 2
			a := h.start()
			a.feedAll()
			if err := a.wait(); !errors.Is(err, ErrBadRow) {
				t.Fatalf("round %d: %v, want ErrBadRow", round, err)
			}
			cp := h.load()
			t.Logf("round %d: checkpoint %q partial %+v events %d xa %+v", round, cp.GTIDSet, cp.Partial, cp.Events, cp.XA)
			if cp.GTIDSet != s.set(3) || cp.Partial == nil || cp.Partial.GTID != s.gtid(4) || !cp.Replays() {
				t.Fatalf("round %d: checkpoint %q partial %+v xa %+v", round, cp.GTIDSet, cp.Partial, cp.XA)
			}
			if first == nil {
				first = cp
			} else if *cp.Partial != *first.Partial || cp.Events != first.Events {
				t.Errorf("round %d: partial %+v events %d, first stop %+v %d", round, cp.Partial, cp.Events, first.Partial, first.Events)
			}
			h.verifyPublished(s.want[:cp.Events])
		}
		h.verifyHistory()
	})
}

// A row of a transaction that then rolls back is never published, also when
// it reaches the batch bound together with ended transactions. The failure
// guarded against: the same split at a batch boundary publishes a row of a
// transaction that then rolls back. MySQL logs a transaction that changed a
// non-transactional (MyISAM) table as it ran, outbox rows first; a ROLLBACK
// at its end makes the reader stop with ErrRolledBackRows (README: "outbox
// rows rolled back inside a logged transaction", the rows "were undone").
// Pending is what keeps such rows out of Kafka until the reader has seen
// the end. Here the ended tx 1 (3 rows, not yet committed: one hand-off)
// and the undone row reach max_records 4 together: the row is flushed and
// committed as a part before the ROLLBACK is read. A read_committed
// consumer sees an event of a rolled-back transaction (an invented event),
// and the checkpoint's partial counts it.
func TestPartialRolledBackRowNotPublishedAtBatchBoundary(t *testing.T) {
	s := newScript("mysql")
	s.tx(s.insert("order", "1", 3))
	s.tx(s.insert("order", "2", 1)) // undone by ROLLBACK: the reader stops at its end
	undone := s.want[3].id
	s.want = s.want[:3]
	h := newHarness(t, s, maxRecords(4))
	h.batch = 0
	a := h.start()
	a.feed(s.through(2) - 1) // tx 1 and the undone row, not an end for tx 2
	a.readErr <- fmt.Errorf("%w: transaction %s logged 1 outbox rows and then ROLLBACK", binlog.ErrRolledBackRows, s.gtid(2))
	err := a.wait()
	if !errors.Is(err, binlog.ErrRolledBackRows) {
		t.Fatalf("%v, want ErrRolledBackRows", err)
	}
	cp := h.load()
	t.Logf("checkpoint %q partial %+v", cp.GTIDSet, cp.Partial)
	for _, r := range h.consume() {
		if header(r, "id") == undone {
			t.Errorf("row %s of rolled-back transaction %s is visible to read_committed consumers (checkpoint %q, partial %+v)",
				undone, s.gtid(2), cp.GTIDSet, cp.Partial)
		}
	}
	if cp.GTIDSet != s.set(1) || cp.Partial != nil {
		t.Errorf("checkpoint %q partial %+v: want %q, nothing of %s", cp.GTIDSet, cp.Partial, s.set(1), s.gtid(2))
	}
}

// A source transaction of exactly kafka.batch.max_records rows fits one
// batch: it is not committed in parts. When the relay then stops inside it
// (a statement-logged change after its outbox rows), none of its rows is
// visible and the checkpoint holds no partial: `checkpoint skip --gtid`
// passes over the whole transaction, and publishing it by hand duplicates
// nothing. One row more, and it is split at the bound.
func TestPartialExactlyMaxRecordsStaysWhole(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		const bound = 3
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", bound-1), s.insert("order", "2", 1)) // exactly the bound, in two rows events
		h := newHarness(t, s, maxRecords(bound))
		a := h.start()
		a.feed(s.through(1))
		a.feed(s.through(2) - 1) // tx 2's rows, not its commit
		a.readErr <- fmt.Errorf("%w: gtid %s", binlog.ErrStatementLogged, s.gtid(2))
		err := a.wait()
		if !errors.Is(err, binlog.ErrStatementLogged) {
			t.Fatalf("stop: %v, want the statement-logged stop", err)
		}
		cp := h.load()
		if cp.GTIDSet != s.set(1) || cp.Partial != nil {
			t.Errorf("checkpoint %q partial %+v at the stop inside a transaction of exactly max_records rows; want %q, none partial", cp.GTIDSet, cp.Partial, s.set(1))
		}
		h.verifyPublished(s.want[:1])
		for i, c := range h.history() {
			if c.Partial != nil {
				t.Errorf("checkpoint %d has a partial %+v: a transaction of exactly max_records rows was split", i, c.Partial)
			}
		}

		// Without a stop: a transaction of exactly the bound commits with no
		// partial in any checkpoint; one of a row over it is split at the
		// bound.
		s2 := newScript(flavor)
		s2.tx(s2.insert("order", "1", bound))
		s2.tx(s2.insert("order", "1", bound+1))
		h2 := newHarness(t, s2, maxRecords(bound))
		b := h2.start()
		b.feed(s2.through(1))
		h2.waitCheckpoint("tx 1", func(cp *checkpoint.Checkpoint) bool { return cp.GTIDSet == s2.set(1) })
		for i, c := range h2.history() {
			if c.Partial != nil {
				t.Errorf("checkpoint %d has a partial %+v after a transaction of exactly max_records rows", i, c.Partial)
			}
		}
		b.feed(s2.through(2) - 1)
		cp = h2.waitCheckpoint("a part of tx 2", func(cp *checkpoint.Checkpoint) bool { return cp.Partial != nil })
		if *cp.Partial != (checkpoint.Partial{GTID: s2.gtid(2), Rows: bound}) {
			t.Errorf("partial %+v, want %d rows of %s", cp.Partial, bound, s2.gtid(2))
		}
		b.finish()
		h2.verify()
	})
}
