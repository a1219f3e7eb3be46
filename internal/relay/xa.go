package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/schema"
)

// ErrUnknownXA: XA COMMIT of a transaction whose XA PREPARE the relay has
// not read (it precedes the relay's first start position), so its outbox
// rows, if any, cannot be published. Fatal.
var ErrUnknownXA = newError(DataStop, "transaction_shape", "xa commit of a transaction prepared before the relay's start")

// xaTx is an XA transaction the loop has seen rows or a prepare of and
// not yet seen end.
type xaTx struct {
	gtid     string         // its XA PREPARE group; "" until prepared
	events   []binlog.Event // its rows of captured tables, held until XA COMMIT
	rows     int64
	before   string        // the GTID set before its prepare group
	schema   schema.Tables // the captured tables' layout there
	unsigned schema.Signs  // and their signedness
	// provisional: the layouts there not yet checked against a table map
	provisional schema.Provisional
	// want is the row count a checkpoint recorded for it (restart): the rows
	// read again must match; -1 when not from a checkpoint.
	want int64
}

// xaState holds the XA transactions in flight, prepared ones in binlog order.
type xaState struct {
	txs      map[string]*xaTx
	prepared []string
	// listed are the prepare groups (by GTID) the checkpoint lists as still
	// pending, with their row counts: while reading again what the
	// checkpoint covered, only their rows are collected (an xid may have
	// been used before, by a transaction that ended before the checkpoint).
	listed map[string]int64
}

// loadXA restores the prepared XA transactions a checkpoint lists. Those
// without rows are known at once (their prepare may lie before the position
// read from); those with rows are collected again while replaying.
func (l *loop) loadXA(cp *checkpoint.Checkpoint) {
	l.xa = xaState{txs: map[string]*xaTx{}, listed: map[string]int64{}}
	if cp == nil || cp.XA == nil {
		return
	}
	for _, p := range cp.XA.Prepared {
		l.xa.listed[p.GTID] = p.Rows
		if p.Rows == 0 {
			l.xa.txs[p.XID] = &xaTx{gtid: p.GTID, want: 0}
			l.xa.prepared = append(l.xa.prepared, p.XID)
		}
	}
}

// pendingAtCheckpoint reports, while replaying, whether the prepare group
// gtid is one the checkpoint lists as pending (else it ended before the
// checkpoint, and replaying must ignore it).
func (l *loop) pendingAtCheckpoint(gtid string) bool {
	_, ok := l.xa.listed[gtid]
	return ok
}

// holdXA keeps rows of an XA transaction until it commits.
func (l *loop) holdXA(ev *binlog.Event) {
	if l.replaying(ev.GTID) && !l.pendingAtCheckpoint(ev.GTID) {
		return // its XA transaction ended before the checkpoint
	}
	x := l.xa.txs[ev.XID]
	if x == nil {
		x = &xaTx{want: -1}
		l.xa.txs[ev.XID] = x
	}
	x.events = append(x.events, *ev)
	// Every row counts, a partial image's too (its rows are in ev.Image):
	// the count is the checkpoint's PreparedXA.Rows, which brings a restart
	// back to the prepare when not 0 (counted as the images' Rows, none, a
	// transaction whose only outbox rows lacked columns was listed without
	// rows; its XA COMMIT after a restart published nothing and stopped
	// nothing).
	x.rows += int64(ev.RowCount())
}

// prepareXA notes an XA PREPARE; the loop's position is still the one
// before it.
func (l *loop) prepareXA(ev *binlog.Event) {
	if l.replaying(ev.GTID) && !l.pendingAtCheckpoint(ev.GTID) {
		return // ended before the checkpoint
	}
	x := l.xa.txs[ev.XID]
	if x == nil {
		x = &xaTx{want: -1}
		l.xa.txs[ev.XID] = x
	}
	if want, ok := l.xa.listed[ev.GTID]; ok {
		x.want = want
	}
	x.gtid, x.before, x.schema, x.unsigned = ev.GTID, l.position(), l.schema, l.unsigned
	x.provisional = l.provisional
	for _, id := range l.xa.prepared {
		if id == ev.XID {
			return // read again after a restart
		}
	}
	l.xa.prepared = append(l.xa.prepared, ev.XID)
}

// endXA forgets an XA transaction and returns it (nil when unknown).
func (l *loop) endXA(xid string) *xaTx {
	x := l.xa.txs[xid]
	delete(l.xa.txs, xid)
	for i, id := range l.xa.prepared {
		if id == xid {
			l.xa.prepared = append(l.xa.prepared[:i], l.xa.prepared[i+1:]...)
			break
		}
	}
	return x
}

