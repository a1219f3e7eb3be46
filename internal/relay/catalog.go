package relay

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/errclass"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// The topic catalog: what an attempt knows of the topics it writes to,
// learned from Kafka once per topic and kept. The route step asks it for
// every record (catalog.ensure: a map lookup once the topic is known);
// only the first ask of a topic, and one read again when a record is over
// its limit (catalog.reread), go to Kafka. It creates the topics that are
// missing, learns their partition count and the count keys are placed by
// (placement.go), their max.message.bytes (which the producer's batches
// follow: topicLimits) and timestamp bounds (recordcheck.go), and does
// without what least privilege refuses.

// catalog is an attempt's topic catalog; only the pipeline's goroutine
// uses it (topicLimits and placements are read by franz-go's too).
type catalog struct {
	adm       *kadm.Client
	timeout   time.Duration // bound of each ask
	parts     int32         // partitions of a topic the catalog creates
	repl      int16         // its replication factor
	log       zerolog.Logger
	limits    *topicLimits // franz-go's per-topic batch limit; nil: its default for every topic
	place     *placements  // partition counts keys are placed by; nil: the topics' own
	topics    map[string]topicInfo
	readAgain map[string]bool // topics learned again (reread)
}

// newCatalog is an attempt's catalog asking through adm; the checkpoint
// topic is known (one partition, written to by the delivery).
func newCatalog(adm *kadm.Client, checkpointTopic string, timeout time.Duration, parts int32, repl int16,
	log zerolog.Logger, limits *topicLimits, place *placements) *catalog {
	return &catalog{adm: adm, timeout: timeout, parts: parts, repl: repl, log: log, limits: limits, place: place,
		topics:    map[string]topicInfo{checkpointTopic: {partitions: 1, placeBy: 1, maxBytes: clients.MaxBatchBytes}},
		readAgain: map[string]bool{}}
}

// topicInfo is what the catalog knows of a topic.
type topicInfo struct {
	partitions int32
	// placeBy is the partition count the topic's keys are placed by
	// (placement.go): partitions, or the count the checkpoint recorded.
	placeBy  int32
	maxBytes int         // largest record the topic accepts
	stamps   stampBounds // the timestamps it accepts (recordcheck.go)
}

// brokersRestarting reports whether an INVALID_REPLICATION_FACTOR answer
// can be passing: the cluster's metadata lists at least as many brokers as
// the replication factor asks for (kafka.replication_factor larger than the
// cluster stays a configuration error).
func (c *catalog) brokersRestarting(ctx context.Context) bool {
	md, err := c.adm.BrokerMetadata(ctx)
	return err == nil && (c.repl <= 0 || len(md.Brokers) >= int(c.repl))
}

// reread forgets what the catalog knows of topic and learns it again,
// once per topic and attempt (a record over its max.message.bytes: the
// operator may have raised it since); it reports whether it did.
func (c *catalog) reread(ctx context.Context, topic string) (topicInfo, bool, error) {
	if c.readAgain[topic] {
		return c.topics[topic], false, nil
	}
	c.readAgain[topic] = true
	delete(c.topics, topic)
	info, err := c.ensure(ctx, topic)
	return info, true, err
}

