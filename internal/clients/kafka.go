// Package clients builds, from a validated config.Config, everything the
// relay and its commands connect with: the franz-go options of each Kafka
// client role (the attempt's producers, one per transaction lane; the lock
// group member; plain clients for admin requests, the checkpoint store and
// the commands' reads; the commands' own transactional producers), the
// binlog connection settings, the router's configuration, the libraries'
// loggers and the partitioner that places records as the Java client does.
// Every caller builds its clients here, so a setting that differs between
// roles (transactional id, transaction timeout, linger, isolation level,
// group timeouts, client id, logger) is decided in one place and
// kafka_test.go pins each role's.
//
// It is a package of its own rather than a file of internal/config: the
// settings it builds are the libraries' types (binlog.Config, router.Config,
// checkpoint.Store, kgo options), and config, which the binlog, router and
// checkpoint packages never need, stays a leaf that imports none of them
// (nor go-mysql's replication and the TiDB parser behind binlog). Nothing
// here opens a connection: callers create the clients and close them.
package clients

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
)

// Kafka builds the options of every Kafka client of one pipeline. The zero
// value is not usable: NewKafka makes one.
type Kafka struct {
	cfg config.Config
	// conn: brokers, timeouts, TLS, SASL, then the logger (WithLogger);
	// every role starts from these and the producer settings (opts).
	conn []kgo.Opt
}

