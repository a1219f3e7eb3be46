package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/ha"
)

// ErrFenced: another instance with the same name took over. Fatal: the
// fenced instance must never commit again.
var ErrFenced = newError(Fenced, "fenced", "producer fenced by another instance with the same name")

// ErrTxnTimedOut: the broker aborted the open Kafka transaction because it
// stayed open for kafka.transaction_timeout, and bumped the producer epoch,
// so the producer's next request was refused as if another instance had
// fenced it. Nothing of the transaction is visible. Not fatal: the relay
// resumes from the committed checkpoint. It does not wrap ErrFenced.
var ErrTxnTimedOut = newError(Transient, "kafka_txn_timeout", "kafka transaction timed out")

// sink writes batches to Kafka. Exactly-once: each batch is one Kafka
// transaction ending with its checkpoint record. At-least-once: a batch's
// checkpoint is written once every record of it and of the batches before it
// is acknowledged; the loop goes on reading meanwhile.
//
// Only the relay loop goroutine calls its methods; the produce callbacks only
// record the first error and count acknowledgements.
type sink struct {
	sinkOptions
	cl       *kgo.Client
	adm      *kadm.Client
	store    *checkpoint.Store
	topics   map[string]topicInfo // shared by the lanes (addLane): only the loop touches them
	reread   map[string]bool      // topics learned again (rereadTopic)
	open     bool                 // a batch has begun (exactly-once: a Kafka transaction is open)
	began    time.Time            // exactly-once: when the open Kafka transaction began
	pctx     context.Context
	errMu    sync.Mutex
	firstErr error
	refused  refusedBatch // records Kafka refused for their content (recordcheck.go); under errMu
	promise  func(*kgo.Record, error)

	// At-least-once: the open batch, and batches ended but not yet
	// acknowledged in full, oldest first. acked wakes the loop when a batch
	// may have become complete.
	cur          *aloBatch
	sealed       []*aloBatch
	acked        chan struct{}
	cpInFlight   atomic.Bool              // a checkpoint record is not yet acknowledged
	cpPromise    func(*kgo.Record, error) // the checkpoint record's callback
	cpOffset     atomic.Int64             // offset of the last checkpoint record acknowledged; -1: none
	unacked      atomic.Int64             // records produced, not yet acknowledged
	unackedBytes atomic.Int64             // their key and value bytes

	// Exactly-once: the answer to whether the last committed transaction is
	// complete at its coordinator (txnsettle.go); nil when none is awaited.
	settled     chan settleAnswer
	settleOff   bool // the coordinator cannot answer: do not ask
	settleFails int  // settle waits failed in a row
	// settlePaused: no settle wait before this time (too many failed in a
	// row); settleWarned: that was logged in this attempt.
	settlePaused time.Time
	settleWarned bool
	txnID        string // the client's transactional id, once looked up
	settleWaits  atomic.Int64

	// lastSlow (at-least-once): when a wait for acknowledgements last took
	// a quarter of the timeout or more (batchlimit.go).
	lastSlow time.Time

	// Two lanes (lanes.go): the first lane keeps its producer id and epoch
	// after each commit (keepEpoch, epochAfter); the second lane checks,
	// before each commit, that the first lane's transactional id is still
	// this instance's (follows; checkOff once the brokers refuse to tell,
	// checkFails failed in a row, no check before checkPaused, checkWarned
	// once a failed check was logged).
	keepEpoch   bool
	epochAfter  atomic.Pointer[committedAs]
	follows     *sink
	checkAdm    *kadm.Client // asks the question (a client of its own: see lanes.go)
	checkOff    bool
	checkFails  int
	checkPaused time.Time
	checkWarned bool
}

// sinkOptions are the sink's settings.
type sinkOptions struct {
	txn     bool          // exactly-once: one Kafka transaction per batch
	timeout time.Duration // bound of each wait on Kafka
	parts   int32         // partitions of a topic the sink creates
	// txnTimeout is the producer's transaction timeout
	// (kafka.transaction_timeout): a fencing error on a transaction open
	// at least this long is ErrTxnTimedOut, not ErrFenced.
	txnTimeout time.Duration
	repl       int16 // its replication factor
	// maxUnacked (at-least-once) bounds records produced and not yet
	// acknowledged; keep it below the client's MaxBufferedRecords so that
	// Produce never blocks on a full buffer, where no context would end it.
	maxUnacked int64
	// maxUnackedBytes (at-least-once) bounds the key and value bytes of
	// those records: large rows must not fill memory.
	maxUnackedBytes int64
	log             zerolog.Logger // notes of topics the broker refused to create
	limits          *topicLimits   // franz-go's per-topic batch limit; nil: its default for every topic
	place           *placements    // partition counts keys are placed by (placement.go); nil: the topics' own
	group           *goroutines    // the attempt's: starts the sink's goroutines (goroutines.go)
	// lease is the term the sink publishes for (nil without an election):
	// once it is lost the sink produces and commits nothing more.
	lease *ha.Lease
}

