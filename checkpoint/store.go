package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// Store reads and describes checkpoints in one topic.
type Store struct {
	topic string
	opts  []kgo.Opt // connection options (brokers, TLS, SASL)
	// build: its clients are built one at a time (newClient), by every
	// copy of the store.
	build      *sync.Mutex
	stableWait time.Duration
	// txnOnly: Load accepts only a checkpoint written in a transaction
	// (see TransactionalOnly).
	txnOnly bool
	// describeWait bounds Describe's wait for a topic just created; 0:
	// DescribeWait.
	describeWait time.Duration
}

// NewStore returns a store for topic; opts carry the connection settings.
// Its Load and History wait up to DefaultStableWait for open transactions.
func NewStore(topic string, opts ...kgo.Opt) *Store {
	return &Store{topic: topic, opts: opts, build: new(sync.Mutex), stableWait: DefaultStableWait}
}

// newClient is a client of extra and then the store's options. Built one
// at a time: franz-go writes into a compression option's codecs as it
// builds a client from it, and a store is read and written on several
// goroutines at once (an attempt's load, a standby's, the background
// audit's); building a client does no I/O.
func (s *Store) newClient(extra ...kgo.Opt) (*kgo.Client, error) {
	if s.build != nil {
		s.build.Lock()
		defer s.build.Unlock()
	}
	return kgo.NewClient(append(extra, s.opts...)...)
}

// Topic is the checkpoint topic's name.
func (s *Store) Topic() string { return s.topic }

// Record returns the record that stores cp; produce it last in the Kafka
// transaction it belongs to.
func (s *Store) Record(cp *Checkpoint) *kgo.Record {
	return &kgo.Record{Topic: s.topic, Partition: 0, Key: []byte(cp.Name), Value: cp.Encode()}
}

// Tombstone returns the record that deletes name's checkpoint.
func (s *Store) Tombstone(name string) *kgo.Record {
	return &kgo.Record{Topic: s.topic, Partition: 0, Key: []byte(name)}
}

// ErrTopicLayout is returned when the checkpoint topic exists with more than
// one partition: ordering of checkpoints would not hold.
var ErrTopicLayout = errors.New("checkpoint topic layout")

// EnsureTopic creates the compacted, single-partition checkpoint topic if it
// is missing, and checks its partition count if it exists.
func (s *Store) EnsureTopic(ctx context.Context, adm *kadm.Client, replication int16) error {
	resp, err := adm.CreateTopic(ctx, 1, replication, map[string]*string{
		"cleanup.policy": kadm.StringPtr("compact"),
	}, s.topic)
	if err == nil && resp.Err == nil {
		return nil
	}
	if err == nil {
		err = resp.Err
	}
	// A principal without CREATE (or a topic policy) gets an authorization
	// or policy error: the topic may have been created beforehand, which
	// the partition check below tells.
	refused := kafkaerr.AdminRefused(err)
	if !kafkaerr.TopicExists(err) && !refused {
		return fmt.Errorf("create checkpoint topic %s: %w", s.topic, err)
	}
	refusal := err
	var d kadm.TopicDetail
	list := func(ctx context.Context) error {
		details, err := adm.ListTopics(ctx, s.topic)
		if err != nil {
			return fmt.Errorf("describe checkpoint topic %s: %w", s.topic, err)
		}
		var ok bool
		d, ok = details[s.topic]
		if !ok || d.Err != nil {
			return fmt.Errorf("describe checkpoint topic %s: %w", s.topic, topicErr(ok, d.Err))
		}
		return nil
	}
	if refused {
		err = list(ctx)
		if kafkaerr.UnknownTopic(err) {
			return fmt.Errorf("%w: checkpoint topic %s does not exist and creating it was refused (%v): create it compacted with 1 partition, or grant CREATE",
				ErrTopicLayout, s.topic, refusal)
		}
	} else {
		// TOPIC_ALREADY_EXISTS: the controller knows it; the broker asked
		// may not yet (a topic created a moment ago, by another instance
		// or again after a deletion).
		err = s.askAgain(ctx, list)
	}
	if err != nil {
		return err
	}
	if n := len(d.Partitions); n != 1 {
		return fmt.Errorf("%w: topic %s has %d partitions, need exactly 1", ErrTopicLayout, s.topic, n)
	}
	return nil
}

