package relay

// XA transactions across restarts, replay, domains and partial commits:
// loop-level cases on the scripted harness (script_test.go).

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// An XA COMMIT read again after a restart, already published, is recognised
// as replayed, not stopped as unknown. The failure guarded against: two XA
// transactions with outbox rows prepared one after the other, the first
// committed first (the usual FIFO order of any XA workload), the relay
// restarted while the second is still prepared. The checkpoint's Resume is
// now before the second prepare, which is before the first one's XA COMMIT:
// the restart reads that XA COMMIT again, finds no entry for its xid (its
// prepare is before Resume) and stops with ErrUnknownXA, fatal, at every
// restart, although that commit was published before the restart (its GTID
// is in the checkpoint's set). commitXA looks the xid up before it asks
// replaying().
func TestLoopXACommittedInPrepareOrderThenRestart(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("a,,1", s.insert("order", "2", 1))
		s.xaPrepare("b,,1", s.insert("order", "3", 1))
		s.xaCommit("a,,1")
		s.tx(s.insert("order", "1", 1))
		s.xaCommit("b,,1")
		s.tx(s.insert("order", "1", 1))
		h := newHarness(t, s, nil)
		a := h.start()
		a.feed(s.through(5)) // a committed and published, b still prepared
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		cp := h.load()
		t.Logf("checkpoint: %s, resume %s, prepared %+v", cp.GTIDSet, *cp.XA.Resume, cp.XA.Prepared)
		a = h.start()
		a.feedAll()
		if err := a.term(); err != nil {
			t.Fatalf("restart with b prepared, a committed after b's prepare: %v (fatal: %v)", err, errclass.Fatal(err))
		}
		h.verify()
	})
}

// An xid used again after its first XA transaction committed keeps its
// incarnations apart across a restart. The failure guarded against: the
// same xid used again after its first XA transaction was committed (MySQL
// and MariaDB allow it; transaction managers whose counters restart, or
// applications using fixed xids, do it), while an older XA transaction with
// outbox rows is still prepared (an in-doubt transaction: the relay's
// Resume stays before it). After a restart the loop reads again from before
// the older prepare; the first incarnation's rows are added to the entry
// loaded from the checkpoint for the second one, and its XA COMMIT finds a
// row count that differs from the checkpoint's: ErrUnknownXA, fatal, at
// every restart: the relay stops for good although nothing is wrong.
func TestLoopXIDReusedAfterCommit(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("old,,1", s.insert("order", "9", 1)) // stays prepared for a while
		s.xaPrepare("x,,1", s.insert("order", "2", 1))   // first use of xid x: 1 row
		s.xaCommit("x,,1")
		s.xaPrepare("x,,1", s.insert("order", "3", 2)) // xid x again: 2 rows
		s.tx(s.insert("order", "1", 1))
		s.xaCommit("x,,1")
		s.xaCommit("old,,1")
		s.tx(s.insert("order", "1", 1))
		h := newHarness(t, s, nil)
		a := h.start()
		a.feed(s.through(6)) // both prepared, x's second use pending
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		cp := h.load()
		t.Logf("checkpoint: %s xa %+v", cp.GTIDSet, cp.XA)
		for range 2 {
			a = h.start()
			a.feedAll()
			if err := a.term(); err != nil {
				t.Fatalf("restart with xid reused after its commit, an older XA still prepared: %v (fatal: %v)", err, errclass.Fatal(err))
			}
		}
		h.verify()
	})
}

