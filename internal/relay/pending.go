package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/router"
)

// The source transaction being read: its rows routed to pending records,
// the batch's size bounds, and the move of the pending records into the
// batch when the transaction ends (or, split, when it alone fills a batch).

// batchFull reports whether the open batch reached its size bound
// (kafka.batch.max_records, as lowered after ack time-outs, or max_bytes).
func (l *loop) batchFull() bool {
	return l.batchRecords >= l.maxRecords || l.batchBytes >= l.r.cfg.Kafka.Batch.MaxBytes
}

// pendingFull reports whether the source transaction being read has, alone,
// reached the batch's size bound: it is committed in parts.
func (l *loop) pendingFull() bool {
	return len(l.pending) >= l.maxRecords || l.pendingBytes >= l.r.cfg.Kafka.Batch.MaxBytes
}

// overBound reports whether the batch and the pending records together
// reached the bound: the ended transactions are committed, and the one being
// read stays whole (it may fit in the next batch).
func (l *loop) overBound() bool {
	return l.batchRecords+len(l.pending) >= l.maxRecords || l.batchBytes+l.pendingBytes >= l.r.cfg.Kafka.Batch.MaxBytes
}

// pendingRecord is a routed record of the source transaction being read.
type pendingRecord struct {
	rec outRecord
	to  topicOutcome
}

// flushPending moves the pending records into the batch: the transaction
// they belong to ended, or (split) they are a part of it that fills a batch
// alone, committed next with a partial checkpoint.
func (l *loop) flushPending(ctx context.Context, split bool) error {
	if len(l.pending) == 0 {
		return nil
	}
	if split && l.partial.GTID != "" && l.partial.GTID != l.curGTID {
		// A checkpoint holds one partial: that of another transaction, read
		// after this one here (a host whose binlog orders independent
		// transactions otherwise than the one the checkpoint was written
		// from), is still outstanding.
		return fmt.Errorf("%w: transaction %s is larger than kafka.batch.max_records/max_bytes (%d records, %d bytes) "+
			"while the checkpoint's part of transaction %s (%d rows published) is outstanding: this host's binlog has them "+
			"in another order than the host the checkpoint was written from; raise kafka.batch.max_records and "+
			"max_bytes above the transaction's size, or read from that host until %s is published",
			binlog.ErrUnframed, l.curGTID, len(l.pending), l.pendingBytes, l.partial.GTID, l.partial.Rows, l.partial.GTID)
	}
	if !l.batchOpen() {
		l.batchStart = time.Now()
	}
	for i, p := range l.pending {
		if err := l.send(ctx, p.rec); err != nil {
			return err
		}
		l.batchTopics[p.to]++
		l.pending[i] = pendingRecord{}
	}
	l.batchRecords += len(l.pending)
	l.batchBytes += l.pendingBytes
	if split || l.partial.GTID == l.curGTID {
		// Else the partial belongs to another transaction, still to come
		// (see above): the end of this one leaves it alone.
		l.partial = checkpoint.Partial{GTID: l.curGTID, Rows: l.pendingRows}
		l.batchPart = split
	}
	l.pending, l.pendingBytes = l.pending[:0], 0
	return nil
}

// dropPending forgets the pending records: their transaction is not
// published in this attempt (a stop inside it, or SIGTERM; the next attempt
// reads it again from the checkpoint).
func (l *loop) dropPending() {
	clear(l.pending)
	l.pending, l.pendingBytes = l.pending[:0], 0
}

// rows routes the INSERTed rows of a captured table into pending records
// (UPDATE and DELETE: invalidOp); a source transaction that alone outgrows
// the batch is committed in parts, and the ended ones are committed before
// a transaction that would take the batch over its bound.
func (l *loop) rows(ctx context.Context, ev *binlog.Event) error {
	rt := l.r.routes[tableKey{ev.Table.Schema, ev.Table.Name}]
	if rt == nil {
		return fmt.Errorf("rows of %s, which is not a captured table", ev.Table)
	}
	if l.curGTID != ev.GTID {
		l.curGTID, l.curRows, l.curDeleted = ev.GTID, 0, 0
	}
	if ev.Op != binlog.OpInsert {
		return l.invalidOp(rt, ev)
	}
	if len(ev.Absent) > 0 {
		return l.partialImage(ev, "", "")
	}
	for i, values := range ev.Rows {
		l.curRows++
		if l.partial.GTID == ev.GTID && l.curRows <= l.partial.Rows {
			continue // published before the restart
		}
		row := router.Row{Columns: ev.Table.Columns, Values: values, CommitTime: ev.Time, Latin1: ev.Table.Latin1, Undecoded: ev.UndecodedRow(i)}
		rec, err := l.record(ctx, rt, row)
		if err != nil {
			if !errors.Is(err, router.ErrBadRow) {
				return err
			}
			err = fmt.Errorf("route row of %s (event_id %q, gtid %s): %w", ev.Table, rec.EventID, ev.GTID, err)
			if rt.deadLetter == "" {
				return err
			}
			if rec, err = l.deadLetter(ctx, rt, ev, row, rec.EventID, err); err != nil {
				return err
			}
		}
		if len(l.pending) > 0 && l.pendingFull() {
			// One source transaction outgrew the batch: commit the part read so
			// far; the checkpoint's partial says how many rows to skip. Decided
			// at the row after the bound, not at the bound's own: a transaction
			// that just fills a batch stays whole (a stop later in it then
			// leaves none of its rows visible).
			if err := l.flushPending(ctx, true); err != nil {
				return err
			}
			if err := l.startCommit(ctx); err != nil {
				return err
			}
		}
		l.pending = append(l.pending, pendingRecord{rec.kafka, topicOutcome{rec.kafka.Topic, rec.outcome}})
		l.pendingRows = l.curRows
		l.pendingBytes += len(rec.kafka.Key) + len(rec.kafka.Value)
		if l.overBound() && l.batchOpen() {
			// The ended transactions fill the batch: commit them, and keep
			// this one whole (never a part of a transaction that fits).
			if err := l.startCommit(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// partialImage is the stop at ev's transaction, whose INSERT image lacks
// columns (ev.Absent): nothing of its rows is published from here on
// (the loop's stop drops its pending records); the part of it a split
// published before, if any, is named. xid and preparedAt name an XA
// transaction whose XA COMMIT ev is.
func (l *loop) partialImage(ev *binlog.Event, xid, preparedAt string) error {
	e := &binlog.PartialImageError{GTID: ev.GTID, Table: ev.Table.String(), Absent: ev.Absent, XID: xid, PreparedAt: preparedAt}
	if l.partial.GTID == ev.GTID {
		e.Published = l.partial.Rows
	}
	return e
}
