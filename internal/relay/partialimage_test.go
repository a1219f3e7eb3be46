package relay

// Rows whose INSERT image lacks columns (binlog.Event.Absent): the loop
// stops at the transaction that would publish them, never before its fate
// is known.

import (
	"errors"
	"slices"
	"testing"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// absent marks the rows the script holds for XA transaction xid as logged
// without column event_type, as the reader hands on a partial image: no
// Rows, its rows in Image with the columns present only.
func absent(s *script, xid string) {
	for i := range s.events {
		if ev := &s.events[i]; ev.Kind == binlog.KindRows && ev.XID == xid {
			withoutEventType(ev)
		}
	}
}

// withoutEventType makes ev's rows a partial image lacking event_type.
func withoutEventType(ev *binlog.Event) {
	const col = 3 // event_type
	img := &binlog.PartialImage{Columns: []int{0, 1, 2, 4, 5}}
	for _, row := range ev.Rows {
		img.Rows = append(img.Rows, slices.Delete(slices.Clone(row), col, col+1))
	}
	ev.Absent, ev.Image, ev.Rows = []string{ev.Table.Columns[col]}, img, nil
}

// xaPartial is a script of a transaction (first), an XA transaction whose
// row lacks event_type rolled back, another (c,,1) prepared, a transaction
// (between, group betweenN), c,,1's XA COMMIT, and a last transaction.
type xaPartial struct {
	s                               *script
	first, between                  []outboxRow
	prepared, commit, beforePrepare string
	betweenN                        int
}

func newXAPartial(flavor string) xaPartial {
	s := newScript(flavor)
	x := xaPartial{s: s, first: s.insert("order", "1", 1)}
	s.tx(x.first)
	s.xaPrepare("r,,1", s.insert("order", "2", 1))
	absent(s, "r,,1")
	s.xaRollback("r,,1")
	x.beforePrepare = s.set(s.n)
	x.prepared = s.xaPrepare("c,,1", s.insert("order", "3", 1))
	absent(s, "c,,1")
	x.between = s.insert("order", "1", 1)
	s.tx(x.between)
	x.betweenN = s.n
	x.commit = s.xaCommit("c,,1")
	s.tx(s.insert("order", "1", 1))
	return x
}

// wantXAPartialStop checks that err is the partial image stop at commit,
// the XA COMMIT of c,,1 prepared at prepared, of its row without event_type.
func wantXAPartialStop(t *testing.T, err error, commit, prepared string) {
	t.Helper()
	var pe *binlog.PartialImageError
	if !errors.As(err, &pe) || pe.GTID != commit || pe.XID != "c,,1" || pe.PreparedAt != prepared ||
		!slices.Equal(pe.Absent, []string{"event_type"}) || pe.Table != "app.outbox" {
		t.Fatalf("loop returned %v; want the partial image stop at the XA COMMIT %s of c,,1 prepared at %s", err, commit, prepared)
	}
}

// An XA transaction whose rows were logged without all their columns holds
// nothing up while prepared, publishes nothing and stops nothing when rolled
// back, and stops the loop at its XA COMMIT, naming the commit, the XA
// transaction and its prepare, with the transactions before it published
// and none of its rows. The loop stopped at the prepare (the reader did),
// even of a transaction rolled back later.
func TestLoopPartialImageInAnXATransactionIsDecidedAtItsEnd(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		x := newXAPartial(flavor)
		h := newHarness(t, x.s, nil)
		a := h.start()
		a.feedAll()
		err := a.wait()
		wantXAPartialStop(t, err, x.commit, x.prepared)
		if !errclass.Fatal(err) || !errclass.StopsAtTransaction(err) {
			t.Fatalf("%v: fatal %v, stops at its transaction %v; want both", err, errclass.Fatal(err), errclass.StopsAtTransaction(err))
		}
		h.verifyPublished(slices.Concat(x.first, x.between))
	})
}

// A partial image late in a transaction larger than the batch stops the
// loop with the part published before it named (the checkpoint's partial),
// so that the way out does not publish those rows again.
func TestLoopPartialImageInASplitTransactionNamesThePublishedPart(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		s := newScript(flavor)
		first := s.insert("order", "1", 1)
		s.tx(first)
		whole := s.insert("order", "2", 5)
		gtid := s.tx(whole, s.insert("order", "2", 1))
		for i := range s.events {
			if ev := &s.events[i]; ev.Kind == binlog.KindRows && ev.GTID == gtid && len(ev.Rows) == 1 {
				withoutEventType(ev)
			}
		}
		h := newHarness(t, s, maxRecords(2))
		a := h.start()
		a.feedAll()
		err := a.wait()
		var pe *binlog.PartialImageError
		if !errors.As(err, &pe) || pe.GTID != gtid || pe.Published != 4 {
			t.Fatalf("loop returned %v; want the partial image stop at %s naming 4 rows published", err, gtid)
		}
		if cp := h.load(); cp.Partial == nil || cp.Partial.GTID != gtid || cp.Partial.Rows != pe.Published {
			t.Fatalf("checkpoint partial %+v; want the %d rows the stop names", cp.Partial, pe.Published)
		}
		h.verifyPublished(slices.Concat(first, whole[:4]))
	})
}

// An XA transaction whose only outbox rows are a partial image (handed on
// without Rows) is prepared, the relay restarts (SIGTERM) with
// the prepare behind its checkpoint, and the XA COMMIT comes after the
// restart: the checkpoint lists it as holding rows, so the restart reads
// again from before its prepare and stops at its XA COMMIT. It was listed
// with 0 rows, the restart did not read its prepare again, and the XA
// COMMIT published nothing and stopped nothing: the row was lost silently.
func TestLoopPartialImageInAnXATransactionStopsAtItsCommitAfterARestart(t *testing.T) {
	flavors(t, func(t *testing.T, flavor string) {
		x := newXAPartial(flavor)
		h := newHarness(t, x.s, nil)
		a := h.start()
		a.feed(x.s.through(x.betweenN))
		if err := a.term(); err != nil {
			t.Fatal(err)
		}
		if cp := h.load(); !cp.Replays() || cp.From() != x.beforePrepare {
			t.Fatalf("checkpoint after the prepare: %+v (xa %+v); want it to read again from %s, before the prepare %s",
				cp, cp.XA, x.beforePrepare, x.prepared)
		}
		a = h.start()
		a.feedAll()
		wantXAPartialStop(t, a.wait(), x.commit, x.prepared)
		h.verifyPublished(slices.Concat(x.first, x.between))
	})
}