// ensure creates topic if the catalog has not seen it yet and learns its
// partition count, the count its keys are placed by, its
// max.message.bytes and timestamp bounds.
func (c *catalog) ensure(ctx context.Context, topic string) (topicInfo, error) {
	if info, ok := c.topics[topic]; ok {
		return info, nil
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.adm.CreateTopic(ctx, c.parts, c.repl, nil, topic)
	if err == nil {
		err = resp.Err
	}
	var refused error
	switch {
	case err == nil, kafkaerr.TopicExists(err):
	case kafkaerr.AdminRefused(err):
		refused = err // least privilege: the topic may exist (see above)
	case kafkaerr.InvalidReplicationFactor(err) && c.brokersRestarting(ctx):
		// Right after a broker restart, KRaft registers brokers before it
		// unfences them: CreateTopics counts none available. Passing.
		return topicInfo{}, fmt.Errorf("create topic %s: %v (the brokers are registered but not yet available: retried)", topic, err)
	default:
		return topicInfo{}, fmt.Errorf("create topic %s: %w", topic, errclass.Kafka(err))
	}
	info := topicInfo{maxBytes: clients.MaxBatchBytes}
	details, err := c.listCreated(ctx, topic, refused == nil)
	if err != nil && refused != nil && kafkaerr.UnknownTopic(err) {
		return topicInfo{}, missingTopic(topic, refused, err)
	}
	if err != nil && refused == nil && kafkaerr.UnknownTopic(err) {
		return topicInfo{}, fmt.Errorf("describe topic %s: %w (created, or found existing, it is still not in the brokers' metadata after %s, kafka.request_timeout: "+
			"a topic marked for deletion is not, until its deletion completes; retried)", topic, errclass.Kafka(err), c.timeout)
	}
	if err != nil {
		return topicInfo{}, fmt.Errorf("describe topic %s: %w", topic, errclass.Kafka(err))
	}
	if refused != nil {
		noteCreateRefused(c.log, topic, refused)
	}
	if info.partitions, err = listedPartitions(topic, details[topic]); err != nil {
		return topicInfo{}, fmt.Errorf("describe topic %s: %w (retried)", topic, err)
	}
	if info.placeBy, err = c.place.learn(topic, info.partitions); err != nil {
		return topicInfo{}, err
	}
	rc, err := c.adm.DescribeTopicConfigs(ctx, topic)
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
	c.topics[topic] = info
	if c.limits != nil {
		c.limits.set(topic, info.maxBytes)
	}
	return info, nil
}

// listCreated describes topic. Created (or found existing) a moment ago, a
// topic can still be unknown to the broker that answers the metadata
// request (Apache Kafka propagates new topics to every broker's metadata
// cache asynchronously): when created is true, an UNKNOWN_TOPIC_OR_PARTITION
// answer is asked again until ctx ends, not taken as the topic's absence
// (that would stop the pipeline for a topic that exists).
func (c *catalog) listCreated(ctx context.Context, topic string, created bool) (kadm.TopicDetails, error) {
	list := func(ctx context.Context, topic string) (kadm.TopicDetails, error) {
		return c.adm.ListTopics(ctx, topic)
	}
	var unknown kadm.TopicDetails // the last answer without the topic or one of its partitions
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		details, err := list(ctx, topic)
		list = c.metadataNow // asked again: past the client's cache
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
func (c *catalog) metadataNow(ctx context.Context, topic string) (kadm.TopicDetails, error) {
	return c.adm.ListTopics(kadm.WithAuthorizedOps(ctx), topic)
}

// maxTopicBytes bounds what the relay takes from a topic's
// max.message.bytes for its batches and records.
const maxTopicBytes = 64 << 20

// topicLimits holds the max.message.bytes of the topics the delivery writes to
// for franz-go's per-topic batch limit, which it asks for from its own
// goroutines when it first meets a partition (after catalog.ensure stored it).
type topicLimits struct{ m sync.Map } // topic -> int32

// batchMaxBytes is the largest record batch franz-go may build for topic.
func (t *topicLimits) batchMaxBytes(topic string) int32 {
	if v, ok := t.m.Load(topic); ok {
		return v.(int32)
	}
	return clients.MaxBatchBytes
}

// set stores topic's largest record batch: its max.message.bytes (franz-go
// checks only its default's range; a smaller per-topic value is used as is).
func (t *topicLimits) set(topic string, maxBytes int) {
	t.m.Store(topic, int32(min(max(maxBytes, 1), maxTopicBytes)))
}

// Least privilege on Kafka: with topics created beforehand, the relay's
// principal needs WRITE on the event topics, READ and WRITE on the
// checkpoint topic, and WRITE on its transactional id. Creating a topic and
// describing its configuration are then best effort: the broker's refusal
// is logged once per topic and the relay goes on with what metadata says
// (partition counts) and franz-go's defaults (the record size bound).

// noteCreateRefused logs that creating topic was refused although the
// topic exists: once per attempt and topic (the catalog keeps what it learnt).
func noteCreateRefused(log zerolog.Logger, topic string, createErr error) {
	log.Warn().Str("topic", topic).AnErr("refused", createErr).
		Msg("kafka refused to create the topic (no CREATE permission, or a topic policy): using it as it exists; create topics beforehand to silence this")
}

// missingTopic is the error for a topic that does not exist when the
// broker refused to create it.
func missingTopic(topic string, createErr, describeErr error) error {
	return fmt.Errorf("%w: topic %s does not exist and creating it was refused (%v): create it beforehand, or grant the relay's principal CREATE: %w",
		errclass.ErrRejected, topic, createErr, describeErr)
}

// stampBounds are a topic's timestamp settings: with CreateTime, the broker
// refuses a record whose timestamp is more than after ahead of its clock or
// more than before behind it (0: no bound). LogAppendTime topics take any.
type stampBounds struct {
	logAppend     bool
	before, after time.Duration
	// difference: message.timestamp.difference.max.ms (Kafka before 4.0;
	// deprecated since 3.6): a bound where before or after sets none.
	difference time.Duration
}

// take reads one topic config entry into b.
func (b *stampBounds) take(key, value string) {
	ms := func() time.Duration {
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil || v <= 0 || v >= int64(1<<62)/int64(time.Millisecond) {
			return 0 // unbounded (Long.MAX_VALUE by default)
		}
		return time.Duration(v) * time.Millisecond
	}
	switch key {
	case "message.timestamp.type":
		b.logAppend = value == "LogAppendTime"
	case "message.timestamp.before.max.ms":
		b.before = ms()
	case "message.timestamp.after.max.ms":
		b.after = ms()
	case "message.timestamp.difference.max.ms":
		b.difference = ms()
	}
}

// bounds are the effective before and after bounds (0: none).
func (b stampBounds) bounds() (before, after time.Duration) {
	before, after = b.before, b.after
	if before == 0 {
		before = b.difference
	}
	if after == 0 {
		after = b.difference
	}
	return before, after
}

// bounded reports whether the topic refuses any timestamp.
func (b stampBounds) bounded() bool {
	return !b.logAppend && (b.before > 0 || b.after > 0 || b.difference > 0)
}

// refuses says why the topic would refuse a record stamped ts at now, or "".
func (b stampBounds) refuses(ts, now time.Time) string {
	before, after := b.bounds()
	if b.logAppend || ts.IsZero() || before == 0 && after == 0 {
		return "" // the broker stamps it; a zero one is stamped by the client
	}
	if d := ts.Sub(now); after > 0 && d > after {
		return fmt.Sprintf("timestamp %s is %s ahead of the relay's clock, the topic takes at most %s ahead (message.timestamp.after.max.ms)",
			ts.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), after)
	}
	if d := now.Sub(ts); before > 0 && d > before {
		return fmt.Sprintf("timestamp %s is %s behind the relay's clock, the topic takes at most %s behind (message.timestamp.before.max.ms)",
			ts.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond), before)
	}
	return ""
}