// MariaDB sessions with their own gtid_domain_id: transactions of two
// domains interleave, an XA transaction prepared in domain 1 stays pending
// while both domains move on. SIGTERM / crash after every event.
func TestLoopXAMultiDomain(t *testing.T) {
	build := func() *script {
		s := newScript("mariadb")
		d := &domains{s: s, set: newMDSet(), seq: map[uint32]uint64{}}
		d.tx(0, s.insert("order", "1", 1))
		d.tx(1, s.insert("order", "5", 1))
		d.xaPrepare(1, "x,,1", s.insert("order", "2", 2))
		d.tx(0, s.insert("order", "1", 1))
		d.tx(1, s.insert("order", "5", 1))
		d.tx(0, s.insert("order", "1", 2))
		d.xaPrepare(0, "y,,1", s.insert("order", "3", 1))
		d.tx(1)
		d.xaCommit(0, "x,,1")
		d.tx(1, s.insert("order", "5", 1))
		d.xaCommit(1, "y,,1")
		d.tx(0, s.insert("order", "1", 1))
		return s
	}
	for _, stop := range []string{"term", "crash"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, build(), maxRecords(2))
			if stop == "term" {
				h.stopEvery((*attempt).term, nil)
			} else {
				h.stopEvery((*attempt).crash, errCrash)
			}
			h.verifyPublished(h.s.want)
			h.verifyNoOpenTransaction()
		})
	}
}

// domains appends MariaDB groups of chosen domains to a script, with the
// GTID set go-mysql stamps (one position per domain).
type domains struct {
	s   *script
	set *mysql.MariadbGTIDSet
	seq map[uint32]uint64
}

func (d *domains) group(domain uint32, kind binlog.Kind, xid string, rows [][]outboxRow) {
	s := d.s
	s.n++
	d.seq[domain]++
	g := mysql.MariadbGTID{DomainID: domain, ServerID: 1, SequenceNumber: d.seq[domain]}
	_ = d.set.AddSet(&g)
	gtid := strconv.Itoa(int(domain)) + "-1-" + strconv.FormatUint(d.seq[domain], 10)
	at := s.start.Add(time.Duration(s.n) * time.Second)
	for _, rs := range rows {
		ev := binlog.Event{Kind: binlog.KindRows, GTID: gtid, XID: xid, Table: outboxTable, Op: binlog.OpInsert, Time: at, Size: 100}
		for _, r := range rs {
			ev.Rows = append(ev.Rows, []any{r.id, r.aggType, r.aggID, "created", []byte(payload(r.id)), at.Format(time.DateTime)})
		}
		s.events = append(s.events, ev)
	}
	s.events = append(s.events, binlog.Event{Kind: kind, GTID: gtid, XID: xid, Set: d.set.Clone(), Schema: outboxSchema, Time: at, Size: 50})
	s.ends = append(s.ends, len(s.events)-1)
}

func (d *domains) tx(domain uint32, rows ...[]outboxRow) {
	for _, r := range rows {
		d.s.want = append(d.s.want, r...)
	}
	d.group(domain, binlog.KindCommit, "", rows)
}

func (d *domains) xaPrepare(domain uint32, xid string, rows ...[]outboxRow) {
	d.s.held[xid] = slices.Concat(rows...)
	d.group(domain, binlog.KindPrepare, xid, rows)
}

func (d *domains) xaCommit(domain uint32, xid string) {
	d.s.want = append(d.s.want, d.s.held[xid]...)
	delete(d.s.held, xid)
	d.group(domain, binlog.KindCommit, xid, nil)
}

// An XA transaction with outbox rows stays prepared (in doubt) while a big
// transaction is published in parts; crash after every event.
func TestLoopXAPendingAcrossPartialCommits(t *testing.T) {
	matrix(t, func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("x,,1", s.insert("order", "2", 3))
		s.tx(s.insert("order", "1", 3), s.insert("order", "4", 2))
		s.tx()
		s.xaCommit("x,,1")
		s.tx(s.insert("order", "1", 1))
		return s
	}, maxRecords(2))
}

var _ = errors.Is

func newMDSet() *mysql.MariadbGTIDSet {
	return &mysql.MariadbGTIDSet{Sets: map[uint32]*mysql.MariadbGTID{}}
}

