package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// ErrTxnTimedOut: the broker aborted the open Kafka transaction because it
// stayed open for kafka.transaction_timeout, and bumped the producer epoch,
// so the producer's next request was refused as if another instance had
// fenced it. Nothing of the transaction is visible. Not fatal: the relay
// resumes from the committed checkpoint. It does not wrap ErrFenced.
var ErrTxnTimedOut = errclass.New(errclass.Transient, "kafka_txn_timeout", "kafka transaction timed out")

// sink is what the pipeline (loop.go) hands its batches to: it produces the
// records of ended source transactions, and ends each batch with its
// checkpoint. Two implementations, one per kafka.delivery:
//
//   - exactlyOnceSink (sink_exactlyonce.go): each batch is one Kafka
//     transaction ending with its checkpoint record; its commit waits on
//     Kafka (flush, EndTxn), so the loop runs it in the background (seal);
//     the settle wait (txnsettle.go) and the second lane's check
//     (lanes.go) are its own.
//   - atLeastOnceSink (sink_atleastonce.go): a batch's checkpoint is written
//     once every record of it and of the batches before it is acknowledged
//     (drain); the loop goes on reading meanwhile, within a bound of
//     unacknowledged records (back-pressure).
//
// Only the relay loop goroutine calls its methods (and, exactly-once, the
// commit it runs in the background, while the loop leaves that sink alone);
// the produce callbacks only record the first error and count
// acknowledgements.
type sink interface {
	// ensureTopic creates topic if the sink has not seen it yet and learns
	// its partition count and max.message.bytes; rereadTopic learns them
	// again, once per topic and attempt, and reports whether it did.
	ensureTopic(ctx context.Context, topic string) (topicInfo, error)
	rereadTopic(ctx context.Context, topic string) (topicInfo, bool, error)
	// placements are the partition counts keys are placed by (nil: the
	// topics' own).
	placements() *placements

	// produce sends rec asynchronously within the open batch, beginning
	// one if none is open, and ends its span once it is published (or
	// will not be); sendNow sends what the producer holds for its linger
	// at once.
	produce(ctx context.Context, rec outRecord) error
	sendNow()
	// isOpen reports whether a batch has begun; openFor is how long the
	// open Kafka transaction has been open (0 when none is, or without
	// transactions).
	isOpen() bool
	openFor() time.Duration

	// seal ends the open batch (or a checkpoint-only one) with cp. When
	// its commit waits on Kafka, seal starts it in the attempt's goroutines
	// and returns the channel its result arrives on; otherwise it returns a
	// nil channel and the result. settle and flushed: see
	// exactlyOnceSink.commitBatch.
	seal(ctx context.Context, cp *checkpoint.Checkpoint, settle bool, flushed chan<- struct{}) (<-chan commitResult, commitResult)
	// acked wakes the loop when drain may have a checkpoint to write (nil:
	// never); drain writes it and returns it (nil: none).
	acked() <-chan struct{}
	drain() (*checkpoint.Checkpoint, error)
	// finish waits until everything sealed so far is durable and returns
	// the last checkpoint it wrote, if any; awaitVisible then waits until
	// the last checkpoint record is visible to read_committed readers.
	finish(ctx context.Context) (*checkpoint.Checkpoint, error)
	awaitVisible(ctx context.Context) error
	// abort forgets the open batch; exactly-once none of its records
	// becomes visible. Call it with a fresh context when an attempt fails.
	abort(ctx context.Context) error

	// bound sets the records the sink may have produced and not yet
	// acknowledged (twice the loop's batch bound; back-pressure);
	// slowSince is when a wait for acknowledgements last took a quarter of
	// the timeout or more (batchlimit.go).
	bound(records int)
	slowSince() time.Time
}

// newSinks builds the sinks of an attempt: at-least-once one; exactly-once
// one per transactional id (lanes.go: the second, on laneCl when it is not
// nil, follows the first and asks through checkCl).
func newSinks(ctx context.Context, cl, laneCl, checkCl *kgo.Client, store *checkpoint.Store, opts sinkOptions, exactlyOnce bool) []sink {
	if !exactlyOnce {
		return []sink{newAtLeastOnceSink(ctx, cl, store, opts)}
	}
	first := newExactlyOnceSink(ctx, cl, store, opts)
	if laneCl == nil {
		return []sink{first}
	}
	return []sink{first, newLane(ctx, laneCl, checkCl, store, opts, first)}
}