// NewKafka reads cfg's Kafka connection settings (the TLS files, the SASL
// mechanism). Its clients log nothing until WithLogger.
func NewKafka(cfg config.Config) (Kafka, error) {
	opts := []kgo.Opt{
		kgo.SeedBrokers(cfg.Kafka.Brokers...),
		kgo.RequestTimeoutOverhead(cfg.Kafka.RequestTimeout),
		kgo.RetryTimeout(cfg.Kafka.RequestTimeout),
	}
	tlsCfg, err := cfg.Kafka.TLS.Config()
	if err != nil {
		return Kafka{}, fmt.Errorf("kafka tls: %w", err)
	}
	if tlsCfg != nil {
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	mech, err := cfg.Kafka.SASL.Auth()
	if err != nil {
		return Kafka{}, err
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return Kafka{cfg: cfg, conn: opts}, nil
}

// WithLogger is k with franz-go's logs in log (KafkaLogger), for every role.
func (k Kafka) WithLogger(log zerolog.Logger) Kafka {
	k.conn = append(slices.Clip(k.conn), KafkaLogger(log))
	return k
}

// with is k's connection options followed by opts, in a slice of its own.
func (k Kafka) with(opts ...kgo.Opt) []kgo.Opt {
	return append(k.opts(), opts...)
}

// opts is k's connection options and producer settings, made anew for each
// role: franz-go writes into the compression option's codecs each time it
// builds a client from it, and the roles' clients are built at once on
// their goroutines (the lock group's member, an attempt's clients, the
// background audit's), so no two may share it.
func (k Kafka) opts() []kgo.Opt {
	return append(slices.Clone(k.conn), producerSettings(k.cfg.Kafka)...)
}

// Admin is the options of a plain client: admin requests (topics, groups,
// ACLs, offsets), pings, the check before a second-lane commit, and the
// commands' and check's reads. Append a role's own options to it freely:
// the slice is the caller's.
func (k Kafka) Admin() []kgo.Opt { return k.with() }

// CheckpointStore is the pipeline's checkpoint store (kafka.checkpoint_topic),
// its clients with the Admin options; exactly-once, it accepts only
// checkpoints written in a transaction (checkpoint.TransactionalOnly).
func (k Kafka) CheckpointStore() *checkpoint.Store {
	s := checkpoint.NewStore(k.cfg.Kafka.CheckpointTopic, k.Admin()...)
	if k.cfg.Kafka.Delivery == config.ExactlyOnce {
		s = s.TransactionalOnly()
	}
	return s
}

// minExactlyOnceLinger is the least producer linger of an exactly-once
// relay. Every batch ends with a flush (its commit), so a record never
// waits longer than its batch, and none is visible before the commit
// anyway; what the linger changes is that a small batch at the head (a few
// rows, then the reader caught up) goes to the broker in one produce
// request with its checkpoint record instead of two. A broker handles one
// request per connection at a time, so two requests cost two round trips
// before EndTxn in every transaction. BENCHMARKS.md ("Exactly-once producer
// linger") has the latency figures behind 5 ms.
const minExactlyOnceLinger = 5 * time.Millisecond

// exactlyOnceLinger is the producer linger of an exactly-once relay with
// kafka.linger set to configured.
func exactlyOnceLinger(configured time.Duration) time.Duration {
	return max(configured, minExactlyOnceLinger)
}

// MaxBatchBytes is franz-go's default ProducerBatchMaxBytes, the record
// batch bound of the relay's producers unless a topic's max.message.bytes
// is smaller: no record may be larger, whatever the topic allows.
const MaxBatchBytes = 1_000_012

// Attempt is what a relay producer takes from the attempt that runs it.
type Attempt struct {
	// BatchMaxBytes is a topic's batch bound: its max.message.bytes,
	// learned before the first record to it.
	BatchMaxBytes func(topic string) int32
	// Partitioner keeps the partition the relay chose for each record
	// (Partitioner, or ObservedPartitioner); nil: Partitioner.
	Partitioner kgo.Partitioner
	// Metrics gets franz-go's client metrics with kafka.client_metrics, on
	// the first lane's producer only (one live client at a time); may be nil.
	Metrics *metrics.Metrics
}

// Producer is the options of an attempt's producer of transaction lane
// lane (0: the relay's, 1: the second lane's, exactly-once only).
// Exactly-once, lane i's transactional id is checkpoint.TransactionalIDs'
// i-th with kafka.transaction_timeout, and it lingers at least
// minExactlyOnceLinger; at-least-once, it lingers kafka.linger and has no
// transactional id.
func (k Kafka) Producer(lane int, a Attempt) []kgo.Opt {
	// Exactly-once, a batch (at most max_records) never fills the buffer;
	// at-least-once, the sink keeps half of it free.
	maxBuffered := 4 * k.cfg.Kafka.Batch.MaxRecords
	part := a.Partitioner
	if part == nil {
		part = Partitioner()
	}
	opts := append([]kgo.Opt{
		// A batch never exceeds the topic's max.message.bytes (learned
		// before the first record to it), or the broker would refuse it.
		kgo.ProducerBatchMaxBytesFn(a.BatchMaxBytes),
		// Every record in the partition the relay chose (the router's
		// placement, or its key's by the count the checkpoint recorded).
		kgo.RecordPartitioner(part),
		kgo.ProducerLinger(0),
		// A topic the relay just created may be unknown to a broker for a
		// moment (Apache Kafka, not kfake): refresh metadata quickly.
		kgo.MetadataMinAge(250 * time.Millisecond),
		kgo.MaxBufferedRecords(maxBuffered),
	}, k.opts()...)
	if k.cfg.Kafka.Delivery == config.ExactlyOnce {
		opts = append(opts, kgo.TransactionalID(k.cfg.Name), kgo.TransactionTimeout(k.cfg.Kafka.TransactionTimeout),
			kgo.ProducerLinger(exactlyOnceLinger(k.cfg.Kafka.Linger)))
	}
	if lane > 0 {
		opts = append(opts, kgo.TransactionalID(checkpoint.TransactionalIDs(k.cfg.Name)[lane]))
	}
	if lane == 0 && k.cfg.Kafka.ClientMetrics && a.Metrics != nil {
		opts = append(opts, a.Metrics.KafkaClient())
	}
	return opts
}

// GroupID is the consumer group that elects name's active instance.
func GroupID(name string) string { return "outbox-relay.lock." + name }

// LockMember is what one instance's membership of the lock group brings
// to its client.
type LockMember struct {
	// InstanceID is the static membership id (ha.instance_id, or the host
	// name); ClientID tells this member from the others.
	InstanceID, ClientID string
	// Hooks watch the group's requests and errors.
	Hooks kgo.Hook
	// Assigned, Revoked and Lost are the group's partition callbacks.
	Assigned, Revoked, Lost func(context.Context, *kgo.Client, map[string][]int32)
}

// LockGroup is the options of the lock group's member client: group
// GroupID(name) consuming ha.lock_topic with ha.session_timeout and
// ha.heartbeat_interval, static membership, no commits.
func (k Kafka) LockGroup(m LockMember) []kgo.Opt {
	h := k.cfg.HA
	opts := append([]kgo.Opt{
		kgo.ConsumerGroup(GroupID(k.cfg.Name)),
		kgo.ConsumeTopics(h.LockTopic),
		// Static membership: a standby (or the active one) that restarts
		// takes its place back without a rebalance, which would hold the
		// active member's heartbeats until the dead one's session ended.
		kgo.InstanceID(m.InstanceID),
		kgo.SessionTimeout(h.SessionTimeout),
		kgo.HeartbeatInterval(h.HeartbeatInterval),
		// A rebalance waits for members at most this long: a member that
		// does not rejoin is dropped no sooner than its session would end.
		kgo.RebalanceTimeout(h.SessionTimeout),
		// Sticky: a member joining or leaving never moves the lease away
		// from a live active instance.
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(time.Second),
		kgo.OnPartitionsAssigned(m.Assigned),
		kgo.OnPartitionsRevoked(m.Revoked),
		kgo.OnPartitionsLost(m.Lost),
		kgo.WithHooks(m.Hooks),
	}, k.opts()...)
	return append(opts, kgo.ClientID(m.ClientID))
}

// Replay is the options of `replay`'s producer: transactional id
// <name>.replay (never the relay's: the relay is not fenced), records
// placed by the command (Partitioner).
func (k Kafka) Replay() []kgo.Opt {
	return k.with(kgo.TransactionalID(k.cfg.Name+".replay"),
		kgo.TransactionTimeout(k.cfg.Kafka.TransactionTimeout), kgo.RecordPartitioner(Partitioner()))
}

// DeadLetterReplay is the options of `dead-letter replay`'s producer:
// transactional id <name>.dead-letter-replay, records placed by the
// command (Partitioner).
func (k Kafka) DeadLetterReplay() []kgo.Opt {
	return k.with(kgo.TransactionalID(k.cfg.Name+".dead-letter-replay"),
		kgo.TransactionTimeout(k.cfg.Kafka.TransactionTimeout), kgo.RecordPartitioner(Partitioner()))
}

// DeadLetterReader is the options of the client that reads dead-letter
// records from parts: read_committed (records of committed relay
// transactions only), control records kept so that the reader sees a
// partition's end. audit reads the pipeline's topics with it too, with
// fetch limits as extra.
func (k Kafka) DeadLetterReader(parts map[string]map[int32]kgo.Offset, extra ...kgo.Opt) []kgo.Opt {
	return k.with(append([]kgo.Opt{kgo.ConsumePartitions(parts), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, extra...)...)
}

// producerSettings are the producer settings of kafka: compression and
// linger.
func producerSettings(k config.Kafka) []kgo.Opt {
	var codec kgo.CompressionCodec
	switch k.Compression {
	case config.CompressGzip:
		codec = kgo.GzipCompression()
	case config.CompressSnappy:
		codec = kgo.SnappyCompression()
	case config.CompressLZ4:
		codec = kgo.Lz4Compression()
	case config.CompressZstd:
		codec = kgo.ZstdCompression()
	default:
		codec = kgo.NoCompression()
	}
	return []kgo.Opt{kgo.ProducerBatchCompression(codec), kgo.ProducerLinger(k.Linger)}
}
