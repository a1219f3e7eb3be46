package relay

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// ErrUnknownXA: XA COMMIT of a transaction whose XA PREPARE the relay has
// not read (it precedes the relay's first start position), so its outbox
// rows, if any, cannot be published. Fatal.
var ErrUnknownXA = errclass.New(errclass.DataStop, "transaction_shape", "xa commit of a transaction prepared before the relay's start")

// xaTx is an XA transaction the loop has seen rows or a prepare of and
// not yet seen end.
type xaTx struct {
	gtid   string         // its XA PREPARE group; "" until prepared
	events []binlog.Event // its rows of captured tables, held until XA COMMIT
	rows   int64
	at     xaAt // where it was prepared
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

// load restores the prepared XA transactions a checkpoint lists. Those
// without rows are known at once (their prepare may lie before the position
// read from); those with rows are collected again while replaying.
func (x *xaState) load(cp *checkpoint.Checkpoint) {
	*x = xaState{txs: map[string]*xaTx{}, listed: map[string]int64{}}
	if cp == nil || cp.XA == nil {
		return
	}
	for _, p := range cp.XA.Prepared {
		x.listed[p.GTID] = p.Rows
		if p.Rows == 0 {
			x.txs[p.XID] = &xaTx{gtid: p.GTID, want: 0}
			x.prepared = append(x.prepared, p.XID)
		}
	}
}

// pendingAtCheckpoint reports, while replaying, whether the prepare group
// gtid is one the checkpoint lists as pending (else it ended before the
// checkpoint, and replaying must ignore it).
func (a *assembler) pendingAtCheckpoint(gtid string) bool {
	_, ok := a.xa.listed[gtid]
	return ok
}

// holdXA keeps rows of an XA transaction until it commits.
func (a *assembler) holdXA(ev *binlog.Event) {
	if a.replaying(ev.GTID) && !a.pendingAtCheckpoint(ev.GTID) {
		return // its XA transaction ended before the checkpoint
	}
	x := a.xa.txs[ev.XID]
	if x == nil {
		x = &xaTx{want: -1}
		a.xa.txs[ev.XID] = x
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

// prepareXA notes an XA PREPARE, at the position before it.
func (a *assembler) prepareXA(ev *binlog.Event, at xaAt) {
	if a.replaying(ev.GTID) && !a.pendingAtCheckpoint(ev.GTID) {
		return // ended before the checkpoint
	}
	x := a.xa.txs[ev.XID]
	if x == nil {
		x = &xaTx{want: -1}
		a.xa.txs[ev.XID] = x
	}
	if want, ok := a.xa.listed[ev.GTID]; ok {
		x.want = want
	}
	x.gtid, x.at = ev.GTID, at
	for _, id := range a.xa.prepared {
		if id == ev.XID {
			return // read again after a restart
		}
	}
	a.xa.prepared = append(a.xa.prepared, ev.XID)
}

// endXA forgets an XA transaction and returns it (nil when unknown).
func (a *assembler) endXA(xid string) *xaTx {
	x := a.xa.txs[xid]
	delete(a.xa.txs, xid)
	for i, id := range a.xa.prepared {
		if id == xid {
			a.xa.prepared = append(a.xa.prepared[:i], a.xa.prepared[i+1:]...)
			break
		}
	}
	return x
}

// commitXA returns the held rows of the XA transaction ev commits (XA
// COMMIT, or a one-phase commit) as rows events of ev's transaction, to
// publish before the transaction is forgotten (endXA): until its last row
// is out it stays listed, so that a checkpoint committed in the middle
// (partial) brings a restart back to its rows. known is false for the XA
// COMMIT of a transaction prepared before the position the relay first
// started from (the loop looks it up: unknownXA); a one-phase commit
// without rows wrote no captured table. A held row logged without all its
// columns is the stop (partialImage; published is the checkpoint's partial).
func (a *assembler) commitXA(ev *binlog.Event, published checkpoint.Partial) (rows []binlog.Event, known bool, err error) {
	if a.replaying(ev.GTID) {
		a.endXA(ev.XID) // committed, and published, before the checkpoint
		return nil, true, nil
	}
	x := a.xa.txs[ev.XID]
	if x == nil {
		return nil, ev.OnePhase, nil
	}
	if x.want >= 0 && x.want != x.rows {
		return nil, true, fmt.Errorf("%w: XA transaction %s (prepared at %s) held %d outbox rows when checkpointed, %d read again",
			ErrUnknownXA, ev.XID, x.gtid, x.want, x.rows)
	}
	// A row logged without all its columns stops the relay here, at the
	// commit, before any row is out: prepared, the transaction could
	// still have been rolled back (and then nothing stops).
	for i := range x.events {
		if held := &x.events[i]; len(held.Absent) > 0 {
			at := *held
			at.GTID = ev.GTID
			return nil, true, partialImage(&at, ev.XID, x.gtid, published)
		}
	}
	rows = make([]binlog.Event, len(x.events))
	for i, row := range x.events {
		row.GTID, row.XID, row.Time = ev.GTID, "", ev.Time
		rows[i] = row
	}
	return rows, true, nil
}

// xaCheckpoint is the XA part of the next checkpoint.
func (a *assembler) xaCheckpoint() *checkpoint.XA {
	if len(a.xa.prepared) == 0 {
		return nil
	}
	st := &checkpoint.XA{Prepared: make([]checkpoint.PreparedXA, 0, len(a.xa.prepared))}
	for _, id := range a.xa.prepared {
		x := a.xa.txs[id]
		st.Prepared = append(st.Prepared, checkpoint.PreparedXA{XID: id, GTID: x.gtid, Rows: x.rows})
		if max(x.rows, x.want) > 0 && st.Resume == nil {
			before := x.at.before
			st.Resume, st.Schema, st.Unsigned = &before, x.at.schema, x.at.unsigned
			st.Provisional = x.at.provisional
		}
	}
	return st
}
