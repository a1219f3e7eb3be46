package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/committed"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
	"github.com/outbox-relay/outbox-relay/router"
)

// How replay and dead-letter replay publish: the topics made ready and the
// records placed as the relay would, then Kafka transactions.

// publishTransactional produces recs in Kafka transactions of batch records
// with the transactional id <name>.replay, reporting progress on stderr
// every few seconds, and returns the number of transactions.
func publishTransactional(ctx context.Context, cfg config.Config, recs []*kgo.Record, batch int) (int, error) {
	k, err := clients.NewKafka(cfg)
	if err != nil {
		return 0, err
	}
	counts, err := placedCounts(ctx, cfg)
	if err != nil {
		return 0, err
	}
	if err := ensureTopics(ctx, cfg, k.Admin(), recs, counts); err != nil {
		return 0, err
	}
	cl, err := kgo.NewClient(k.Replay()...)
	if err != nil {
		return 0, fmt.Errorf("kafka client: %w", err)
	}
	defer func() { cl.Close() }()
	adm := kadm.NewClient(cl)
	prog := newProgress("replay")
	defer prog.done()
	began, txns := time.Now(), 0
	prog.update("0 of %d records published", len(recs))
	for start := 0; start < len(recs); start += batch {
		chunk := recs[start:min(len(recs), start+batch)]
		for attempt := 1; ; attempt++ {
			err := publishChunk(ctx, cfg, k, cl, adm, chunk)
			if err == nil {
				break
			}
			if errors.Is(err, errNotProved) {
				return txns, fmt.Errorf("%w (%d of %d published before; Kafka answered the commit of the next %d, which is not proved: they may be published)", err, start, len(recs), len(chunk))
			}
			if !errors.Is(err, committed.ErrNotCommitted) || attempt == replayAttempts {
				return txns, fmt.Errorf("%w (%d of %d published before)", err, start, len(recs))
			}
			prog.update("transaction aborted by the broker after its commit was answered: publishing its %d records again", len(chunk))
			// The broker aborted it at its timeout and bumped the producer's
			// epoch (EndTxn before v5): this client is fenced, a new one
			// initialises the transactional id again.
			cl.Close()
			if cl, err = kgo.NewClient(k.Replay()...); err != nil {
				return txns, fmt.Errorf("kafka client: %w", err)
			}
			adm = kadm.NewClient(cl)
		}
		txns++
		done := start + len(chunk)
		prog.update("%d of %d records published (%d records/s)", done, len(recs), perSecond(done, time.Since(began)))
	}
	return txns, nil
}

// replayAttempts bounds the publications of one transaction's records
// that the broker aborted after their commit was answered.
const replayAttempts = 3

// publishChunk publishes chunk in one Kafka transaction and returns once
// its records are proved committed (proveCommitted); an error wrapping
// committed.ErrNotCommitted when the broker aborted it (none of it is
// visible to read_committed readers: publishing it again duplicates
// nothing for them).
func publishChunk(ctx context.Context, cfg config.Config, k clients.Kafka, cl *kgo.Client, adm *kadm.Client, chunk []*kgo.Record) error {
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin kafka transaction: %w", err)
	}
	if err := cl.ProduceSync(context.WithoutCancel(ctx), chunk...).FirstErr(); err != nil {
		_ = cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
		return fmt.Errorf("produce: %w", err)
	}
	if err := cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryCommit); err != nil {
		return fmt.Errorf("commit kafka transaction: %w", err)
	}
	return proveCommitted(ctx, cfg, k, adm, chunk)
}

// proveCommitted returns once recs, produced in committed transactions,
// are visible to read_committed readers in every partition written and the
// last record of each is read back at its offset (committed.Prove): a
// broker answers the commit before it writes the markers, and franz-go
// can answer it for a transaction whose EndTxn it never sent (which the
// broker aborts at the transaction's timeout). It waits at most the
// transaction timeout and a request timeout. A principal not allowed to
// read the topics (least privilege: WRITE only) cannot prove it: a warning
// says so, and Kafka's answer to the commit stands.
func proveCommitted(ctx context.Context, cfg config.Config, k clients.Kafka, adm *kadm.Client, recs []*kgo.Record) error {
	pctx, cancel := context.WithTimeout(ctx, cfg.Kafka.TransactionTimeout+cfg.Kafka.RequestTimeout)
	defer cancel()
	newClient := func(extra ...kgo.Opt) (*kgo.Client, error) { return kgo.NewClient(append(extra, k.Admin()...)...) }
	err := committed.Prove(pctx, adm, newClient, recs)
	if kafkaerr.Denied(err) {
		fmt.Fprintf(os.Stderr, "warning: the commit is not proved (%v): grant the principal READ on the topics written for replay to read its records back\n", err)
		return nil
	}
	if errors.Is(err, committed.ErrNotCommitted) {
		return fmt.Errorf("prove the transaction committed: %w", err)
	}
	if err != nil {
		return fmt.Errorf("prove the transaction committed: %w: %w", errNotProved, err)
	}
	return nil
}

