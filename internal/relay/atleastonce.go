package relay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/spans"
)

// atLeastOnce is the delivery of kafka.delivery at-least-once: records are
// produced without transactions, and a batch's checkpoint is written once
// every record of it and of the batches before it is acknowledged (run,
// drain); the pipeline goes on reading meanwhile, within a bound of
// records (and bytes) produced and not yet acknowledged (send waits for
// acknowledgements past it: back-pressure). A failed record writes no
// checkpoint: the attempt ends and the next one publishes again from the
// last checkpoint written, never skipping a record.
type atLeastOnce struct {
	*producer
	acct   *accounting
	out    chan committed
	wakeup chan struct{} // a batch may have become complete: run drains

	cur        *aloBatch              // the open batch (the pipeline's goroutine only)
	maxUnacked int64                  // records produced and not yet acknowledged past which send waits
	mu         sync.Mutex             // guards sealed and last: send appends, run and stop drain
	sealed     []*aloBatch            // batches ended but not yet acknowledged in full, oldest first
	last       *checkpoint.Checkpoint // the last checkpoint drain wrote
	cpInFlight atomic.Bool            // a checkpoint record is not yet acknowledged
	unacked    atomic.Int64           // records produced, not yet acknowledged
	unackBytes atomic.Int64           // their key and value bytes
	slowAt     atomic.Int64           // unix nanoseconds of the last wait for acknowledgements that took a quarter of the timeout or more
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

func newAtLeastOnce(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, opts deliveryOptions, m *accounting) *atLeastOnce {
	s := &atLeastOnce{producer: newProducer(ctx, cl, store, opts), acct: m, out: make(chan committed), wakeup: make(chan struct{}, 1)}
	acked := s.cpPromise
	s.cpPromise = func(r *kgo.Record, err error) {
		acked(r, err)
		s.cpInFlight.Store(false)
		s.wake()
	}
	return s
}

func (s *atLeastOnce) committed() <-chan committed { return s.out }

// wake tells run that drain may have work.
func (s *atLeastOnce) wake() {
	select {
	case s.wakeup <- struct{}{}:
	default:
	}
}

// newBatch starts a batch whose records share one callback.
func (s *atLeastOnce) newBatch() *aloBatch {
	b := &aloBatch{}
	b.acked = func(r *kgo.Record, err error, span spans.Span) {
		s.promise(r, err) // the error is recorded before the count drops
		span.End(r, err)
		s.unacked.Add(-1)
		s.unackBytes.Add(-int64(len(r.Key) + len(r.Value)))
		if b.pending.Add(-1) == 0 {
			s.wake()
		}
	}
	b.promise = func(r *kgo.Record, err error) { b.acked(r, err, spans.Span{}) }
	return b
}

// send produces b's records and, with b.seal, ends the batch: its
// checkpoint is written once it is acknowledged (run). A seal is never in
// flight.
func (s *atLeastOnce) send(ctx context.Context, b part) (bool, error) {
	if b.bound > 0 {
		s.maxUnacked = int64(b.bound)
	}
	for _, p := range b.records {
		if err := s.produce(ctx, p.rec); err != nil {
			return false, err
		}
	}
	if b.seal == nil {
		return false, nil
	}
	if s.cur == nil {
		s.cur = s.newBatch()
	}
	s.cur.cp = b.seal.cp
	s.mu.Lock()
	s.sealed = append(s.sealed, s.cur)
	s.mu.Unlock()
	s.cur = nil
	s.wake()
	s.acct.ended(b.seal, 0, nil)
	return false, nil
}

// produce sends rec asynchronously within the open batch.
func (s *atLeastOnce) produce(ctx context.Context, rec outRecord) error {
	if err := s.lease.Err(); err != nil {
		return err
	}
	if s.cur == nil {
		s.cur = s.newBatch()
	}
	if s.unacked.Load() >= s.maxUnacked || s.maxUnackedBytes > 0 && s.unackBytes.Load() >= s.maxUnackedBytes {
		// Far ahead of the acknowledgements (a slow or unreachable
		// broker): wait for them, for a bounded time. A stop signal
		// does not cut the wait short: the pipeline then writes its final
		// checkpoint.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		began := time.Now()
		err := s.cl.Flush(fctx)
		cancel()
		if err != nil {
			return fmt.Errorf("wait for acknowledgements: %w", ackTimeout(err))
		}
		if at := slowSince(time.Since(began), s.timeout, time.Now()); !at.IsZero() {
			s.slowAt.Store(at.UnixNano())
		}
	}
	if err := s.lease.Err(); err != nil {
		return err // lost while waiting for acknowledgements
	}
	s.unacked.Add(1)
	s.unackBytes.Add(int64(len(rec.Key) + len(rec.Value)))
	s.cur.pending.Add(1)
	promise := s.cur.promise
	if span := rec.span; span.Traced() {
		acked := s.cur.acked
		promise = func(r *kgo.Record, err error) { acked(r, err, span) }
	}
	s.cl.Produce(s.pctx, rec.Record, promise)
	return nil
}

// run writes the checkpoint of each batch acknowledged together with all
// before it (drain) and answers with it on the committed stream, until
// ctx ends or a record failed.
func (s *atLeastOnce) run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.wakeup:
		}
		cp, err := s.drain()
		if cp == nil && err == nil {
			continue
		}
		c := committed{cp: cp, err: err}
		if n := s.slowAt.Load(); n != 0 {
			c.slow = time.Unix(0, n)
		}
		select {
		case s.out <- c:
		case <-ctx.Done():
			return nil
		}
		if err != nil {
			return nil // the pipeline ends the attempt
		}
	}
}