// XA: the rows of a prepared transaction are held and published once, at
// its XA COMMIT's position (after the transactions committed in between).
func TestLoopXACommit(t *testing.T) {
	matrix(t, func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("7831,,1", s.insert("order", "1", 2), s.insert("customer", "3", 1))
		s.tx(s.insert("order", "1", 1))
		s.tx()
		s.xaCommit("7831,,1")
		s.tx(s.insert("order", "1", 1))
		return s
	}, nil)
}

// XA ROLLBACK after XA PREPARE: nothing of it is published.
func TestLoopXARollback(t *testing.T) {
	matrix(t, func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("7831,,1", s.insert("order", "1", 2))
		s.xaPrepare("7832,,1", s.insert("order", "1", 1))
		s.tx(s.insert("order", "1", 1))
		s.xaRollback("7831,,1")
		s.xaCommit("7832,,1")
		s.tx(s.insert("order", "1", 1))
		return s
	}, nil)
}

// XA prepared, the relay stopped with transactions after the prepare
// published: the checkpoint says where to read again (Resume); the restart
// reads from there, publishes nothing twice, and the XA rows exactly once
// at their commit.
func TestLoopXAPreparedAcrossRestart(t *testing.T) {
	build := func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("7831,,1", s.insert("order", "1", 2))
		s.tx(s.insert("order", "1", 1))
		s.tx()
		s.tx(s.insert("order", "2", 1))
		s.xaCommit("7831,,1")
		s.tx(s.insert("order", "1", 1))
		return s
	}
	matrix(t, build, nil)

	flavors(t, func(t *testing.T, flavor string) {
		s := build(flavor)
		h := newHarness(t, s, nil)
		a := h.start()
		a.feed(s.through(4))
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		cp := h.load()
		if cp.GTIDSet != s.set(4) || !cp.Replays() || cp.From() != s.set(1) || len(cp.XA.Prepared) != 1 ||
			cp.XA.Prepared[0] != (checkpoint.PreparedXA{XID: "7831,,1", GTID: s.gtid(2), Rows: 2}) {
			t.Fatalf("checkpoint after the prepare: %+v (xa %+v), want gtid_set %s, resume %s, 7831,,1 prepared at %s with 2 rows",
				cp, cp.XA, s.set(4), s.set(1), s.gtid(2))
		}
		a = h.start()
		if a.from != s.set(1) {
			t.Fatalf("restart reads from %q, want %q (before the prepare)", a.from, s.set(1))
		}
		a.finish()
		h.verify()
	})
}

// Several XA transactions prepared, interleaved with others, committed in
// the reverse order: each aggregate gets its rows in commit order.
func TestLoopXAInterleavedCommittedInReverse(t *testing.T) {
	matrix(t, func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("x1", s.insert("order", "1", 2))
		s.xaPrepare("x2", s.insert("order", "1", 1), s.insert("customer", "2", 1))
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("x3", s.insert("order", "1", 2))
		s.tx()
		s.xaCommit("x3")
		s.xaCommit("x2")
		s.tx(s.insert("customer", "2", 1))
		s.xaCommit("x1")
		s.tx(s.insert("order", "1", 1))
		return s
	}, nil)
}

// The same, committed in the order they were prepared: after a restart the
// loop reads again from before the earliest prepared transaction still
// pending, and meets on the way the XA COMMIT of one prepared before that
// position and already published.
func TestLoopXAInterleavedCommittedInPrepareOrder(t *testing.T) {
	matrix(t, func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("x1", s.insert("order", "1", 2))
		s.xaPrepare("x2", s.insert("order", "1", 1), s.insert("customer", "2", 1))
		s.tx(s.insert("order", "1", 1))
		s.xaCommit("x1")
		s.tx(s.insert("customer", "2", 1))
		s.xaCommit("x2")
		s.tx(s.insert("order", "1", 1))
		return s
	}, nil)
}