// kafkaSink is what both sinks share: the client, the checkpoint store, the
// topics written to, the first error of a produce, the lease.
type kafkaSink struct {
	sinkOptions
	cl       *kgo.Client
	adm      *kadm.Client
	store    *checkpoint.Store
	topics   map[string]topicInfo // shared by the lanes (newLane): only the loop touches them
	reread   map[string]bool      // topics learned again (rereadTopic)
	open     bool                 // a batch has begun (exactly-once: a Kafka transaction is open)
	pctx     context.Context
	errMu    sync.Mutex
	firstErr error
	refused  refusedBatch // records Kafka refused for their content (recordcheck.go); under errMu
	promise  func(*kgo.Record, error)

	cpPromise func(*kgo.Record, error) // the checkpoint record's callback
	cpOffset  atomic.Int64             // offset of the last checkpoint record acknowledged; -1: none

}

// sinkOptions are the sink's settings.
type sinkOptions struct {
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

func newKafkaSink(ctx context.Context, cl *kgo.Client, store *checkpoint.Store, opts sinkOptions) *kafkaSink {
	s := &kafkaSink{sinkOptions: opts, cl: cl, adm: kadm.NewClient(cl), store: store,
		topics: map[string]topicInfo{store.Topic(): {partitions: 1, placeBy: 1, maxBytes: maxBatchBytes}}, reread: map[string]bool{}, pctx: ctx}
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

func (s *kafkaSink) isOpen() bool            { return s.open }
func (s *kafkaSink) placements() *placements { return s.place }

// awaitVisible waits until the last checkpoint record acknowledged is visible
// to read_committed readers (see checkpoint.Store.AwaitVisible), so that a
// `checkpoint show` right after the relay stops shows it.
func (s *kafkaSink) awaitVisible(ctx context.Context) error {
	o := s.cpOffset.Load()
	if o < 0 {
		return nil
	}
	return s.store.AwaitVisible(ctx, s.adm, o)
}

func (s *kafkaSink) err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.firstErr
}

// refusedAt names the records Kafka refused for their content, if any.
func (s *kafkaSink) refusedAt() string {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.refused.String()
}

// topicInfo is what the sink knows of a topic it writes to.
type topicInfo struct {
	partitions int32
	// placeBy is the partition count the topic's keys are placed by
	// (placement.go): partitions, or the count the checkpoint recorded.
	placeBy  int32
	maxBytes int         // largest record the topic accepts
	stamps   stampBounds // the timestamps it accepts (recordcheck.go)
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
func (s *kafkaSink) brokersRestarting(ctx context.Context) bool {
	md, err := s.adm.BrokerMetadata(ctx)
	return err == nil && (s.repl <= 0 || len(md.Brokers) >= int(s.repl))
}

// rereadTopic forgets what the sink knows of topic and learns it again,
// once per topic and attempt (a record over its max.message.bytes: the
// operator may have raised it since); it reports whether it did.
func (s *kafkaSink) rereadTopic(ctx context.Context, topic string) (topicInfo, bool, error) {
	if s.reread[topic] {
		return s.topics[topic], false, nil
	}
	s.reread[topic] = true
	delete(s.topics, topic)
	info, err := s.ensureTopic(ctx, topic)
	return info, true, err
}

func (s *kafkaSink) ensureTopic(ctx context.Context, topic string) (topicInfo, error) {
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
	case err == nil, kafkaerr.TopicExists(err):
	case kafkaerr.AdminRefused(err):
		refused = err // least privilege: the topic may exist (topicauth.go)
	case kafkaerr.InvalidReplicationFactor(err) && s.brokersRestarting(ctx):
		// Right after a broker restart, KRaft registers brokers before it
		// unfences them: CreateTopics counts none available. Passing.
		return topicInfo{}, fmt.Errorf("create topic %s: %v (the brokers are registered but not yet available: retried)", topic, err)
	default:
		return topicInfo{}, fmt.Errorf("create topic %s: %w", topic, errclass.Kafka(err))
	}
	info := topicInfo{maxBytes: maxBatchBytes}
	details, err := s.listCreated(ctx, topic, refused == nil)
	if err != nil && refused != nil && kafkaerr.UnknownTopic(err) {
		return topicInfo{}, missingTopic(topic, refused, err)
	}
	if err != nil && refused == nil && kafkaerr.UnknownTopic(err) {
		return topicInfo{}, fmt.Errorf("describe topic %s: %w (created, or found existing, it is still not in the brokers' metadata after %s, kafka.request_timeout: "+
			"a topic marked for deletion is not, until its deletion completes; retried)", topic, errclass.Kafka(err), s.timeout)
	}
	if err != nil {
		return topicInfo{}, fmt.Errorf("describe topic %s: %w", topic, errclass.Kafka(err))
	}
	if refused != nil {
		noteCreateRefused(s.log, topic, refused)
	}
	if info.partitions, err = listedPartitions(topic, details[topic]); err != nil {
		return topicInfo{}, fmt.Errorf("describe topic %s: %w (retried)", topic, err)
	}
	if info.placeBy, err = s.place.learn(topic, info.partitions); err != nil {
		return topicInfo{}, err
	}
	rc, err := s.adm.DescribeTopicConfigs(ctx, topic)
	if err != nil && !kafkaerr.AdminRefused(err) {
		return topicInfo{}, fmt.Errorf("describe topic %s configs: %w", topic, errclass.Kafka(err))
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

// listCreated describes topic. Created (or found existing) a moment ago, a
// topic can still be unknown to the broker that answers the metadata
// request (Apache Kafka propagates new topics to every broker's metadata
// cache asynchronously): when created is true, an UNKNOWN_TOPIC_OR_PARTITION
// answer is asked again until ctx ends, not taken as the topic's absence
// (that would stop the pipeline for a topic that exists).
func (s *kafkaSink) listCreated(ctx context.Context, topic string, created bool) (kadm.TopicDetails, error) {
	list := func(ctx context.Context, topic string) (kadm.TopicDetails, error) {
		return s.adm.ListTopics(ctx, topic)
	}
	var unknown kadm.TopicDetails // the last answer without the topic or one of its partitions
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		details, err := list(ctx, topic)
		list = s.metadataNow // asked again: past the client's cache
		if err != nil && unknown != nil && ctx.Err() != nil {
			// The deadline cut a request short: the answer is still
			// the last one, the topic not listed.
			_, err := listedPartitions(topic, unknown[topic])
			return unknown, cmp.Or(unknown[topic].Err, err)
		}
		if err == nil {
			err = details[topic].Err
		}
		again := created && kafkaerr.UnknownTopic(err)
		if err == nil {
			_, err = listedPartitions(topic, details[topic])
			again = created // a partition not listed yet
		}
		if err == nil || !again {
			return details, err
		}
		unknown = details
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return details, err
		case <-t.C:
		}
	}
}

// listedPartitions is the partition count of topic's metadata d, which
// lists every partition from 0 on (as franz-go's producer requires): an
// answer with a gap is not a topic with fewer partitions (the placement
// records the count for good, explicit partitions are checked against it).
func listedPartitions(topic string, d kadm.TopicDetail) (int32, error) {
	n := int32(len(d.Partitions))
	if n == 0 {
		return 0, fmt.Errorf("the brokers list topic %s with no partition", topic)
	}
	for p := range n {
		if _, ok := d.Partitions[p]; !ok {
			return 0, fmt.Errorf("the brokers list %d partitions of topic %s, not partition %d", n, topic, p)
		}
	}
	return n, nil
}

// metadataNow is topic's metadata as a broker tells it now. kadm answers
// from franz-go's metadata cache, which keeps an answer for up to
// MetadataMinAge (5 s by default), an UNKNOWN_TOPIC_OR_PARTITION included,
// unless the request also asks for the authorized operations: then it asks
// a broker (checkpoint.Store.Describe does the same).
func (s *kafkaSink) metadataNow(ctx context.Context, topic string) (kadm.TopicDetails, error) {
	return s.adm.ListTopics(kadm.WithAuthorizedOps(ctx), topic)
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
func (s *kafkaSink) checkpointRecord(cp *checkpoint.Checkpoint) (*kgo.Record, error) {
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

// sendNow sends the records the producer holds for its linger at once,
// without waiting for their acknowledgements. franz-go has no call of its
// own for that: Flush ends the linger of every partition it knows and wakes
// the goroutine that sends to the broker before it waits, and with a
// context already ended it returns at once (its wait is abandoned; the
// records stay in flight and their promises report them as usual). Records
// to a topic whose partitions the client has not loaded yet (its first
// records to that topic in the attempt) are not reached: they start their
// linger once the partitions are known.
func (s *kafkaSink) sendNow() {
	_ = s.cl.Flush(endedCtx)
}

// endedCtx is a context that has already ended (sendNow).
var endedCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// ackTimeout marks a flush that ran out of time as errAckTimeout.
func ackTimeout(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", errAckTimeout, err)
	}
	return err
}
