package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/schema"
)

// ErrUnknownXA: XA COMMIT of a transaction whose XA PREPARE the relay has
// not read (it precedes the relay's first start position), so its outbox
// rows, if any, cannot be published. Fatal.
var ErrUnknownXA = errors.New("xa commit of a transaction prepared before the relay's start")

// xaTx is an XA transaction the loop has seen rows or a prepare of and
// not yet seen end.
type xaTx struct {
	gtid   string         // its XA PREPARE group; "" until prepared
	events []binlog.Event // its rows of captured tables, held until XA COMMIT
	rows   int64
	before string        // the GTID set before its prepare group
	schema schema.Tables // the captured tables' layout there
	// want is the row count a checkpoint recorded for it (restart): the rows
	// read again must match; -1 when not from a checkpoint.
	want int64
}

// xaState holds the XA transactions in flight, prepared ones in binlog order.
type xaState struct {
	txs      map[string]*xaTx
	prepared []string
}

// loadXA restores the prepared XA transactions a checkpoint lists.
func (l *loop) loadXA(cp *checkpoint.Checkpoint) {
	l.xa = xaState{txs: map[string]*xaTx{}}
	if cp == nil || cp.XA == nil {
		return
	}
	for _, p := range cp.XA.Prepared {
		l.xa.txs[p.XID] = &xaTx{gtid: p.GTID, want: p.Rows}
		l.xa.prepared = append(l.xa.prepared, p.XID)
	}
}

// holdXA keeps rows of an XA transaction until it commits.
func (l *loop) holdXA(ev *binlog.Event) {
	x := l.xa.txs[ev.XID]
	if x == nil {
		x = &xaTx{want: -1}
		l.xa.txs[ev.XID] = x
	}
	x.events = append(x.events, *ev)
	x.rows += int64(len(ev.Rows))
}

// prepareXA notes an XA PREPARE; the loop's position is still the one
// before it.
func (l *loop) prepareXA(ev *binlog.Event) {
	x := l.xa.txs[ev.XID]
	if x == nil {
		x = &xaTx{want: -1}
		l.xa.txs[ev.XID] = x
	}
	x.gtid, x.before, x.schema = ev.GTID, l.position(), l.schema
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
	x := l.xa.txs[ev.XID]
	if x == nil {
		if ev.OnePhase {
			return nil // it wrote no captured table
		}
		return fmt.Errorf("%w: XA COMMIT of %s at %s: its XA PREPARE is before the position the relay first started from; "+
			"if it wrote outbox rows, publish them by hand (or set the checkpoint before its prepare with "+
			"`outbox-relay checkpoint set`), then `outbox-relay checkpoint skip --gtid %s`", ErrUnknownXA, ev.XID, ev.GTID, ev.GTID)
	}
	if x.want >= 0 && x.want != x.rows {
		return fmt.Errorf("%w: XA transaction %s (prepared at %s) held %d outbox rows when checkpointed, %d read again",
			ErrUnknownXA, ev.XID, x.gtid, x.want, x.rows)
	}
	if !l.replaying(ev.GTID) { // else published before the restart
		// Until its last row is out, the transaction stays listed: a
		// checkpoint committed in the middle (partial) must bring a restart
		// back to its rows.
		for i := range x.events {
			row := x.events[i]
			row.GTID, row.XID, row.Time = ev.GTID, "", ev.Time
			if err := l.rows(ctx, &row); err != nil {
				return err
			}
		}
	}
	l.endXA(ev.XID)
	return nil
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
			st.Resume, st.Schema = &before, x.schema
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