// commitXA publishes the held rows of the XA transaction ev commits (XA
// COMMIT, or a one-phase commit) as rows of ev's transaction.
func (l *loop) commitXA(ctx context.Context, ev *binlog.Event) error {
	if l.replaying(ev.GTID) {
		l.endXA(ev.XID) // committed, and published, before the checkpoint
		return nil
	}
	x := l.xa.txs[ev.XID]
	if x == nil {
		if ev.OnePhase {
			return nil // it wrote no captured table
		}
		// The lookup may take minutes (the server's binlogs, page by page):
		// what ended before this XA COMMIT (its own group) is committed
		// first, so that no Kafka transaction stays open through it (the
		// broker would abort it, and every attempt would look again) and a
		// stop leaves the checkpoint just before it.
		if err := l.commitEnded(ctx); err != nil {
			return err
		}
		return l.unknownXA(ctx, ev)
	}
	if x.want >= 0 && x.want != x.rows {
		return fmt.Errorf("%w: XA transaction %s (prepared at %s) held %d outbox rows when checkpointed, %d read again",
			ErrUnknownXA, ev.XID, x.gtid, x.want, x.rows)
	}
	// A row logged without all its columns stops the relay here, at the
	// commit, before any row is out: prepared, the transaction could
	// still have been rolled back (and then nothing stops).
	for i := range x.events {
		if held := &x.events[i]; len(held.Absent) > 0 {
			at := *held
			at.GTID = ev.GTID
			return l.partialImage(&at, ev.XID, x.gtid)
		}
	}
	// Until its last row is out, the transaction stays listed: a checkpoint
	// committed in the middle (partial) must bring a restart back to its rows.
	for i := range x.events {
		row := x.events[i]
		row.GTID, row.XID, row.Time = ev.GTID, "", ev.Time
		if err := l.rows(ctx, &row); err != nil {
			return err
		}
	}
	l.endXA(ev.XID)
	return nil
}

// xaLookupTimeout bounds the search of the server's binlogs for the XA
// PREPARE of an unknown XA COMMIT.
const xaLookupTimeout = 5 * time.Minute

// unknownXA handles the XA COMMIT of a transaction prepared before the
// position the relay first started from (another application's XA
// transaction in flight at the first start): the binlog tells whether its
// prepare wrote a captured table. If it did not, it is only logged; if it
// did, or it cannot be found, the relay stops.
func (l *loop) unknownXA(ctx context.Context, ev *binlog.Event) error {
	lctx, cancel := context.WithTimeout(ctx, xaLookupTimeout)
	defer cancel()
	p, err := l.r.findXAPrepare(lctx, l.srv, ev.XID, ev.GTID)
	if err != nil && lctx.Err() != nil && ctx.Err() == nil {
		// Its own bound: looking again at every restart would take as long.
		return fmt.Errorf("%w: XA COMMIT of %s at %s: its XA PREPARE, before the position the relay first started from, "+
			"was not found in %s of reading the server's binlogs (%v); if it wrote outbox rows, publish them by hand, then "+
			"`outbox-relay checkpoint skip --gtid %s`", ErrUnknownXA, ev.XID, ev.GTID, xaLookupTimeout, err, ev.GTID)
	}
	if err != nil {
		return fmt.Errorf("find the prepare of xa transaction %s committed at %s: %w", ev.XID, ev.GTID, err)
	}
	if p != nil {
		var captured []string
		for _, t := range p.Tables {
			for k := range l.r.routes { // the table map's names, compared as the server does
				if l.srv.Names.Same(k.schema+"."+k.name, t) {
					captured = append(captured, t)
					break
				}
			}
		}
		if len(captured) == 0 {
			l.r.log.Info().Str("xid", ev.XID).Str("gtid", ev.GTID).Str("prepared_at", p.GTID).Strs("tables", p.Tables).
				Msg("xa commit of a transaction prepared before the relay's start; it wrote no captured table")
			return nil
		}
		return fmt.Errorf("%w: XA COMMIT of %s at %s: it was prepared at %s, before the position the relay first started "+
			"from, and wrote %v: stop, `outbox-relay checkpoint set` to the position just before %s (its rows and what "+
			"follows are then published again: consumers deduplicate by event id), and start again", ErrUnknownXA,
			ev.XID, ev.GTID, p.GTID, captured, p.GTID)
	}
	return fmt.Errorf("%w: XA COMMIT of %s at %s: its XA PREPARE is before the position the relay first started from and "+
		"no binlog on the server still holds it; if it wrote outbox rows, publish them by hand, then "+
		"`outbox-relay checkpoint skip --gtid %s`", ErrUnknownXA, ev.XID, ev.GTID, ev.GTID)
}

// xaCheckpoint is the XA part of the next checkpoint.
func (l *loop) xaCheckpoint() *checkpoint.XA {
	if len(l.xa.prepared) == 0 {
		return nil
	}
	st := &checkpoint.XA{Prepared: make([]checkpoint.PreparedXA, 0, len(l.xa.prepared))}
	for _, id := range l.xa.prepared {
		x := l.xa.txs[id]
		st.Prepared = append(st.Prepared, checkpoint.PreparedXA{XID: id, GTID: x.gtid, Rows: x.rows})
		if max(x.rows, x.want) > 0 && st.Resume == nil {
			before := x.before
			st.Resume, st.Schema, st.Unsigned = &before, x.schema, x.unsigned
			st.Provisional = x.provisional
		}
	}
	return st
}

// replaying reports whether gtid was published before a restart that
// resumed from before a prepared XA transaction: its rows are read again
// only to collect the XA transactions' rows.
func (l *loop) replaying(gtid string) bool {
	if l.done == nil {
		return false
	}
	if gtid != l.doneGTID {
		one, err := binlog.ParseSet(l.srv.Flavor, gtid)
		l.doneGTID, l.doneHit = gtid, err == nil && l.done.Contain(one)
	}
	return l.doneHit
}

// advanced ends the replay once the position covers what was published.
func (l *loop) advanced(set mysql.GTIDSet) {
	if l.done != nil && set.Contain(l.done) {
		l.done, l.doneGTID = nil, ""
	}
}
