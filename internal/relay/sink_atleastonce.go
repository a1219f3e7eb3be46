package relay

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/spans"
)

// atLeastOnceSink is the sink of kafka.delivery at-least-once: records are
// produced without transactions, and a batch's checkpoint is written once
// every record of it and of the batches before it is acknowledged (drain);
// the loop goes on reading meanwhile, within a bound of records (and bytes)
// produced and not yet acknowledged (produce waits for acknowledgements
// past it: back-pressure). A failed record writes no checkpoint: the
// attempt ends and the next one publishes again from the last checkpoint
// written, never skipping a record.
type atLeastOnceSink struct {
	*kafkaSink

	// The open batch, and batches ended but not yet acknowledged in full,
	// oldest first. wakeup wakes the loop when a batch may have become
	// complete.
	cur          *aloBatch
	sealed       []*aloBatch
	wakeup       chan struct{}
	cpInFlight   atomic.Bool  // a checkpoint record is not yet acknowledged
	unacked      atomic.Int64 // records produced, not yet acknowledged
	unackedBytes atomic.Int64 // their key and value bytes

	// lastSlow: when a wait for acknowledgements last took a quarter of
	// the timeout or more (batchlimit.go).
	lastSlow time.Time
}

// aloBatch is an at-least-once batch: its records not yet acknowledged and,
// once it has ended, its checkpoint.
type aloBatch struct {
	pending atomic.Int64
	cp      *checkpoint.Checkpoint
	// acked takes the acknowledgement of a record of the batch and ends
	// its span; promise is the callback of an untraced one.
	acked   func(*kgo.Record, error, spans.Span)
	promise func(*kgo.Record, error)
}

func newAtLeastOnceSink(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, opts sinkOptions) *atLeastOnceSink {
	s := &atLeastOnceSink{kafkaSink: newKafkaSink(ctx, cl, store, opts), wakeup: make(chan struct{}, 1)}
	acked := s.cpPromise
	s.cpPromise = func(r *kgo.Record, err error) {
		acked(r, err)
		s.cpInFlight.Store(false)
		s.wake()
	}
	return s
}

// acked wakes the loop when drain may have work.
func (s *atLeastOnceSink) acked() <-chan struct{} { return s.wakeup }

// wake tells the loop that drain may have work.
func (s *atLeastOnceSink) wake() {
	select {
	case s.wakeup <- struct{}{}:
	default:
	}
}

// newBatch starts a batch whose records share one callback.
func (s *atLeastOnceSink) newBatch() *aloBatch {
	b := &aloBatch{}
	b.acked = func(r *kgo.Record, err error, span spans.Span) {
		s.promise(r, err) // the error is recorded before the count drops
		span.End(r, err)
		s.unacked.Add(-1)
		s.unackedBytes.Add(-int64(len(r.Key) + len(r.Value)))
		if b.pending.Add(-1) == 0 {
			s.wake()
		}
	}
	b.promise = func(r *kgo.Record, err error) { b.acked(r, err, spans.Span{}) }
	return b
}

func (s *atLeastOnceSink) begin() {
	if s.open {
		return
	}
	s.cur = s.newBatch()
	s.open = true
}

// produce sends rec asynchronously within the open batch.
func (s *atLeastOnceSink) produce(ctx context.Context, rec outRecord) error {
	if err := s.lease.Err(); err != nil {
		return err
	}
	s.begin()
	if s.unacked.Load() >= s.maxUnacked || s.maxUnackedBytes > 0 && s.unackedBytes.Load() >= s.maxUnackedBytes {
		// Far ahead of the acknowledgements (a slow or unreachable
		// broker): wait for them, for a bounded time. A stop signal
		// does not cut the wait short: the loop then writes its final
		// checkpoint.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		began := time.Now()
		err := s.cl.Flush(fctx)
		cancel()
		if err != nil {
			return fmt.Errorf("wait for acknowledgements: %w", ackTimeout(err))
		}
		if time.Since(began) >= s.timeout/4 {
			s.lastSlow = time.Now()
		}
	}
	if err := s.lease.Err(); err != nil {
		return err // lost while waiting for acknowledgements
	}
	s.unacked.Add(1)
	s.unackedBytes.Add(int64(len(rec.Key) + len(rec.Value)))
	s.cur.pending.Add(1)
	promise := s.cur.promise
	if span := rec.span; span.Traced() {
		acked := s.cur.acked
		promise = func(r *kgo.Record, err error) { acked(r, err, span) }
	}
	s.cl.Produce(s.pctx, rec.Record, promise)
	return nil
}

