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
// without column event_type, as the reader reports a partial image.
func absent(s *script, xid string) {
	for i := range s.events {
		if ev := &s.events[i]; ev.Kind == binlog.KindRows && ev.XID == xid {
			ev.Absent = []string{"event_type"}
		}
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
		s := newScript(flavor)
		first := s.insert("order", "1", 1)
		s.tx(first)
		s.xaPrepare("r,,1", s.insert("order", "2", 1))
		absent(s, "r,,1")
		s.xaRollback("r,,1")
		prepared := s.xaPrepare("c,,1", s.insert("order", "3", 1))
		absent(s, "c,,1")
		between := s.insert("order", "1", 1)
		s.tx(between)
		commit := s.xaCommit("c,,1")
		s.tx(s.insert("order", "1", 1))
		h := newHarness(t, s, nil)
		a := h.start()
		a.feedAll()
		err := a.wait()
		var pe *binlog.PartialImageError
		if !errors.As(err, &pe) || pe.GTID != commit || pe.XID != "c,,1" || pe.PreparedAt != prepared ||
			!slices.Equal(pe.Absent, []string{"event_type"}) || pe.Table != "app.outbox" {
			t.Fatalf("loop returned %v; want the partial image stop at the XA COMMIT %s of c,,1 prepared at %s", err, commit, prepared)
		}
		if !errclass.Fatal(err) || !errclass.StopsAtTransaction(err) {
			t.Fatalf("%v: fatal %v, stops at its transaction %v; want both", err, errclass.Fatal(err), errclass.StopsAtTransaction(err))
		}
		h.verifyPublished(slices.Concat(first, between))
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
				ev.Absent = []string{"payload"}
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
