package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	topics   map[string]topicInfo
	open     bool // a batch has begun (exactly-once: a Kafka transaction is open)
	pctx     context.Context
	errMu    sync.Mutex
	firstErr error
	promise  func(*kgo.Record, error)
}

func newSink(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, txn bool, timeout time.Duration, parts int32, repl int16) *sink {
	s := &sink{cl: cl, adm: kadm.NewClient(cl), store: store, txn: txn, timeout: timeout,
		parts: parts, repl: repl, topics: map[string]topicInfo{store.Topic(): {partitions: 1, maxBytes: maxBatchBytes}}, pctx: ctx}
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

// topicInfo is what the sink knows of a topic it writes to.
type topicInfo struct {
	partitions int32
	maxBytes   int // largest record the topic accepts
}

// maxBatchBytes is franz-go's default ProducerBatchMaxBytes: no record may
// be larger, whatever the topic allows.
const maxBatchBytes = 1_000_012

// ensureTopic creates topic if this sink has not seen it yet and learns its
// partition count and max.message.bytes.
func (s *sink) ensureTopic(ctx context.Context, topic string) (topicInfo, error) {
	if info, ok := s.topics[topic]; ok {
		return info, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := s.adm.CreateTopic(ctx, s.parts, s.repl, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return topicInfo{}, fmt.Errorf("create topic %s: %w", topic, err)
	}
	info := topicInfo{maxBytes: maxBatchBytes}
	details, err := s.adm.ListTopics(ctx, topic)
	if err == nil {
		err = details[topic].Err
	}
	if err != nil {
		return topicInfo{}, fmt.Errorf("describe topic %s: %w", topic, err)
	}
	info.partitions = int32(len(details[topic].Partitions))
	rc, err := s.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return topicInfo{}, fmt.Errorf("describe topic %s configs: %w", topic, err)
	}
	if cfgs, err := rc.On(topic, nil); err == nil {
		for _, c := range cfgs.Configs {
			if v, err := strconv.Atoi(c.MaybeValue()); c.Key == "max.message.bytes" && err == nil && v > 0 {
				info.maxBytes = min(info.maxBytes, v)
			}
		}
	}
	s.topics[topic] = info
	return info, nil
}

// recordSize is an upper bound of rec's size in a record batch.
func recordSize(rec *kgo.Record) int {
	n := len(rec.Key) + len(rec.Value) + 64
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value) + 8
	}
	return n
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

// ErrRejected: Kafka refuses a record or topic for good (too large, invalid,
// not authorised); retrying the same batch cannot succeed.
var ErrRejected = errors.New("kafka rejected the batch")

// classify wraps fencing errors in ErrFenced and permanent refusals in
// ErrRejected.
func classify(err error) error {
	switch {
	case errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed),
		// The coordinator no longer has our open transaction: a newer
		// instance initialised the same transactional id and aborted it
		// (Kafka says PRODUCER_FENCED, kfake INVALID_TXN_STATE).
		errors.Is(err, kerr.InvalidTxnState):
		return fmt.Errorf("%w: %w", ErrFenced, err)
	case errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.InvalidTopicException) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed):
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}