// aloBatch is an at-least-once batch: its records not yet acknowledged and,
// once it has ended, its checkpoint.
type aloBatch struct {
	pending atomic.Int64
	cp      *checkpoint.Checkpoint
	promise func(*kgo.Record, error)
}

func newSink(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, opts sinkOptions) *sink {
	s := &sink{sinkOptions: opts, cl: cl, adm: kadm.NewClient(cl), store: store,
		topics: map[string]topicInfo{store.Topic(): {partitions: 1, maxBytes: maxBatchBytes}}, reread: map[string]bool{}, pctx: ctx}
	s.promise = func(r *kgo.Record, err error) {
		if err != nil {
			s.errMu.Lock()
			if s.firstErr == nil {
				s.firstErr = err
			}
			var ke *kerr.Error
			if errors.As(err, &ke) && recordRefusal(ke) {
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
		if !opts.txn {
			s.cpInFlight.Store(false)
			s.wake()
		}
	}
	if !opts.txn {
		s.acked = make(chan struct{}, 1)
	}
	if s.lease != nil {
		s.lease.OnLost(func() {
			// Fail what is buffered and not yet sent, now, from another
			// goroutine (safe alongside a Flush); the loop stops too.
			// Not once the attempt is over: its client is closed.
			opts.group.start(func() {
				actx, cancel := context.WithTimeout(context.Background(), opts.timeout)
				defer cancel()
				_ = cl.AbortBufferedRecords(actx)
			})
		})
	}
	return s
}

// awaitVisible waits until the last checkpoint record acknowledged is visible
// to read_committed readers (see checkpoint.Store.AwaitVisible), so that a
// `checkpoint show` right after the relay stops shows it.
func (s *sink) awaitVisible(ctx context.Context) error {
	o := s.cpOffset.Load()
	if o < 0 {
		return nil
	}
	return s.store.AwaitVisible(ctx, s.adm, o)
}

// wake tells the loop that drain may have work.
func (s *sink) wake() {
	select {
	case s.acked <- struct{}{}:
	default:
	}
}

// newBatch starts an at-least-once batch whose records share one callback.
func (s *sink) newBatch() *aloBatch {
	b := &aloBatch{}
	b.promise = func(r *kgo.Record, err error) {
		s.promise(r, err) // the error is recorded before the count drops
		s.unacked.Add(-1)
		s.unackedBytes.Add(-int64(len(r.Key) + len(r.Value)))
		if b.pending.Add(-1) == 0 {
			s.wake()
		}
	}
	return b
}

func (s *sink) err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.firstErr
}

// refusedAt names the records Kafka refused for their content, if any.
func (s *sink) refusedAt() string {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.refused.String()
}

// topicInfo is what the sink knows of a topic it writes to.
type topicInfo struct {
	partitions int32
	maxBytes   int         // largest record the topic accepts
	stamps     stampBounds // the timestamps it accepts (recordcheck.go)
}

// maxBatchBytes is franz-go's default ProducerBatchMaxBytes: no record may
// be larger, whatever the topic allows.
const maxBatchBytes = 1_000_012

// ensureTopic creates topic if this sink has not seen it yet and learns its
// partition count and max.message.bytes.
// brokersRestarting reports whether an INVALID_REPLICATION_FACTOR answer
// can be passing: the cluster's metadata lists at least as many brokers as
// the replication factor asks for (kafka.replication_factor larger than the
// cluster stays a configuration error).
func (s *sink) brokersRestarting(ctx context.Context) bool {
	md, err := s.adm.BrokerMetadata(ctx)
	return err == nil && (s.repl <= 0 || len(md.Brokers) >= int(s.repl))
}

// rereadTopic forgets what the sink knows of topic and learns it again,
// once per topic and attempt (a record over its max.message.bytes: the
// operator may have raised it since); it reports whether it did.
func (s *sink) rereadTopic(ctx context.Context, topic string) (topicInfo, bool, error) {
	if s.reread[topic] {
		return s.topics[topic], false, nil
	}
	s.reread[topic] = true
	delete(s.topics, topic)
	info, err := s.ensureTopic(ctx, topic)
	return info, true, err
}

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
	var refused error
	switch {
	case err == nil, errors.Is(err, kerr.TopicAlreadyExists):
	case adminRefused(err):
		refused = err // least privilege: the topic may exist (topicauth.go)
	case errors.Is(err, kerr.InvalidReplicationFactor) && s.brokersRestarting(ctx):
		// Right after a broker restart, KRaft registers brokers before it
		// unfences them: CreateTopics counts none available. Passing.
		return topicInfo{}, fmt.Errorf("create topic %s: %v (the brokers are registered but not yet available: retried)", topic, err)
	default:
		return topicInfo{}, fmt.Errorf("create topic %s: %w", topic, classify(err))
	}
	info := topicInfo{maxBytes: maxBatchBytes}
	details, err := s.adm.ListTopics(ctx, topic)
	if err == nil {
		err = details[topic].Err
	}
	if err != nil && refused != nil && errors.Is(err, kerr.UnknownTopicOrPartition) {
		return topicInfo{}, missingTopic(topic, refused, err)
	}
	if err != nil {
		return topicInfo{}, fmt.Errorf("describe topic %s: %w", topic, classify(err))
	}
	if refused != nil {
		noteCreateRefused(s.log, topic, refused)
	}
	info.partitions = int32(len(details[topic].Partitions))
	if err := s.place.learn(topic, info.partitions); err != nil {
		return topicInfo{}, err
	}
	rc, err := s.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil && !adminRefused(err) {
		return topicInfo{}, fmt.Errorf("describe topic %s configs: %w", topic, classify(err))
	}
	if cfgs, err := rc.On(topic, nil); err == nil {
		for _, c := range cfgs.Configs {
			if v, err := strconv.Atoi(c.MaybeValue()); c.Key == "max.message.bytes" && err == nil && v > 0 {
				info.maxBytes = min(v, maxTopicBytes) // the batches follow it (topicLimits)
			}
			info.stamps.take(c.Key, c.MaybeValue())
		}
	}
	s.topics[topic] = info
	if s.limits != nil {
		s.limits.set(topic, info.maxBytes)
	}
	return info, nil
}

