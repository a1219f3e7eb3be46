package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/errclass"
)

// Ending batches: the loop's side of the delivery (delivery.go). A batch
// ends with the checkpoint of the position reached (seal); exactly-once
// its commit runs on while the loop reads on (the seal is in flight until
// the committed stream answers), and the next batch ends only after that.

// commit ends the open batch (or writes a checkpoint-only batch) with the
// current position and waits until it is committed.
func (l *loop) commit(ctx context.Context) error {
	if err := l.startCommit(ctx); err != nil {
		return err
	}
	return l.awaitCommit(ctx)
}

// startCommit ends the open batch (or writes a checkpoint-only batch) with
// the current position, once the batch before it has committed. It
// returns once the delivery has the seal; its end comes on the committed
// stream (exactly-once) or has come (at-least-once).
func (l *loop) startCommit(ctx context.Context) error {
	if err := l.awaitCommit(ctx); err != nil {
		return err
	}
	// A batch cut by its size bound with rows already handed over behind
	// it (catch-up): the next transaction does not wait for the
	// coordinator to complete this one. Its first produce may meet the
	// broker's retry back-off (about 20 ms, CONCURRENT_TRANSACTIONS) while
	// the loop routes those rows; asking every 0.5 ms costs the broker more
	// CPU than that wait. At the head (nothing handed over behind it) it
	// always waits.
	more := (l.batch.full() || l.batch.over(len(l.txn.records), l.txn.bytes)) && l.moreRows
	now := time.Now()
	records, topics, partial := l.batch.sealed(now)
	cp := l.pos.checkpoint(l.r.cfg.Name, l.srv, l.r.tables, now, records, l.asm.xaCheckpoint(), l.topics.place.snapshot())
	l.lastBatch = records
	l.pos.events = cp.Events
	l.pos.dirty = false
	inFlight, err := l.d.send(ctx, part{seal: &seal{cp: cp, records: records, topics: topics, partial: partial, more: more},
		bound: 2 * l.batch.limit.max})
	if err != nil {
		return err
	}
	l.sealing = inFlight
	return nil
}

// awaitCommit waits for the seal in flight, if any, to be answered on the
// committed stream.
func (l *loop) awaitCommit(context.Context) error {
	for l.sealing {
		if err := l.committed(<-l.d.committed()); err != nil {
			return err
		}
	}
	return nil
}

// onCommitted handles an answer of the committed stream taken by run, and
// commits the batch built meanwhile at once when it is due and ends at a
// source transaction boundary.
func (l *loop) onCommitted(ctx context.Context, c committed) error {
	if err := l.committed(c); err != nil {
		return err
	}
	if l.batch.answered() {
		return l.startCommit(ctx) // the batch holds ended transactions only
	}
	return nil
}

// committed takes an answer of the committed stream: a checkpoint now
// durable, the end of the seal in flight, or the failure that ends the
// attempt.
func (l *loop) committed(c committed) error {
	l.sealing = false // exactly-once answers once per seal; at-least-once seals are never in flight
	l.batch.limit.slow(c.slow)
	if c.err != nil {
		return c.err
	}
	l.written(c.cp)
	return nil
}

// settleInflight waits, when the loop ends with err, for a seal still in
// flight (bounded by the delivery's timeout) and accounts for its end; it
// returns the attempt's error. A commit that failed leaves the checkpoint
// behind what the loop handled after it, so it comes first: a fatal stop
// decided meanwhile (which names a transaction the checkpoint would not
// reach, and exits for good) becomes that commit's failure, and the next
// attempt reaches the stop again from the committed checkpoint; any other
// ending keeps both (a fence or a transaction time-out of the commit is
// seen through a stream error).
func (l *loop) settleInflight(err error) error {
	if !l.sealing {
		return err
	}
	cerr := l.committed(<-l.d.committed())
	switch {
	case cerr == nil:
	case err == nil:
		err = cerr
	case errclass.Fatal(err) && !errors.Is(err, ErrFenced):
		err = fmt.Errorf("commit batch in flight: %w (the loop stopped meanwhile, to be reached again: %v)", cerr, err)
	default:
		err = errors.Join(err, cerr)
	}
	return err
}
