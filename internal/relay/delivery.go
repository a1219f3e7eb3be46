package relay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// ErrTxnTimedOut: the broker aborted the open Kafka transaction because it
// stayed open for kafka.transaction_timeout, and bumped the producer epoch,
// so the producer's next request was refused as if another instance had
// fenced it. Nothing of the transaction is visible. Not fatal: the relay
// resumes from the committed checkpoint. It does not wrap errclass.ErrFenced.
var ErrTxnTimedOut = errclass.New(errclass.Transient, "kafka_txn_timeout", "kafka transaction timed out")

// delivery takes the pipeline's batches to Kafka, one implementation per
// kafka.delivery, each owning all of its state:
//
//   - exactlyOnce (exactlyonce.go): each batch is one Kafka transaction
//     ending with its checkpoint record, committed by its lane's goroutine
//     while the pipeline reads on; the records sent meanwhile are held and
//     go into the next transaction (two lanes: as soon as the batch in
//     flight is flushed); the settle wait and the second lane's check are
//     its lanes' (lane.go, lanes.go, txnsettle.go).
//   - atLeastOnce (atleastonce.go): a batch's checkpoint is written once
//     every record of it and of the batches before it is acknowledged;
//     send waits for acknowledgements past a bound (back-pressure).
//
// The pipeline's goroutine calls send and stop; run is the delivery's own
// goroutines, one part of the attempt. What comes back is the committed
// stream (and send's back-pressure): nothing else of the delivery reaches
// the pipeline.
type delivery interface {
	// send adds b's records to the open batch and, when b.seal is set, ends
	// the batch with that checkpoint. It reports whether the seal is still
	// in flight: the pipeline ends no other batch until the committed
	// stream has answered for it.
	send(ctx context.Context, b part) (inFlight bool, err error)
	// committed is the stream of checkpoints now durable, in the order of
	// their batches, and of batches that failed (the attempt then ends).
	committed() <-chan committed
	// run runs the delivery's goroutines until ctx ends; a lease lost (the
	// cause of ctx) fails what is buffered and not yet sent.
	run(ctx context.Context) error
	// stop ends the delivery once the pipeline has. Clean, it waits until
	// everything sent is durable, writes the last checkpoint and waits until
	// read_committed readers see it, and returns the last checkpoint it
	// wrote (nil: none besides the stream's); otherwise it forgets the open
	// batch (exactly-once: aborts the open transactions, so that none of
	// their records becomes visible and the partitions' last stable offsets
	// move on now). Call it with a fresh, bounded context.
	stop(ctx context.Context, clean bool) (*checkpoint.Checkpoint, error)
}

// part is what the pipeline hands the delivery in one call: the records of
// source transactions that ended (or a part of a split one) and, when they
// end the batch, its seal.
type part struct {
	records []pendingRecord
	seal    *seal
	// bound is how many records may be produced and not yet acknowledged
	// (twice the pipeline's batch bound): at-least-once's back-pressure.
	bound int
}

// seal ends a batch.
type seal struct {
	cp      *checkpoint.Checkpoint
	records int                  // the batch's records
	topics  map[topicOutcome]int // its records by topic and outcome
	partial bool                 // it commits part of the source transaction being read
	// more: the batch was cut by its size bound with rows handed over
	// behind it (catch-up): the next Kafka transaction does not wait for
	// the coordinator to complete this one (txnsettle.go).
	more bool
}

// committed is one answer of the committed stream.
type committed struct {
	cp  *checkpoint.Checkpoint // durable now (nil: none)
	err error                  // the batch failed
	// slow is when a wait on Kafka (a commit, or at-least-once a wait for
	// acknowledgements) last took a quarter of kafka.request_timeout or
	// more (zero: none): the batch bound grows again only after a minute
	// without one (batchlimit.go).
	slow time.Time
}

// deliveryOptions are a delivery's settings.
type deliveryOptions struct {
	timeout time.Duration // bound of each wait on Kafka
	// txnTimeout is the producer's transaction timeout
	// (kafka.transaction_timeout): a fencing error on a transaction open
	// at least this long is ErrTxnTimedOut, not errclass.ErrFenced.
	txnTimeout time.Duration
	// maxUnackedBytes (at-least-once) bounds the key and value bytes of
	// the records produced and not yet acknowledged: large rows must not
	// fill memory.
	maxUnackedBytes int64
	log             zerolog.Logger
	metrics         *metrics.Metrics // nil: not counted (tests)
	// lease is the term the delivery publishes for (nil without an
	// election): once it is lost it produces and commits nothing more.
	lease *ha.Lease
}

// producer is what both deliveries' producers share: the client, the
// checkpoint store, the first error of a produce, the lease.
type producer struct {
	deliveryOptions
	cl       *kgo.Client
	adm      *kadm.Client
	store    *checkpoint.Store
	pctx     context.Context // what records are produced under
	errMu    sync.Mutex
	firstErr error
	refused  refusedBatch // records Kafka refused for their content (recordcheck.go); under errMu
	promise  func(*kgo.Record, error)

	cpPromise func(*kgo.Record, error) // the checkpoint record's callback
	cpOffset  atomic.Int64             // offset of the last checkpoint record acknowledged; -1: none
}