// DefaultStableWait is how long Load and History wait, by default, for the
// transactions open on the checkpoint partition to end (see Load).
const DefaultStableWait = 10 * time.Second

// WithStableWait returns a copy of s whose Load and History wait at most d
// for open transactions on the checkpoint partition to end; 0 (or less)
// waits until their context ends.
func (s *Store) WithStableWait(d time.Duration) *Store {
	c := *s
	c.stableWait = max(d, 0)
	return &c
}

// Load returns the newest committed checkpoint for name, or nil when there
// is none (never written, or reset: a reset marker, or a tombstone).
//
// It first waits until every transaction with a record below the
// partition's high watermark has ended (the last stable offset reaches it),
// so that no committed checkpoint of name is hidden behind another
// pipeline's open transaction; it waits at most the store's stable wait
// (DefaultStableWait, see WithStableWait) or until ctx ends, and then
// returns a *HeldBackError wrapping ErrCheckpointHeldBack, never an older
// checkpoint. Naming the holders takes up to 3 s more. A relay calls it
// after initialising its transactional producer, which aborts the
// pipeline's own earlier transaction, so only other pipelines' transactions
// can hold it back.
func (s *Store) Load(ctx context.Context, name string) (*Checkpoint, error) {
	cp, _, err := s.LoadWithReset(ctx, name)
	return cp, err
}

