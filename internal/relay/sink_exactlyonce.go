package relay

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/spans"
)

// exactlyOnceSink is the sink of kafka.delivery exactly-once: each batch is
// one Kafka transaction ending with its checkpoint record, so the records
// and the position they reach become visible together or not at all. Its
// commit (flush, EndTxn) waits on Kafka: seal runs it in the attempt's
// goroutines while the loop goes on reading (commit.go). After a commit it
// asks the coordinator whether the transaction is complete before the next
// one begins (txnsettle.go); with two lanes, the second checks before each
// commit that the first lane's transactional id is still this instance's
// (lanes.go).
type exactlyOnceSink struct {
	*kafkaSink
	began time.Time // when the open Kafka transaction began

	// The answer to whether the last committed transaction is complete at
	// its coordinator (txnsettle.go); nil when none is awaited.
	settled     chan settleAnswer
	settleOff   bool // the coordinator cannot answer: do not ask
	settleFails int  // settle waits failed in a row
	// settlePaused: no settle wait before this time (too many failed in a
	// row); settleWarned: that was logged in this attempt.
	settlePaused time.Time
	settleWarned bool
	txnID        string // the client's transactional id, once looked up
	settleWaits  atomic.Int64

	// Two lanes (lanes.go): the first lane keeps its producer id and epoch
	// after each commit (keepEpoch, epochAfter); the second lane checks,
	// before each commit, that the first lane's transactional id is still
	// this instance's (follows; checkOff once the brokers refuse to tell,
	// checkFails failed in a row, no check before checkPaused, checkWarned
	// once a failed check was logged).
	keepEpoch   bool
	epochAfter  atomic.Pointer[committedAs]
	follows     *exactlyOnceSink
	checkAdm    *kadm.Client // asks the question (a client of its own: see lanes.go)
	checkOff    bool
	checkFails  int
	checkPaused time.Time
	checkWarned bool

	// traced are the traced records of the open transaction: their spans
	// end with its commit or abort.
	traced []outRecord
}

func newExactlyOnceSink(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, opts sinkOptions) *exactlyOnceSink {
	return &exactlyOnceSink{kafkaSink: newKafkaSink(ctx, cl, store, opts)}
}

// newLane is a second exactly-once sink, on cl with a transactional id of
// its own, following first: batches alternate between the lanes
// (commit.go). Before each commit it checks, through check (a client of its
// own, no transactional id), that the first lane's id is still this
// instance's (lanes.go).
func newLane(ctx context.Context, cl, check *kgo.Client, store *checkpoint.Store, opts sinkOptions, first *exactlyOnceSink) *exactlyOnceSink {
	s := newExactlyOnceSink(ctx, cl, store, opts)
	first.keepEpoch = true
	s.follows = first
	// What one lane learned of a topic holds for both (created once,
	// a refusal to create it logged once, read again once per attempt).
	s.topics, s.reread = first.topics, first.reread
	s.checkAdm = kadm.NewClient(check)
	return s
}