// recordSize is rec's size as the only record of a record batch, counted as
// franz-go counts it against its batch limit (ProducerBatchMaxBytes) before
// it knows the broker's produce version, its largest count: the batch header
// with the 4-byte length franz-go adds (65 bytes; Kafka itself counts 61),
// one byte for the length prefix of flexible versions, and the record's
// fields with their varint lengths.
func recordSize(rec *kgo.Record) int {
	l := 1 + 1 + 1 + // attributes, timestamp delta 0, offset delta 0
		kbin.VarintLen(int32(len(rec.Key))) + len(rec.Key) +
		kbin.VarintLen(int32(len(rec.Value))) + len(rec.Value) +
		kbin.VarintLen(int32(len(rec.Headers)))
	for _, h := range rec.Headers {
		l += kbin.VarintLen(int32(len(h.Key))) + len(h.Key) + kbin.VarintLen(int32(len(h.Value))) + len(h.Value)
	}
	return recordBatchOverhead + 1 + kbin.VarintLen(int32(l)) + l
}

// checkpointRecord is cp's record, refused with a clear error when it is
// larger than the client sends (many prepared XA transactions listed).
func (s *sink) checkpointRecord(cp *checkpoint.Checkpoint) (*kgo.Record, error) {
	rec := s.store.Record(cp)
	if n := recordSize(rec); n > maxBatchBytes {
		xa := 0
		if cp.XA != nil {
			xa = len(cp.XA.Prepared)
		}
		return nil, fmt.Errorf("%w: checkpoint record of %d bytes, the client sends at most %d (it lists %d prepared XA transactions with outbox rows: commit or roll them back)",
			ErrRejected, n, maxBatchBytes, xa)
	}
	return rec, nil
}

// recordBatchOverhead is the size of a record batch without records as
// franz-go counts it (Kafka's record batch v2 header and the record count).
const recordBatchOverhead = 65

// maxTopicBytes bounds what the relay takes from a topic's
// max.message.bytes for its batches and records.
const maxTopicBytes = 64 << 20