// LoadWithReset is Load that also says whether the newest record of name
// is a reset marker (Checkpoint.IsReset): then cp is nil and reset is the
// marker's Operator (who reset it, when, from which position).
func (s *Store) LoadWithReset(ctx context.Context, name string) (cp *Checkpoint, reset *Operator, err error) {
	var last stored
	err = s.scan(ctx, name, func(r stored) { last = r })
	if hb, ok := errors.AsType[*HeldBackError](err); ok {
		hb.Visible, _, _ = last.decodeReset()
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	if s.txnOnly && last.found && !last.txn {
		return nil, nil, notTransactional(name, last) // one it cannot decode: that error
	}
	return last.decodeReset()
}

// stored is one record of a name as read: only the newest ones are
// decoded, so that a record a later one supersedes (one in a newer format
// written before a rollback, then reset or set by this build) is never
// looked at.
type stored struct {
	offset int64
	value  []byte // nil: a tombstone
	found  bool
	txn    bool // written in a transaction
}

// decodeReset returns the checkpoint r holds, nil for a tombstone, a
// reset marker (and then its Operator) or no record.
func (r stored) decodeReset() (*Checkpoint, *Operator, error) {
	cp, err := r.decode()
	if cp != nil && cp.IsReset() {
		return nil, cp.Operator, nil
	}
	return cp, nil, err
}

// decode returns the record r holds (a reset marker too), nil for a
// tombstone or no record.
func (r stored) decode() (*Checkpoint, error) {
	if !r.found || r.value == nil {
		return nil, nil
	}
	cp, err := Decode(r.value)
	if err != nil {
		return nil, fmt.Errorf("load checkpoint at offset %s: %w", strconv.FormatInt(r.offset, 10), err)
	}
	return cp, nil
}

// LoadVisible returns the newest checkpoint of name that read_committed
// readers see now, without waiting for open transactions to end: behind one
// it may be older than the newest committed checkpoint, which Load reports
// instead of returning. For diagnostics, and for readers that know the open
// transaction can never commit (a killed relay's own, before anything
// fenced it).
func (s *Store) LoadVisible(ctx context.Context, name string) (*Checkpoint, error) {
	c := *s
	c.stableWait = noWait
	var last stored
	if err := c.scan(ctx, name, func(r stored) { last = r }); err != nil {
		return nil, err
	}
	cp, _, err := last.decodeReset()
	return cp, err
}

// noWait as the stable wait reads up to the last stable offset as it is.
const noWait = -1

// History returns up to n of the newest committed checkpoints for name,
// oldest first, as far back as the topic (after compaction) still holds. It
// waits for open transactions like Load. Only the records it returns are
// decoded.
func (s *Store) History(ctx context.Context, name string, n int) ([]*Checkpoint, error) {
	if n < 1 {
		return nil, fmt.Errorf("checkpoint history: count %d: want 1 or more", n)
	}
	var all []stored
	slack := 64 + min(n, 1<<16) // trim now and then; n may be math.MaxInt
	err := s.scan(ctx, name, func(r stored) {
		if r.value == nil {
			all = all[:0]
			return
		}
		all = append(all, r)
		if len(all) > n && len(all)-n > slack {
			all = append(all[:0], all[len(all)-n:]...)
		}
	})
	if err != nil {
		return nil, err
	}
	if len(all) > n {
		all = all[len(all)-n:]
	}
	out := make([]*Checkpoint, 0, len(all))
	for _, r := range all {
		cp, err := r.decode()
		if err != nil {
			return nil, err
		}
		if cp.IsReset() { // like a tombstone: the history starts after it
			out = out[:0]
			continue
		}
		out = append(out, cp)
	}
	return out, nil
}

// diagnoseBudget bounds what a held-back Load does after its wait: naming
// the holders and reading the visible checkpoint.
const diagnoseBudget = 3 * time.Second

// scan calls fn, in offset order, for each committed record of name (a nil
// value for a tombstone). It reads up to a last stable
// offset at or past the high watermark it found first; when the wait for
// that ends, it reads up to the last stable offset with a bounded context of
// its own and returns a *HeldBackError.
func (s *Store) scan(ctx context.Context, name string, fn func(stored)) error {
	cl, err := s.newClient()
	if err != nil {
		return fmt.Errorf("load checkpoint: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	start, end, held, err := s.stable(ctx, adm)
	if err != nil {
		return err
	}
	if held != nil {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), diagnoseBudget)
		defer cancel()
		held.Holders, held.Lookup = s.holders(dctx, adm, held.HighWatermark)
		if err := s.read(dctx, name, start, held.StableOffset, fn); err != nil {
			return fmt.Errorf("%w (reading the visible part: %v)", held, err)
		}
		return held
	}
	return s.read(ctx, name, start, end, fn)
}

// read calls fn for each record of name in [start, end), end at most the
// last stable offset.
func (s *Store) read(ctx context.Context, name string, start, end int64, fn func(stored)) error {
	if end <= start {
		return nil
	}
	cl, err := s.newClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // so the last offset below the LSO is seen even when it is a marker
	)
	if err != nil {
		return fmt.Errorf("load checkpoint: %w", err)
	}
	defer cl.Close()
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("load checkpoint: %w", err)
		}
		var ferr error
		fetches.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("load checkpoint: fetch %s: %w", s.topic, ferr)
		}
		done := false
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= end {
				done = true
			}
			if r.Attrs.IsControl() || string(r.Key) != name || r.Offset >= end {
				return
			}
			fn(stored{offset: r.Offset, value: r.Value, found: true, txn: r.Attrs.IsTransactional()})
		})
		if done {
			return nil
		}
	}
}

// offset returns partition 0's offset from list; ok is false when the topic
// does not exist.
func (s *Store) offset(ctx context.Context, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (int64, bool, error) {
	l, err := list(ctx, s.topic)
	if err != nil {
		return 0, false, fmt.Errorf("load checkpoint: list offsets of %s: %w", s.topic, err)
	}
	o, ok := l.Lookup(s.topic, 0)
	if !ok {
		return 0, false, nil // topic missing
	}
	if o.Err != nil {
		return 0, false, fmt.Errorf("load checkpoint: list offsets of %s: %w", s.topic, o.Err)
	}
	return o.Offset, true, nil
}
