package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Store reads and describes checkpoints in one topic.
type Store struct {
	topic string
	opts  []kgo.Opt // connection options (brokers, TLS, SASL)
}

// NewStore returns a store for topic; opts carry the connection settings.
func NewStore(topic string, opts ...kgo.Opt) *Store {
	return &Store{topic: topic, opts: opts}
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
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create checkpoint topic %s: %w", s.topic, err)
	}
	details, err := adm.ListTopics(ctx, s.topic)
	if err != nil {
		return fmt.Errorf("describe checkpoint topic %s: %w", s.topic, err)
	}
	d, ok := details[s.topic]
	if !ok || d.Err != nil {
		return fmt.Errorf("describe checkpoint topic %s: %v", s.topic, d.Err)
	}
	if n := len(d.Partitions); n != 1 {
		return fmt.Errorf("%w: topic %s has %d partitions, need exactly 1", ErrTopicLayout, s.topic, n)
	}
	return nil
}

// Load returns the newest committed checkpoint for name, or nil when there
// is none (never written, or reset with a tombstone).
func (s *Store) Load(ctx context.Context, name string) (*Checkpoint, error) {
	var last *Checkpoint
	err := s.scan(ctx, name, func(cp *Checkpoint) { last = cp })
	return last, err
}

// History returns up to n of the newest committed checkpoints for name,
// oldest first, as far back as the topic (after compaction) still holds.
func (s *Store) History(ctx context.Context, name string, n int) ([]*Checkpoint, error) {
	var all []*Checkpoint
	err := s.scan(ctx, name, func(cp *Checkpoint) {
		if cp == nil {
			all = all[:0]
			return
		}
		all = append(all, cp)
		if len(all) > 2*n+64 {
			all = append(all[:0], all[len(all)-n:]...)
		}
	})
	if len(all) > n {
		all = all[len(all)-n:]
	}
	return all, err
}

// scan calls fn, in offset order, for each committed record of name up to the
// last stable offset: a decoded checkpoint, or nil for a tombstone.
func (s *Store) scan(ctx context.Context, name string, fn func(*Checkpoint)) error {
	start, end, err := s.bounds(ctx)
	if err != nil || end <= start {
		return err
	}
	opts := append([]kgo.Opt{
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.topic: {0: kgo.NewOffset().At(start)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), // so the last offset below the LSO is seen even when it is a marker
	}, s.opts...)
	cl, err := kgo.NewClient(opts...)
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
		var derr error
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= end {
				done = true
			}
			if r.Attrs.IsControl() || string(r.Key) != name || derr != nil || r.Offset >= end {
				return
			}
			if r.Value == nil {
				fn(nil)
				return
			}
			cp, err := Decode(r.Value)
			if err != nil {
				derr = fmt.Errorf("load checkpoint at offset %s: %w", strconv.FormatInt(r.Offset, 10), err)
				return
			}
			fn(cp)
		})
		if derr != nil {
			return derr
		}
		if done {
			return nil
		}
	}
}

// bounds returns the partition's log start offset and last stable offset; both
// are 0 when the topic does not exist yet.
func (s *Store) bounds(ctx context.Context) (start, end int64, err error) {
	cl, err := kgo.NewClient(s.opts...)
	if err != nil {
		return 0, 0, fmt.Errorf("load checkpoint: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lookup := func(l kadm.ListedOffsets, err error) (int64, bool, error) {
		if err != nil {
			return 0, false, fmt.Errorf("load checkpoint: list offsets of %s: %w", s.topic, err)
		}
		if o, ok := l.Lookup(s.topic, 0); ok {
			if o.Err != nil {
				return 0, false, fmt.Errorf("load checkpoint: list offsets of %s: %w", s.topic, o.Err)
			}
			return o.Offset, true, nil
		}
		return 0, false, nil // topic missing
	}
	end, ok, err := lookup(adm.ListCommittedOffsets(ctx, s.topic))
	if err != nil || !ok {
		return 0, 0, err
	}
	start, _, err = lookup(adm.ListStartOffsets(ctx, s.topic))
	return start, end, err
}

// Write commits cp for name (nil writes a tombstone: no checkpoint) in a
// Kafka transaction whose transactional id is name, the relay's own: it
// fences a running relay of that name, which then stops.
func (s *Store) Write(ctx context.Context, name string, cp *Checkpoint) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.TransactionalID(name)}, s.opts...)...)
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	defer cl.Close()
	if _, _, err := cl.ProducerID(ctx); err != nil {
		return fmt.Errorf("write checkpoint: init transactional producer %s: %w", name, err)
	}
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	rec := s.Tombstone(name)
	if cp != nil {
		rec = s.Record(cp)
	}
	written, err := cl.ProduceSync(ctx, rec).First()
	if err != nil {
		_ = cl.EndTransaction(ctx, kgo.TryAbort)
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("write checkpoint: commit: %w", err)
	}
	return s.AwaitVisible(ctx, kadm.NewClient(cl), written.Offset)
}

// ErrNotVisible is returned by AwaitVisible when its context ends before a
// committed checkpoint record is visible to read_committed readers (an older
// open transaction on the topic holds the last stable offset below it). The
// record stays committed: it becomes visible once that transaction ends.
var ErrNotVisible = errors.New("committed checkpoint not yet visible")

// AwaitVisible waits until the checkpoint record at offset is below the
// topic's last stable offset, so that Load returns it (or something newer).
// A broker answers a transaction's commit before it has written the commit
// markers; a reader that comes right after would still see the previous
// checkpoint. It polls every few milliseconds until ctx ends.
func (s *Store) AwaitVisible(ctx context.Context, adm *kadm.Client, offset int64) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var lso int64 = -1
	for {
		l, err := adm.ListCommittedOffsets(ctx, s.topic)
		if err == nil {
			if o, ok := l.Lookup(s.topic, 0); ok && o.Err == nil {
				if lso = o.Offset; lso > offset {
					return nil
				}
			} else if ok {
				err = o.Err
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			return fmt.Errorf("await checkpoint at offset %d of %s (last stable offset %d): %w: %w", offset, s.topic, lso, ErrNotVisible, err)
		case <-tick.C:
		}
	}
}