func newProducer(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, opts deliveryOptions) *producer {
	s := &producer{deliveryOptions: opts, cl: cl, adm: kadm.NewClient(cl), store: store, pctx: ctx}
	s.promise = func(r *kgo.Record, err error) {
		if err != nil {
			s.errMu.Lock()
			if s.firstErr == nil {
				s.firstErr = err
			}
			if kafkaerr.KindOf(err) == kafkaerr.RecordRefused {
				s.refused.note(r)
			}
			s.errMu.Unlock()
		}
	}
	s.cpOffset.Store(-1)
	s.cpPromise = func(r *kgo.Record, err error) {
		s.promise(r, err)
		if err == nil {
			s.cpOffset.Store(r.Offset)
		}
	}
	return s
}

// awaitVisible waits until the last checkpoint record acknowledged is visible
// to read_committed readers (see checkpoint.Store.AwaitVisible), so that a
// `checkpoint show` right after the relay stops shows it.
func (s *producer) awaitVisible(ctx context.Context) error {
	o := s.cpOffset.Load()
	if o < 0 {
		return nil
	}
	return s.store.AwaitVisible(ctx, s.adm, o)
}

// abortBuffered fails the records buffered and not yet sent, at once (a
// lost lease: nothing more may go out); safe beside a Flush.
func (s *producer) abortBuffered() {
	actx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	_ = s.cl.AbortBufferedRecords(actx)
}

func (s *producer) err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.firstErr
}

// refusedAt names the records Kafka refused for their content, if any.
func (s *producer) refusedAt() string {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.refused.String()
}

// checkpointRecord is cp's record, refused with a clear error when it is
// larger than the client sends (many prepared XA transactions listed).
func (s *producer) checkpointRecord(cp *checkpoint.Checkpoint) (*kgo.Record, error) {
	rec := s.store.Record(cp)
	if n := recordSize(rec); n > clients.MaxBatchBytes {
		xa := 0
		if cp.XA != nil {
			xa = len(cp.XA.Prepared)
		}
		return nil, fmt.Errorf("%w: checkpoint record of %d bytes, the client sends at most %d (it lists %d prepared XA transactions with outbox rows: commit or roll them back)",
			errclass.ErrRejected, n, clients.MaxBatchBytes, xa)
	}
	return rec, nil
}

// sendNow sends the records the producer holds for its linger at once,
// without waiting for their acknowledgements. franz-go has no call of its
// own for that: Flush ends the linger of every partition it knows and wakes
// the goroutine that sends to the broker before it waits, and with a
// context already ended it returns at once (its wait is abandoned; the
// records stay in flight and their promises report them as usual). Records
// to a topic whose partitions the client has not loaded yet (its first
// records to that topic in the attempt) are not reached: they start their
// linger once the partitions are known.
func (s *producer) sendNow() {
	_ = s.cl.Flush(endedCtx)
}

// endedCtx is a context that has already ended (sendNow).
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// slowSince is now when a wait on Kafka that took took was slow (a quarter
// of timeout or more: committed.slow), else zero.
func slowSince(took, timeout time.Duration, now time.Time) time.Time {
	if took >= timeout/4 {
		return now
	}
	return time.Time{}
}

// ackTimeout marks a flush that ran out of time as errAckTimeout.
func ackTimeout(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", errAckTimeout, err)
	}
	return err
}

// accounting counts the batches a delivery ended: Kafka transactions
// committed or aborted, the batches' sizes and the records published per
// topic; the failpoints of a commit boundary (failpoint.go) are here.
// Only one goroutine at a time uses it (the one that ends batches).
type accounting struct {
	m        *metrics.Metrics
	counters map[topicOutcome]prometheus.Counter
}

func newAccounting(m *metrics.Metrics) *accounting {
	return &accounting{m: m, counters: map[topicOutcome]prometheus.Counter{}}
}

// ended accounts for s, a batch whose end failed with err or succeeded;
// took is how long its Kafka transaction's commit took (0: no Kafka
// transaction).
func (a *accounting) ended(s *seal, took time.Duration, err error) {
	if err != nil {
		if a.m != nil {
			a.m.KafkaTransactions.WithLabelValues("abort").Inc()
		}
		return
	}
	if a.m != nil {
		a.m.KafkaTransactions.WithLabelValues("commit").Inc()
		if took > 0 {
			a.m.KafkaTxnSeconds.Observe(took.Seconds())
		}
		a.m.BatchRecords.Observe(float64(s.records))
		for to, n := range s.topics {
			c := a.counters[to]
			if c == nil {
				c = a.m.Events.WithLabelValues(to.topic, to.outcome)
				a.counters[to] = c
			}
			c.Add(float64(n))
		}
	}
	if s.partial {
		hit("after-partial")
	} else {
		hit("after-commit")
	}
}

// errAckTimeout: Kafka did not acknowledge a batch within
// kafka.request_timeout; the attempt ends and the next one uses smaller
// batches.
var errAckTimeout = errclass.New(errclass.Transient, "kafka", "kafka did not acknowledge the batch within kafka.request_timeout")
