package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/spans"
)

// lane is one transactional producer of the exactly-once delivery: a
// Kafka transaction of its own at a time, ending with its checkpoint
// record, so that the records and the position they reach become visible
// together or not at all. After a commit its goroutine asks the
// coordinator whether the transaction is complete before the lane's next
// transaction begins (txnsettle.go); with two lanes, the second checks
// before each commit that the first lane's transactional id is still this
// instance's (lanes.go).
//
// Who touches it: the goroutine that holds the delivery's mutex while the
// lane takes the open batch's records (exactlyonce.go), and the lane's own
// goroutine while it commits or settles; never both at once.
type lane struct {
	*producer
	open   bool      // a Kafka transaction is open
	began  time.Time // when it began
	traced []outRecord
	settle settling     // the wait for the coordinator after a commit (txnsettle.go)
	check  laneCheck    // the second lane's check of the first (lanes.go)
	topics laneTopics   // the topics its client wrote, proved committed or not (laneproof.go)
	jobs   chan laneJob // the lane goroutine's work (exactlyonce.go)
	// flushedAt, checkedAt: when the last commit's records were all
	// acknowledged, and its second-lane check done (the step trace's).
	flushedAt, checkedAt time.Time
}

// newLane is a lane producing on cl (transactional).
func newLane(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, opts deliveryOptions) *lane {
	return &lane{producer: newProducer(ctx, cl, store, opts), jobs: make(chan laneJob, 2)}
}

// follow makes s the second lane, following first: before each commit it
// checks, through check (a client of its own, no transactional id), that
// first's transactional id is still this instance's (lanes.go).
func (s *lane) follow(first *lane, check *kgo.Client) {
	first.check.keepEpoch = true
	s.check.follows = first
	s.check.adm = kadm.NewClient(check)
}

func (s *lane) begin() error {
	if s.open {
		return nil
	}
	s.awaitSettled()
	if err := s.cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin kafka transaction: %w", s.classify(err))
	}
	s.began = time.Now()
	s.open = true
	return nil
}

// produce sends rec asynchronously within the open Kafka transaction,
// beginning one if none is open.
func (s *lane) produce(rec outRecord) error {
	if err := s.lease.Err(); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	if rec.span.Traced() {
		s.traced = append(s.traced, rec)
	}
	traceProduce(s, rec.Record)
	s.topics.note(rec.Topic)
	s.cl.Produce(s.pctx, rec.Record, s.promise)
	return nil
}

// endSpans ends the spans of the open transaction's traced records:
// published when err is nil.
func (s *lane) endSpans(err error) {
	for i, rec := range s.traced {
		rec.span.End(rec.Record, err)
		s.traced[i] = outRecord{}
	}
	s.traced = s.traced[:0]
}

// commit ends the open transaction (or a checkpoint-only one) with cp:
// after it returns nil, every record of the batch and cp are durably
// committed (proved so when the transaction held the client's first
// records to a topic: laneproof.go), and it returns cp. flushed (may be nil) is called once every
// record of the batch, its checkpoint among them, is acknowledged, before
// EndTxn: records produced after that under the other lane's
// transactional id land after all of them in every partition.
func (s *lane) commit(ctx context.Context, cp *checkpoint.Checkpoint, flushed func()) (*checkpoint.Checkpoint, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	// Once begun, a commit is not cut short by the caller's cancellation
	// (a stop signal): an EndTransaction canceled in flight leaves its
	// outcome unknown. It is bounded by the delivery's timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	if err := s.lease.Err(); err != nil {
		return nil, err
	}
	rec, err := s.checkpointRecord(cp)
	if err != nil {
		return nil, err
	}
	s.topics.note(rec.Topic)
	s.cl.Produce(s.pctx, rec, s.cpPromise)
	flushErr := s.cl.Flush(ctx)
	if err := s.lease.Err(); err != nil {
		// Lost while flushing: never commit. Had the commit gone out anyway,
		// the next active instance's InitProducerID would have fenced it.
		// The loss comes first: it also fails the records still buffered
		// (exactlyOnce.run).
		return nil, err
	}
	if flushErr != nil {
		return nil, fmt.Errorf("flush batch: %w", ackTimeout(flushErr))
	}
	if err := s.err(); err != nil {
		return nil, fmt.Errorf("produce batch: %w%s", s.classify(err), s.refusedAt())
	}
	s.flushedAt = time.Now()
	hit("after-flush")
	if err := s.lease.Err(); err != nil {
		return nil, err // lost since (a failpoint may hold the commit here)
	}
	if flushed != nil {
		flushed()
	}
	if err := s.firstLaneOurs(ctx); err != nil {
		return nil, err
	}
	s.checkedAt = time.Now()
	var before producerEpoch
	known := true
	if s.check.keepEpoch {
		before, known = s.producerState(ctx)
	}
	if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return nil, fmt.Errorf("commit kafka transaction: %w", s.classify(err))
	}
	s.open, s.began = false, time.Time{}
	s.keepCommittedEpoch(ctx, before, known)
	if err := s.proveCommitted(ctx, rec); err != nil {
		s.endSpans(spans.ErrNotPublished) // its outcome unknown: published again
		return nil, err
	}
	s.endSpans(nil)
	return cp, nil
}

// openFor is how long the open Kafka transaction has been open (from
// begin, a little before the broker starts its clock); 0 when none is open.
func (s *lane) openFor() time.Duration {
	if !s.open {
		return 0
	}
	return time.Since(s.began)
}

// abort ends the open Kafka transaction with an abort: none of its records
// becomes visible, and the last stable offsets of its partitions (the
// shared checkpoint topic's among them) move on now instead of after the
// transaction timeout. Records buffered and not yet sent are dropped. It
// waits at most the delivery's timeout. Afterwards a new transaction can
// begin on the same client (unless it is fenced). Without an open
// transaction it does nothing.
func (s *lane) abort(ctx context.Context) error {
	if !s.open {
		return nil
	}
	defer s.endSpans(spans.ErrNotPublished) // aborted, or its outcome unknown: published again
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := s.cl.AbortBufferedRecords(ctx)
	if err == nil {
		err = s.cl.EndTransaction(ctx, kgo.TryAbort)
	}
	if err != nil {
		return fmt.Errorf("abort kafka transaction: %w", s.classify(err))
	}
	s.open, s.began = false, time.Time{}
	s.topics.ended()
	s.errMu.Lock()
	s.firstErr = nil // the aborted records' errors (ErrAborting) end with them
	s.refused = refusedBatch{}
	s.errMu.Unlock()
	return nil
}

// classify is errclass.Kafka, and tells a transaction the broker aborted
// for being open too long (ErrTxnTimedOut) from a fence: the broker answers
// both with the same fencing errors.
func (s *lane) classify(err error) error {
	c := errclass.Kafka(err)
	if open := s.openFor(); errors.Is(c, errclass.ErrFenced) && s.txnTimeout > 0 && open >= s.txnTimeout {
		return fmt.Errorf("%w: open for %s, kafka.transaction_timeout is %s: the broker aborted it and bumped the producer epoch: %w",
			ErrTxnTimedOut, open.Round(time.Millisecond), s.txnTimeout, err)
	}
	return c
}