// XA COMMIT of a transaction whose prepare the relay never read: it cannot
// publish its rows, so it stops (fatal), at every restart, and the
// checkpoint stays before it.
func TestLoopXACommitOfUnknownXID(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaCommit("7831,,1")
		s.tx(s.insert("order", "1", 1))
		h := newHarness(t, s, nil)
		for range 2 {
			a := h.start()
			a.feedAll()
			err := a.wait()
			if !errors.Is(err, ErrUnknownXA) || !errclass.Fatal(err) {
				t.Fatalf("XA COMMIT of an unknown xid: %v, want fatal ErrUnknownXA", err)
			}
		}
		if cp := h.load(); cp.GTIDSet != s.set(1) {
			t.Errorf("checkpoint at %q, want %q (before the XA COMMIT)", cp.GTIDSet, s.set(1))
		}
		h.verifyPublished(s.want[:1])
		h.verifyHistory()
		h.verifyNoOpenTransaction()
	})
}

// XA COMMIT ONE PHASE: the rows are published at once; without rows there
// is nothing to publish (and no unknown xid). One larger than max_records
// is committed in parts like any transaction.
func TestLoopXAOnePhase(t *testing.T) {
	matrix(t, func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaOnePhase("x1", s.insert("order", "1", 2))
		s.xaOnePhase("x2")
		s.tx(s.insert("order", "1", 1))
		s.xaOnePhase("x3", s.insert("order", "1", 3), s.insert("customer", "2", 2))
		s.tx(s.insert("order", "1", 1))
		return s
	}, maxRecords(3))
}

// An XA COMMIT whose held rows outnumber max_records is committed in parts,
// like any large transaction. A crash after such a part (before the XA
// COMMIT's position is committed) must resume it.
func TestLoopXACommitSplitByMaxRecords(t *testing.T) {
	build := func(flavor string) *script {
		s := newScript(flavor)
		s.tx(s.insert("order", "1", 1))
		s.xaPrepare("7831,,1", s.insert("order", "1", 2), s.insert("order", "2", 2))
		s.xaCommit("7831,,1")
		s.tx(s.insert("order", "1", 1))
		return s
	}
	flavors(t, func(t *testing.T, flavor string) {
		s := build(flavor)
		h := newHarness(t, s, maxRecords(3))
		h.batch = 0
		a := h.start()
		a.feed(s.through(1)) // one batch: committed
		// One batch: the XA COMMIT's 4 rows (a part of 3 committed, 1 more
		// produced) and the next transaction's row, not its commit.
		a.feed(s.through(3) + 1)
		if err := a.crash(); !errors.Is(err, errCrash) {
			t.Fatal(err)
		}
		if cp := h.load(); cp.GTIDSet != s.set(2) || cp.Partial == nil || *cp.Partial != (checkpoint.Partial{GTID: s.gtid(3), Rows: 3}) {
			t.Fatalf("checkpoint after the crash %+v partial %+v, want 3 rows of the XA COMMIT %s published", cp, cp.Partial, s.gtid(3))
		}
		a = h.start()
		a.feedAll()
		if err := a.term(); err != nil {
			t.Fatalf("restart after a crash inside the XA COMMIT's publication: %v", err)
		}
		h.verify()
	})
	matrix(t, build, maxRecords(3))
}

// A relay started from an empty GTID set (source.start: earliest on a new
// server) whose first transaction is a prepared XA transaction: a restart
// before its commit must read it again.
func TestLoopXAPreparedAtEmptyPosition(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		s.xaPrepare("7831,,1", s.insert("order", "1", 2))
		s.tx(s.insert("order", "1", 1))
		s.xaCommit("7831,,1")
		h := newHarness(t, s, nil)
		a := h.start()
		a.feed(s.through(2))
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		cp := h.load()
		if !cp.Replays() || cp.From() != "" {
			t.Fatalf("checkpoint %+v: a restart reads from %q, want the empty set (before the prepare)", cp, cp.From())
		}
		a = h.start()
		a.feedAll()
		if err := a.term(); err != nil {
			t.Fatalf("restart before the XA COMMIT of the first transaction: %v", err)
		}
		h.verify()
	})
}
