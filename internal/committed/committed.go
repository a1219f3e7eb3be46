// Package committed proves that what a Kafka transaction wrote is committed
// and visible, from the brokers' logs rather than from the commit's answer.
//
// A broker answers EndTxn before it has written the commit markers to the
// partitions (Apache Kafka writes them afterwards), and a client may answer
// "committed" for a transaction whose EndTxn it never sent (franz-go
// v1.22.3, on a client's first produce to a topic: the broker then aborts
// the transaction at its timeout). So a command that reports what it wrote
// waits until each partition written is visible to read_committed readers
// (AwaitVisible: its last stable offset past the last offset written), and
// then reads the last record written to each back with read_committed at
// its offset (ReadBack): an aborted record is never returned there, and
// a record retention or compaction removed meanwhile is told committed or
// aborted by the marker that ended its transaction. Prove does both. checkpoint.Store.Write, replay and dead-letter replay use it.
package committed

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkaerr"
)

// ErrNotVisible is wrapped by AwaitVisible's error when its context ends
// before every partition's last stable offset is past the offset written
// (an open transaction on the partition holds it back, or the commit's
// markers are not written yet). Callers branch on it: what was written may
// still be committed, or not.
var ErrNotVisible = errors.New("not yet visible to read_committed readers")

// ErrNotCommitted is wrapped by ReadBack's error when a record written is
// not returned to a read_committed reader at its offset once the partition's
// last stable offset is past it: its transaction was aborted (by the broker
// at the transaction's timeout, or by another producer of the same
// transactional id), whatever the commit answered. Callers branch on it to
// write again.
var ErrNotCommitted = errors.New("not committed: the broker aborted the transaction")

// NewClient builds a client of extra and the caller's connection options.
type NewClient func(extra ...kgo.Opt) (*kgo.Client, error)

// Last returns the last record of recs (produced: their offsets set) per
// topic and partition.
func Last(recs []*kgo.Record) map[string]map[int32]*kgo.Record {
	out := map[string]map[int32]*kgo.Record{}
	for _, r := range recs {
		if out[r.Topic] == nil {
			out[r.Topic] = map[int32]*kgo.Record{}
		}
		if l := out[r.Topic][r.Partition]; l == nil || r.Offset > l.Offset {
			out[r.Topic][r.Partition] = r
		}
	}
	return out
}

// Prove waits until the last record of recs (produced, in one or more
// committed transactions) in each partition is visible to read_committed
// readers (AwaitVisible), then reads each back (ReadBack). adm and
// newClient connect to the cluster written to.
func Prove(ctx context.Context, adm *kadm.Client, newClient NewClient, recs []*kgo.Record) error {
	last := Last(recs)
	offsets := map[string]map[int32]int64{}
	for t, ps := range last {
		offsets[t] = map[int32]int64{}
		for p, r := range ps {
			offsets[t][p] = r.Offset
		}
	}
	if err := AwaitVisible(ctx, adm, offsets); err != nil {
		return err
	}
	return ReadBack(ctx, newClient, last)
}