// seal ends the batch at once (commit): it never waits on Kafka.
func (s *atLeastOnceSink) seal(_ context.Context, cp *checkpoint.Checkpoint, _ bool, _ chan<- struct{}) (<-chan commitResult, commitResult) {
	began := time.Now()
	written, err := s.commit(context.Background(), cp)
	return nil, commitResult{written, err, time.Since(began)}
}

// commit ends the batch with cp; cp is written once the batch is
// acknowledged (see drain). It returns the checkpoint it wrote, if any.
func (s *atLeastOnceSink) commit(_ context.Context, cp *checkpoint.Checkpoint) (*checkpoint.Checkpoint, error) {
	s.begin()
	s.cur.cp = cp
	s.sealed = append(s.sealed, s.cur)
	s.cur, s.open = nil, false
	return s.drain()
}

// drain writes the checkpoint of the newest ended batch that is
// acknowledged together with every batch before it, and returns it (nil
// when there is none, or while the previous checkpoint record is in flight:
// its acknowledgement wakes the loop again, so a catch-up writes one
// checkpoint per round trip, not one per batch). A failed record stops it:
// the error ends the attempt and the relay resumes from the last checkpoint
// written, publishing some records again, never skipping one. The checkpoint
// record itself is not waited for: a later failure of it is reported by the
// next drain or by finish.
func (s *atLeastOnceSink) drain() (*checkpoint.Checkpoint, error) {
	if s.cpInFlight.Load() {
		return nil, nil
	}
	done := 0
	for done < len(s.sealed) && s.sealed[done].pending.Load() == 0 {
		done++
	}
	if err := s.err(); err != nil {
		return nil, fmt.Errorf("produce batch: %w%s", errclass.Kafka(err), s.refusedAt())
	}
	if done == 0 {
		return nil, nil
	}
	if err := s.lease.Err(); err != nil {
		return nil, err
	}
	cp := s.sealed[done-1].cp
	cp.Time = time.Now().UTC() // when written, which is later than the batch ended
	clear(s.sealed[:done])
	s.sealed = s.sealed[done:]
	rec, err := s.checkpointRecord(cp)
	if err != nil {
		return nil, err
	}
	hit("after-flush")
	s.cpInFlight.Store(true)
	s.cl.Produce(s.pctx, rec, s.cpPromise)
	return cp, nil
}

// finish waits until every ended batch is acknowledged and its checkpoint
// written. It returns the last checkpoint it wrote, if any.
func (s *atLeastOnceSink) finish(ctx context.Context) (*checkpoint.Checkpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush batch: %w", ackTimeout(err))
	}
	cp, err := s.drain()
	if err != nil {
		return nil, err
	}
	if len(s.sealed) > 0 {
		return nil, fmt.Errorf("flush batch: %d batches not acknowledged", len(s.sealed))
	}
	if err := s.cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush checkpoint: %w", err)
	}
	if err := s.err(); err != nil {
		return nil, fmt.Errorf("write checkpoint: %w", errclass.Kafka(err))
	}
	return cp, nil
}

// openFor is 0: no Kafka transaction is open.
func (s *atLeastOnceSink) openFor() time.Duration { return 0 }

// abort forgets the open batch: what was sent stays sent.
func (s *atLeastOnceSink) abort(context.Context) error {
	s.cur, s.open = nil, false
	return nil
}

// bound sets the records produced and not yet acknowledged past which
// produce waits for acknowledgements.
func (s *atLeastOnceSink) bound(records int) { s.maxUnacked = int64(records) }

func (s *atLeastOnceSink) slowSince() time.Time { return s.lastSlow }