func (s *exactlyOnceSink) begin() error {
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

// produce sends rec asynchronously within the open Kafka transaction.
func (s *exactlyOnceSink) produce(_ context.Context, rec outRecord) error {
	if err := s.lease.Err(); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	if rec.span.Traced() {
		s.traced = append(s.traced, rec)
	}
	s.cl.Produce(s.pctx, rec.Record, s.promise)
	return nil
}

// endSpans ends the spans of the open transaction's traced records:
// published when err is nil.
func (s *exactlyOnceSink) endSpans(err error) {
	for i, rec := range s.traced {
		rec.span.End(rec.Record, err)
		s.traced[i] = outRecord{}
	}
	s.traced = s.traced[:0]
}

// seal runs commitBatch in the attempt's goroutines: its result arrives on
// the channel returned.
func (s *exactlyOnceSink) seal(ctx context.Context, cp *checkpoint.Checkpoint, settle bool, flushed chan<- struct{}) (<-chan commitResult, commitResult) {
	began := time.Now()
	done := make(chan commitResult, 1)
	s.group.start(func() {
		written, err := s.commitBatch(ctx, cp, settle, flushed)
		done <- commitResult{written, err, time.Since(began)}
	})
	return done, commitResult{}
}

// commit ends the batch with cp: after it returns nil, every record of the
// batch and cp are durably committed, and it returns cp.
func (s *exactlyOnceSink) commit(ctx context.Context, cp *checkpoint.Checkpoint) (*checkpoint.Checkpoint, error) {
	return s.commitBatch(ctx, cp, true, nil)
}

// commitBatch is commit; settle says whether the next transaction's first
// produce waits for the coordinator to complete this one (txnsettle.go):
// false after a batch cut by its size bound, when more records are
// waiting (catch-up). flushed (may be nil) is closed once every record of
// the batch, its checkpoint among them, is acknowledged, before EndTxn:
// records produced after that (under the other lane's transactional id)
// land after all of them in every partition.
func (s *exactlyOnceSink) commitBatch(ctx context.Context, cp *checkpoint.Checkpoint, settle bool, flushed chan<- struct{}) (*checkpoint.Checkpoint, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	// Once begun, a commit is not cut short by the caller's cancellation
	// (a stop signal): an EndTransaction canceled in flight leaves its
	// outcome unknown. It is bounded by the sink's timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
	defer cancel()
	if err := s.lease.Err(); err != nil {
		return nil, err
	}
	rec, err := s.checkpointRecord(cp)
	if err != nil {
		return nil, err
	}
	s.cl.Produce(s.pctx, rec, s.cpPromise)
	flushErr := s.cl.Flush(ctx)
	if err := s.lease.Err(); err != nil {
		// Lost while flushing: never commit. Had the commit gone out anyway,
		// the next active instance's InitProducerID would have fenced it.
		// The loss comes first: it also fails the records still buffered
		// (the lease's AbortBufferedRecords).
		return nil, err
	}
	if flushErr != nil {
		return nil, fmt.Errorf("flush batch: %w", ackTimeout(flushErr))
	}
	if err := s.err(); err != nil {
		return nil, fmt.Errorf("produce batch: %w%s", s.classify(err), s.refusedAt())
	}
	hit("after-flush")
	if err := s.lease.Err(); err != nil {
		return nil, err // lost since (a failpoint may hold the commit here)
	}
	if flushed != nil {
		close(flushed)
	}
	if err := s.firstLaneOurs(ctx); err != nil {
		return nil, err
	}
	var before producerEpoch
	known := true
	if s.keepEpoch {
		before, known = s.producerState(ctx)
	}
	if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return nil, fmt.Errorf("commit kafka transaction: %w", s.classify(err))
	}
	s.open, s.began = false, time.Time{}
	s.endSpans(nil)
	s.keepCommittedEpoch(ctx, before, known)
	if settle {
		s.settleAfterCommit()
	}
	return cp, nil
}

// acked, drain and finish: a commit is durable when it returns, so there is
// nothing to write later.
func (s *exactlyOnceSink) acked() <-chan struct{}                                 { return nil }
func (s *exactlyOnceSink) drain() (*checkpoint.Checkpoint, error)                 { return nil, nil }
func (s *exactlyOnceSink) finish(context.Context) (*checkpoint.Checkpoint, error) { return nil, nil }

// bound and slowSince: no records are produced outside a transaction whose
// flush is bounded by the timeout (the loop times the commits itself).
func (s *exactlyOnceSink) bound(int)            {}
func (s *exactlyOnceSink) slowSince() time.Time { return time.Time{} }

// openFor is how long the open Kafka transaction has been open (from the
// sink's begin, a little before the broker starts its clock); 0 when none
// is open.
func (s *exactlyOnceSink) openFor() time.Duration {
	if !s.open {
		return 0
	}
	return time.Since(s.began)
}

// abort ends the open Kafka transaction with an abort: none of its records
// becomes visible, and the last stable offsets of its partitions (the
// shared checkpoint topic's among them) move on now instead of after the
// transaction timeout. Records buffered and not yet sent are dropped. Call
// it when an attempt fails, with a fresh context (the attempt's own may be
// canceled); it waits at most the sink's timeout. Afterwards a new
// transaction can begin on the same client (unless it is fenced). Without
// an open transaction it does nothing.
func (s *exactlyOnceSink) abort(ctx context.Context) error {
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
	s.errMu.Lock()
	s.firstErr = nil // the aborted records' errors (ErrAborting) end with them
	s.refused = refusedBatch{}
	s.errMu.Unlock()
	return nil
}

// classify is errclass.Kafka, and tells a transaction the broker aborted for
// being open too long (ErrTxnTimedOut) from a fence: the broker answers both
// with the same fencing errors.
func (s *exactlyOnceSink) classify(err error) error {
	c := errclass.Kafka(err)
	if open := s.openFor(); errors.Is(c, ErrFenced) && s.txnTimeout > 0 && open >= s.txnTimeout {
		return fmt.Errorf("%w: open for %s, kafka.transaction_timeout is %s: the broker aborted it and bumped the producer epoch: %w",
			ErrTxnTimedOut, open.Round(time.Millisecond), s.txnTimeout, err)
	}
	return c
}