// drain writes the checkpoint of the newest ended batch that is
// acknowledged together with every batch before it, and returns it (nil
// when there is none, or while the previous checkpoint record is in flight:
// its acknowledgement wakes run again, so a catch-up writes one checkpoint
// per round trip, not one per batch). A failed record stops it: the error
// ends the attempt and the relay resumes from the last checkpoint written,
// publishing some records again, never skipping one. The checkpoint record
// itself is not waited for: a later failure of it is reported by the next
// drain or by stop.
func (s *atLeastOnce) drain() (*checkpoint.Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
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
	s.last = cp
	return cp, nil
}

// stop, clean, waits until every ended batch is acknowledged and its
// checkpoint written, then until read_committed readers see it; it
// returns the last checkpoint it wrote, if any. Otherwise it forgets the
// open batch: what was sent stays sent.
func (s *atLeastOnce) stop(ctx context.Context, clean bool) (*checkpoint.Checkpoint, error) {
	if !clean {
		s.cur = nil
		return nil, nil
	}
	cp, err := s.finish(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.awaitVisible(ctx); err != nil {
		s.log.Warn().Err(err).Msg("final checkpoint committed; readers see it once an older open transaction on the checkpoint topic ends")
	}
	return cp, nil
}

// finish waits until every ended batch is acknowledged and its checkpoint
// written. It returns the last checkpoint written (by it, or by run
// meanwhile, whose answer the pipeline no longer reads), if any.
func (s *atLeastOnce) finish(ctx context.Context) (*checkpoint.Checkpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var cp *checkpoint.Checkpoint
	for prev := -1; ; {
		if err := s.cl.Flush(ctx); err != nil {
			return nil, fmt.Errorf("flush batch: %w", ackTimeout(err))
		}
		if _, err := s.drain(); err != nil {
			return nil, err
		}
		s.mu.Lock()
		left := len(s.sealed)
		cp = s.last
		s.mu.Unlock()
		if left == 0 {
			break
		}
		// run's drain took the batches acknowledged when it began and
		// produced their checkpoint record after the Flush returned: this
		// drain left the batches acknowledged since to the next one, once
		// that record is acknowledged (the next Flush waits for it).
		if ctx.Err() != nil {
			return nil, fmt.Errorf("flush batch: %d batches not acknowledged", left)
		}
		if left == prev {
			// Nothing moved since the last pass (a state no acknowledgement
			// should leave): wait a little before the next one rather than
			// spinning until the timeout.
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
		prev = left
	}
	if err := s.cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush checkpoint: %w", err)
	}
	if err := s.err(); err != nil {
		return nil, fmt.Errorf("write checkpoint: %w", errclass.Kafka(err))
	}
	return cp, nil
}