// errNotProved is wrapped by proveCommitted's error when the proof ended
// without an answer (not visible in time, interrupted, records removed,
// a read failing): Kafka answered the commit, so what was published may
// be committed. Callers branch on it to say so rather than "nothing was
// published".
var errNotProved = errors.New("commit answered but not proved")

// ensureTopics creates the records' topics that are missing, as the relay
// would (kafka.topic_partitions, kafka.replication_factor), places the
// records routeAgain left byKey as the relay does (their key's partition by
// the count their topic has in counts, a checkpoint's, else by the count
// it has), and refuses a record whose chosen partition (placement
// partition) its topic lacks, before anything is produced. A refused
// creation (no CREATE permission) is fine for a topic that exists.
func ensureTopics(ctx context.Context, cfg config.Config, kopts []kgo.Opt, recs []*kgo.Record, counts map[string]int32) error {
	seen := map[string]bool{}
	var topics []string
	for _, r := range recs {
		if !seen[r.Topic] {
			seen[r.Topic] = true
			topics = append(topics, r.Topic)
		}
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	cctx, cancel := context.WithTimeout(ctx, cfg.Kafka.RequestTimeout)
	defer cancel()
	refused := map[string]error{} // creation refused: fine if the topic exists
	res, err := adm.CreateTopics(cctx, cfg.Kafka.TopicPartitions, cfg.Kafka.ReplicationFactor, nil, topics...)
	switch {
	case err != nil && kafkaerr.AdminRefused(err):
		for _, t := range topics {
			refused[t] = err
		}
	case err != nil:
		return fmt.Errorf("create topics: %w", err)
	}
	for _, r := range res.Sorted() {
		switch {
		case r.Err == nil || kafkaerr.TopicExists(r.Err):
		case kafkaerr.AdminRefused(r.Err):
			refused[r.Topic] = r.Err
		default:
			return fmt.Errorf("create topic %s: %w", r.Topic, r.Err)
		}
	}
	details, err := adm.ListTopics(cctx, topics...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for _, t := range topics {
		cerr, ok := refused[t]
		if !ok {
			continue
		}
		if d, found := details[t]; !found || d.Err != nil {
			derr := kafkaerr.ErrUnknownTopic
			if found {
				derr = d.Err
			}
			return fmt.Errorf("topic %s does not exist and creating it was refused (%v): create it beforehand, or grant the principal CREATE (describe: %w); nothing was published", t, cerr, derr)
		}
		fmt.Fprintf(os.Stderr, "warning: kafka refused to create topic %s (%v): using it as it exists\n", t, cerr)
	}
	for _, r := range recs {
		n := len(details[r.Topic].Partitions)
		if r.Partition == byKey {
			by := counts[r.Topic]
			if by <= 0 {
				by = int32(n)
			}
			// A topic with fewer partitions than its recorded count (created
			// again) may get a partition it lacks: franz-go fails the record.
			r.Partition = clients.KeyPartition(r.Key, by)
			continue
		}
		if int(r.Partition) >= n {
			return fmt.Errorf("%w: event id %s: partition %d, topic %s has %d; nothing was published", router.ErrBadRow, headerValue(r, "id"), r.Partition, r.Topic, n)
		}
	}
	return nil
}

// placedCounts are the partition counts the relay places each topic's keys
// by, as its committed checkpoint records them (nil: none), so that a
// replay does not put an aggregate's record in another partition after
// partitions were added to its topic.
func placedCounts(ctx context.Context, cfg config.Config) (map[string]int32, error) {
	store, err := checkpointStore(cfg)
	if err != nil {
		return nil, err
	}
	loaded, err := store.LoadState(ctx, cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint (its partition counts): %w", err)
	}
	placed := loaded.Partitions // after a reset: the counts its marker carries
	if loaded.Checkpoint != nil {
		placed = loaded.Checkpoint.Partitions
	}
	return placed, nil
}