// AwaitVisible waits until the last stable offset of each partition of
// offsets is past its offset, so that read_committed readers can read that
// record (or learn that it was aborted). It polls every few milliseconds
// until ctx ends (an error wrapping ErrNotVisible naming the partitions
// still held back and their last stable offsets), or until a Kafka error
// that retrying cannot fix (not authorised).
func AwaitVisible(ctx context.Context, adm *kadm.Client, offsets map[string]map[int32]int64) error {
	topics := make([]string, 0, len(offsets))
	for t := range offsets {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	if len(topics) == 0 {
		return nil
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var held []string
	for {
		l, err := adm.ListCommittedOffsets(ctx, topics...)
		if err == nil {
			held = held[:0]
			for _, t := range topics {
				for p, o := range offsets[t] {
					lo, ok := l.Lookup(t, p)
					switch {
					case !ok:
						held = append(held, fmt.Sprintf("%s[%d] (not listed, written up to %d)", t, p, o))
					case lo.Err != nil:
						err = fmt.Errorf("list offsets of %s[%d]: %w", t, p, lo.Err)
					case lo.Offset <= o:
						held = append(held, fmt.Sprintf("%s[%d] (last stable offset %d, written up to %d)", t, p, lo.Offset, o))
					}
				}
			}
			if err == nil && len(held) == 0 {
				return nil
			}
		}
		if err != nil && ctx.Err() == nil && !kafkaerr.Passing(err) {
			return fmt.Errorf("await visibility: %w", err)
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = ctx.Err()
			}
			if len(held) == 0 { // no answer yet: every partition waited for
				for _, t := range topics {
					for p, o := range offsets[t] {
						held = append(held, fmt.Sprintf("%s[%d] (written up to %d)", t, p, o))
					}
				}
			}
			slices.Sort(held)
			return fmt.Errorf("await visibility of %s: %w: %w", strings.Join(held, ", "), ErrNotVisible, err)
		case <-tick.C:
		}
	}
}

// ErrUnprovable is wrapped by ReadBack's error when a record written is no
// longer in its partition (retention, compaction or DeleteRecords removed
// it, and the marker that ended its transaction with it) once the
// partition was read to its end: whether it committed cannot be told from
// the log. Not ErrNotCommitted: writing it again may duplicate it.
var ErrUnprovable = errors.New("removed from the partition before it was read back: whether it committed cannot be told")

// ReadBack reads, with read_committed, each partition of last from the
// offset of its record. The record returned at its offset, as written
// (key, value, headers), proves it. When it is not returned there
// (read_committed drops an aborted record; retention or compaction may
// have removed a committed one), the marker that ended its transaction
// (its producer id) after it tells: a commit proves it, an abort makes
// ReadBack's error wrap ErrNotCommitted. A partition read to its end
// without that marker makes the error wrap ErrUnprovable. A record
// returned different at its offset wraps ErrNotCommitted. Call it once the
// partitions' last stable offsets are past those offsets (AwaitVisible):
// before that, the read waits until ctx ends.
func ReadBack(ctx context.Context, newClient NewClient, last map[string]map[int32]*kgo.Record) error {
	parts := map[string]map[int32]kgo.Offset{}
	left := 0
	for t, ps := range last {
		parts[t] = map[int32]kgo.Offset{}
		for p, r := range ps {
			parts[t][p] = kgo.NewOffset().At(r.Offset)
			left++
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := newClient(kgo.ConsumePartitions(parts), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),                          // an aborted record's place: the abort marker after it
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())) // a record deleted: from the log start, for its marker
	if err != nil {
		return fmt.Errorf("read back: kafka client: %w", err)
	}
	defer cl.Close()
	seen := map[string]map[int32]bool{}
	var missing, gone []string
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read back %s: %w", unread(last, seen), err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read back %s[%d]: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			want := last[p.Topic][p.Partition]
			if want == nil || seen[p.Topic][p.Partition] {
				return
			}
			where := fmt.Sprintf("%s[%d]@%d", p.Topic, p.Partition, want.Offset)
			decide := func(bad *[]string, why string) {
				if seen[p.Topic] == nil {
					seen[p.Topic] = map[int32]bool{}
				}
				seen[p.Topic][p.Partition] = true
				left--
				if bad != nil {
					*bad = append(*bad, where+why)
				}
			}
			for _, r := range p.Records {
				switch ended, commit := EndOf(r, want.ProducerID); {
				case r.Offset < want.Offset:
				case r.Offset == want.Offset && !r.Attrs.IsControl():
					if same(r, want) {
						decide(nil, "")
					} else {
						decide(&missing, "")
					}
					return
				case ended && commit: // committed, then removed from the log
					decide(nil, "")
					return
				case ended:
					decide(&missing, "")
					return
				}
			}
			if n := len(p.Records); n > 0 && p.Records[n-1].Offset+1 >= p.HighWatermark && p.Records[n-1].Offset >= want.Offset {
				decide(&gone, fmt.Sprintf(" (log start offset %d, read to %d)", p.LogStartOffset, p.HighWatermark))
			}
		})
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("%w: %s not returned to a read_committed reader at the offsets written", ErrNotCommitted, strings.Join(missing, ", "))
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		return fmt.Errorf("read back %s: %w (retention, compaction or deleted records; check the topic before writing again)", strings.Join(gone, ", "), ErrUnprovable)
	}
	return nil
}

// EndOf reports whether r is the marker that ended a transaction of
// producer pid, and whether that marker is a commit (else an abort).
func EndOf(r *kgo.Record, pid int64) (ended, commit bool) {
	// A control record's key: version (int16), then type (int16: 0 abort, 1 commit).
	if !r.Attrs.IsControl() || r.ProducerID != pid || len(r.Key) < 4 {
		return false, false
	}
	return true, binary.BigEndian.Uint16(r.Key[2:4]) == 1
}

// same reports whether r, read, holds what w, written, held.
func same(r, w *kgo.Record) bool {
	if !bytes.Equal(r.Key, w.Key) || !bytes.Equal(r.Value, w.Value) || (r.Value == nil) != (w.Value == nil) || len(r.Headers) != len(w.Headers) {
		return false
	}
	for i, h := range r.Headers {
		if h.Key != w.Headers[i].Key || !bytes.Equal(h.Value, w.Headers[i].Value) {
			return false
		}
	}
	return true
}

// unread names the partitions of last not read back yet.
func unread(last map[string]map[int32]*kgo.Record, seen map[string]map[int32]bool) string {
	var out []string
	for t, ps := range last {
		for p, r := range ps {
			if !seen[t][p] {
				out = append(out, fmt.Sprintf("%s[%d]@%d", t, p, r.Offset))
			}
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
