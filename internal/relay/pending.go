package relay

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/router"
)

// The source transaction being read: its rows routed to pending records,
// and the move of the pending records into the batch when the transaction
// ends (or, split, when it alone fills a batch).

// pendingTxn is the records of the source transaction being read, kept
// apart until it ends; only then do they join the batch (handed to the
// delivery). A stop inside the transaction, or SIGTERM, drops them and
// commits the transactions that ended before it; a transaction larger
// than the batch joins it in parts (the checkpoint's partial).
type pendingTxn struct {
	records []pendingRecord
	rows    int64 // the transaction's rows read at the last of them
	bytes   int   // their key and value bytes
}

// drop forgets the pending records: their transaction is not published in
// this attempt (a stop inside it, or SIGTERM; the next attempt reads it
// again from the checkpoint).
func (p *pendingTxn) drop() {
	clear(p.records)
	p.records, p.bytes = p.records[:0], 0
}

// flushPending moves the pending records into the batch: the transaction
// they belong to ended, or (split) they are a part of it that fills a batch
// alone, committed next with a partial checkpoint.
func (l *loop) flushPending(ctx context.Context, split bool) error {
	p := &l.txn
	if len(p.records) == 0 {
		return nil
	}
	gtid := l.asm.cur.gtid
	if partial := l.pos.partial; split && partial.GTID != "" && partial.GTID != gtid {
		// A checkpoint holds one partial: that of another transaction, read
		// after this one here (a host whose binlog orders independent
		// transactions otherwise than the one the checkpoint was written
		// from), is still outstanding.
		return fmt.Errorf("%w: transaction %s is larger than kafka.batch.max_records/max_bytes (%d records, %d bytes) "+
			"while the checkpoint's part of transaction %s (%d rows published) is outstanding: this host's binlog has them "+
			"in another order than the host the checkpoint was written from; raise kafka.batch.max_records and "+
			"max_bytes above the transaction's size, or read from that host until %s is published",
			binlog.ErrUnframed, gtid, len(p.records), p.bytes, partial.GTID, partial.Rows, partial.GTID)
	}
	if _, err := l.d.send(ctx, part{records: p.records, bound: 2 * l.batch.limit.max}); err != nil {
		return err
	}
	for _, r := range p.records {
		l.batch.counted(r.to)
	}
	l.batch.join(len(p.records), p.bytes, split)
	if split || l.pos.partial.GTID == gtid {
		// Else the partial belongs to another transaction, still to come
		// (see above): the end of this one leaves it alone.
		l.pos.partial = checkpoint.Partial{GTID: gtid, Rows: p.rows}
	}
	p.drop()
	return nil
}

// rows routes the INSERTed rows of a captured table into pending records
// (UPDATE and DELETE: invalidOp); a source transaction that alone outgrows
// the batch is committed in parts, and the ended ones are committed before
// a transaction that would take the batch over its bound.
func (l *loop) rows(ctx context.Context, ev *binlog.Event) error {
	rt, err := l.route.routeOf(ev)
	if err != nil {
		return err
	}
	l.asm.enter(ev.GTID)
	if ev.Op != binlog.OpInsert {
		return l.asm.invalidOp(rt.table, rt.invalidOp, ev)
	}
	if len(ev.Absent) > 0 {
		return partialImage(ev, "", "", l.pos.partial)
	}
	p := &l.txn
	for i, values := range ev.Rows {
		if l.asm.next(l.pos.partial) {
			continue // published before the restart
		}
		row := router.Row{Columns: ev.Table.Columns, Values: values, CommitTime: ev.Time, Latin1: ev.Table.Latin1, Undecoded: ev.UndecodedRow(i)}
		rec, err := l.route.record(ctx, rt, row)
		if err != nil {
			if !errors.Is(err, router.ErrBadRow) {
				return err
			}
			err = fmt.Errorf("route row of %s (event_id %q, gtid %s): %w", ev.Table, rec.EventID, ev.GTID, err)
			if rt.deadLetter == "" {
				return err
			}
			if rec, err = l.route.deadLetter(ctx, rt, ev, row, rec.EventID, err); err != nil {
				return err
			}
		}
		if len(p.records) > 0 && l.batch.fillsAlone(len(p.records), p.bytes) {
			// One source transaction outgrew the batch: commit the part read
			// so far; the checkpoint's partial says how many rows to skip.
			// Decided at the row after the bound, not at the bound's own: a
			// transaction that just fills a batch stays whole (a stop later
			// in it then leaves none of its rows visible).
			if err := l.flushPending(ctx, true); err != nil {
				return err
			}
			if err := l.startCommit(ctx); err != nil {
				return err
			}
		}
		p.records = append(p.records, pendingRecord{rec.kafka, topicOutcome{rec.kafka.Topic, rec.outcome}})
		p.rows = l.asm.cur.rows
		p.bytes += len(rec.kafka.Key) + len(rec.kafka.Value)
		if l.batch.open() && l.batch.over(len(p.records), p.bytes) {
			// The ended transactions fill the batch: commit them, and keep
			// this one whole (never a part of a transaction that fits).
			if err := l.startCommit(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}
