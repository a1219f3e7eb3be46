package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// ErrFenced: another instance with the same name took over. Fatal: the
// fenced instance must never commit again.
var ErrFenced = errors.New("producer fenced by another instance with the same name")

// sink writes batches to Kafka. Exactly-once: each batch is one Kafka
// transaction ending with its checkpoint record. At-least-once: the batch's
// records are flushed and acknowledged, then the checkpoint is written.
//
// Only the relay loop goroutine calls its methods; the produce callback only
// records the first error.
type sink struct {
	cl       *kgo.Client
	adm      *kadm.Client
	store    *checkpoint.Store
	txn      bool
	timeout  time.Duration
	parts    int32
	repl     int16
	topics   map[string]bool
	open     bool // a batch has begun (exactly-once: a Kafka transaction is open)
	pctx     context.Context
	errMu    sync.Mutex
	firstErr error
	promise  func(*kgo.Record, error)
}

func newSink(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, txn bool, timeout time.Duration, parts int32, repl int16) *sink {
	s := &sink{cl: cl, adm: kadm.NewClient(cl), store: store, txn: txn, timeout: timeout,
		parts: parts, repl: repl, topics: map[string]bool{store.Topic(): true}, pctx: ctx}
	s.promise = func(_ *kgo.Record, err error) {
		if err != nil {
			s.errMu.Lock()
			if s.firstErr == nil {
				s.firstErr = err
			}
			s.errMu.Unlock()
		}
	}
	return s
}

func (s *sink) err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.firstErr
}

// ensureTopic creates topic if this sink has not seen it yet.
func (s *sink) ensureTopic(ctx context.Context, topic string) error {
	if s.topics[topic] {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.adm.CreateTopic(ctx, s.parts, s.repl, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	s.topics[topic] = true
	return nil
}

func (s *sink) begin() error {
	if s.open {
		return nil
	}
	if s.txn {
		if err := s.cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin kafka transaction: %w", classify(err))
		}
	}
	s.open = true
	return nil
}

// produce sends rec asynchronously within the open batch.
func (s *sink) produce(rec *kgo.Record) error {
	if err := s.begin(); err != nil {
		return err
	}
	s.cl.Produce(s.pctx, rec, s.promise)
	return nil
}

// commit ends the batch with cp: after it returns nil, every record of the
// batch and cp are durably committed.
func (s *sink) commit(ctx context.Context, cp *checkpoint.Checkpoint) error {
	if err := s.begin(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.txn {
		s.cl.Produce(s.pctx, s.store.Record(cp), s.promise)
		if err := s.cl.Flush(ctx); err != nil {
			return fmt.Errorf("flush batch: %w", err)
		}
		if err := s.err(); err != nil {
			return fmt.Errorf("produce batch: %w", classify(err))
		}
		hit("after-flush")
		if err := s.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			if errors.Is(err, kerr.InvalidTxnState) {
				// The coordinator no longer has our open transaction: a newer
				// instance initialised the same transactional id and aborted it.
				// (Kafka says PRODUCER_FENCED; kfake says INVALID_TXN_STATE.)
				return fmt.Errorf("commit kafka transaction: %w: %w", ErrFenced, err)
			}
			return fmt.Errorf("commit kafka transaction: %w", classify(err))
		}
		s.open = false
		return nil
	}
	// At-least-once: the checkpoint goes out only once every record before it
	// is acknowledged. It is not waited for: the next commit's flush (or
	// finish) covers it, and if it fails that flush reports it and the relay
	// resumes from the previous checkpoint, publishing some records again.
	if err := s.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush batch: %w", err)
	}
	if err := s.err(); err != nil {
		return fmt.Errorf("produce batch: %w", classify(err))
	}
	hit("after-flush")
	s.cl.Produce(s.pctx, s.store.Record(cp), s.promise)
	s.open = false
	return nil
}

// finish waits until everything committed so far is durable: at-least-once,
// the last checkpoint's acknowledgement.
func (s *sink) finish(ctx context.Context) error {
	if s.txn {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := s.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush checkpoint: %w", err)
	}
	if err := s.err(); err != nil {
		return fmt.Errorf("write checkpoint: %w", classify(err))
	}
	return nil
}

// classify wraps fencing errors in ErrFenced.
func classify(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return err
}