// topicLimits holds the max.message.bytes of the topics the sink writes to
// for franz-go's per-topic batch limit, which it asks for from its own
// goroutines when it first meets a partition (after ensureTopic stored it).
type topicLimits struct{ m sync.Map } // topic -> int32

// batchMaxBytes is the largest record batch franz-go may build for topic.
func (t *topicLimits) batchMaxBytes(topic string) int32 {
	if v, ok := t.m.Load(topic); ok {
		return v.(int32)
	}
	return maxBatchBytes
}

// set stores topic's largest record batch: its max.message.bytes (franz-go
// checks only its default's range; a smaller per-topic value is used as is).
func (t *topicLimits) set(topic string, maxBytes int) {
	t.m.Store(topic, int32(min(max(maxBytes, 1), maxTopicBytes)))
}

func (s *sink) begin() error {
	if s.open {
		return nil
	}
	if s.txn {
		s.awaitSettled()
		if err := s.cl.BeginTransaction(); err != nil {
			return fmt.Errorf("begin kafka transaction: %w", s.classify(err))
		}
		s.began = time.Now()
	} else {
		s.cur = s.newBatch()
	}
	s.open = true
	return nil
}

// produce sends rec asynchronously within the open batch.
func (s *sink) produce(ctx context.Context, rec *kgo.Record) error {
	if err := s.lease.Err(); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	if !s.txn {
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
		s.cl.Produce(s.pctx, rec, s.cur.promise)
		return nil
	}
	s.cl.Produce(s.pctx, rec, s.promise)
	return nil
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
func (s *sink) sendNow() {
	_ = s.cl.Flush(endedCtx)
}

// endedCtx is a context that has already ended (sendNow).
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// commit ends the batch with cp. Exactly-once: after it returns nil, every
// record of the batch and cp are durably committed, and it returns cp.
// At-least-once: cp is written once the batch is acknowledged (see drain);
// it returns the checkpoint it wrote, if any.
func (s *sink) commit(ctx context.Context, cp *checkpoint.Checkpoint) (*checkpoint.Checkpoint, error) {
	return s.commitBatch(ctx, cp, true, nil)
}

// commitBatch is commit; settle says whether the next transaction's first
// produce waits for the coordinator to complete this one (txnsettle.go):
// false after a batch cut by its size bound, when more records are
// waiting (catch-up). flushed (exactly-once; may be nil) is closed once
// every record of the batch, its checkpoint among them, is acknowledged,
// before EndTxn: records produced after that (under the other lane's
// transactional id) land after all of them in every partition.
func (s *sink) commitBatch(ctx context.Context, cp *checkpoint.Checkpoint, settle bool, flushed chan<- struct{}) (*checkpoint.Checkpoint, error) {
	if err := s.begin(); err != nil {
		return nil, err
	}
	if !s.txn {
		s.cur.cp = cp
		s.sealed = append(s.sealed, s.cur)
		s.cur, s.open = nil, false
		return s.drain()
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
	s.keepCommittedEpoch(ctx, before, known)
	if settle {
		s.settleAfterCommit()
	}
	return cp, nil
}

// drain (at-least-once) writes the checkpoint of the newest ended batch that
// is acknowledged together with every batch before it, and returns it (nil
// when there is none, or while the previous checkpoint record is in flight:
// its acknowledgement wakes the loop again, so a catch-up writes one
// checkpoint per round trip, not one per batch). A failed record stops it:
// the error ends the attempt and the relay resumes from the last checkpoint
// written, publishing some records again, never skipping one. The checkpoint
// record itself is not waited for: a later failure of it is reported by the
// next drain or by finish.
func (s *sink) drain() (*checkpoint.Checkpoint, error) {
	if s.txn || s.cpInFlight.Load() {
		return nil, nil
	}
	done := 0
	for done < len(s.sealed) && s.sealed[done].pending.Load() == 0 {
		done++
	}
	if err := s.err(); err != nil {
		return nil, fmt.Errorf("produce batch: %w%s", classify(err), s.refusedAt())
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

// finish waits until everything committed so far is durable: at-least-once,
// every ended batch acknowledged and its checkpoint written. It returns the
// last checkpoint it wrote, if any.
func (s *sink) finish(ctx context.Context) (*checkpoint.Checkpoint, error) {
	if s.txn {
		return nil, nil
	}
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
		return nil, fmt.Errorf("write checkpoint: %w", classify(err))
	}
	return cp, nil
}

// openFor is how long the open Kafka transaction has been open (from the
// sink's begin, a little before the broker starts its clock); 0 when none
// is open or delivery is at-least-once.
func (s *sink) openFor() time.Duration {
	if !s.txn || !s.open {
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
// an open transaction it does nothing; at-least-once it only forgets the
// open batch (what was sent stays sent).
func (s *sink) abort(ctx context.Context) error {
	if !s.open {
		return nil
	}
	if !s.txn {
		s.cur, s.open = nil, false
		return nil
	}
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

// classify is classify, and tells a transaction the broker aborted for
// being open too long (ErrTxnTimedOut) from a fence: the broker answers both
// with the same fencing errors.
func (s *sink) classify(err error) error {
	c := classify(err)
	if open := s.openFor(); errors.Is(c, ErrFenced) && s.txnTimeout > 0 && open >= s.txnTimeout {
		return fmt.Errorf("%w: open for %s, kafka.transaction_timeout is %s: the broker aborted it and bumped the producer epoch: %w",
			ErrTxnTimedOut, open.Round(time.Millisecond), s.txnTimeout, err)
	}
	return c
}

// ErrRejected: Kafka refuses a record or topic for good (too large, invalid,
// not authorised); retrying the same batch cannot succeed.
var ErrRejected = newError(Refused, "rejected", "kafka rejected the batch")

// classify sorts a Kafka error by franz-go's kerr properties. Retriable
// errors, and errors that are not Kafka's (a connection, a timeout), are
// returned as they are: the attempt ends and the next one resumes from the
// checkpoint. Of the errors Kafka calls non-retriable, those that mean
// another producer took the transactional id over (PRODUCER_FENCED,
// INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, and
// INVALID_TXN_STATE, kfake's answer to a fenced commit and to a produce into
// a transaction the coordinator aborted) wrap ErrFenced, and those that
// refuse the request for good (not authorised, invalid or too large a
// record, invalid topic or topic settings) wrap ErrRejected. Other
// non-retriable errors (TRANSACTION_ABORTABLE, UNKNOWN_PRODUCER_ID,
// OUT_OF_ORDER_SEQUENCE_NUMBER, UNKNOWN_SERVER_ERROR...) end the attempt
// like retriable ones: a new client from the checkpoint recovers from them.
func classify(err error) error {
	var ke *kerr.Error
	if err == nil || !errors.As(err, &ke) {
		return err
	}
	if ke.Retriable {
		return err
	}
	if recordRefusal(ke) { // a record's content (recordcheck.go)
		return fmt.Errorf("%w: %w: %w", ErrRejected, ErrRecordRefused, err)
	}
	switch {
	case fencing(ke):
		return fmt.Errorf("%w: %w", ErrFenced, err)
	case refusal(ke):
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return err
}

// fencing reports a non-retriable error that means the producer's epoch is
// no longer current: another instance initialised the same transactional
// id, or the coordinator aborted the transaction.
func fencing(ke *kerr.Error) bool {
	switch ke.Code {
	case kerr.ProducerFenced.Code, kerr.InvalidProducerEpoch.Code, kerr.InvalidTxnState.Code:
		return true
	}
	return false
}

// refusal reports a non-retriable error that refuses the request itself,
// whenever it is sent: authorisation, and the content of a record or topic.
func refusal(ke *kerr.Error) bool {
	if strings.HasSuffix(ke.Message, "_AUTHORIZATION_FAILED") || strings.HasPrefix(ke.Message, "SASL_") {
		return true
	}
	switch ke.Code {
	case kerr.MessageTooLarge.Code, kerr.RecordListTooLarge.Code, kerr.InvalidRecord.Code, kerr.InvalidTimestamp.Code,
		kerr.InvalidTopicException.Code, kerr.PolicyViolation.Code, kerr.InvalidRequiredAcks.Code,
		kerr.UnsupportedForMessageFormat.Code, kerr.UnsupportedCompressionType.Code,
		kerr.InvalidPartitions.Code, kerr.InvalidReplicationFactor.Code, kerr.InvalidReplicaAssignment.Code, kerr.InvalidConfig.Code:
		return true
	}
	return false
}

// ackTimeout marks a flush that ran out of time as errAckTimeout.
func ackTimeout(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", errAckTimeout, err)
	}
	return err
}
