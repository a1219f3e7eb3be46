package clients

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadRange reads every partition of ends from from (nil: the start) up to
// its end offset, with read_committed, calling fn for each record in
// order per partition; extra adds options (fetch limits). It fails when
// no record comes for 30 s while partitions are unread. dead-letter list
// and replay, and audit read with it.
func ReadRange(ctx context.Context, k Kafka, ends, from map[string]map[int32]int64, fn func(*kgo.Record), extra ...kgo.Opt) error {
	parts := map[string]map[int32]kgo.Offset{}
	left := 0
	for t, ps := range ends {
		for p, end := range ps {
			start := from[t][p]
			if end <= start {
				continue
			}
			if parts[t] == nil {
				parts[t] = map[int32]kgo.Offset{}
			}
			parts[t][p] = kgo.NewOffset().At(start)
			left++
		}
	}
	if left == 0 {
		return nil
	}
	cl, err := kgo.NewClient(k.DeadLetterReader(parts, extra...)...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	done := map[string]map[int32]bool{}
	for left > 0 {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		fs := cl.PollFetches(pctx)
		expired := pctx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if expired {
			return fmt.Errorf("read topics: no record for 30s with %d partitions unread", left)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = fmt.Errorf("read %s[%d]: %w", t, p, err) })
		if ferr != nil {
			return ferr
		}
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			end := ends[p.Topic][p.Partition]
			for _, r := range p.Records {
				if r.Offset < end && !r.Attrs.IsControl() {
					fn(r)
				}
			}
			// Control records (commit markers) are kept so the reader
			// knows when it has passed the end offset.
			if done[p.Topic] == nil {
				done[p.Topic] = map[int32]bool{}
			}
			if !done[p.Topic][p.Partition] && len(p.Records) > 0 && p.Records[len(p.Records)-1].Offset+1 >= end {
				done[p.Topic][p.Partition] = true
				left--
			}
		})
	}
	return nil
}

// Range returns, for each partition of topics, the first offset at or after
// from (zero: the log start) and the end offset: the high watermark now,
// once the last stable offset has reached it (every transaction open now
// has ended; waiting up to wait, else the last stable offset, with a
// warning). A topic that does not exist has no partitions in either.
// Each listing is bounded by timeout. audit and checkpoint set
// --from-debezium read ranges with it (then ReadRange).
func Range(ctx context.Context, kopts []kgo.Opt, timeout time.Duration, topics []string, from time.Time, wait time.Duration, warn func(string)) (map[string]map[int32]int64, map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	list := func(f func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[string]map[int32]int64, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		l, err := f(cctx, topics...)
		if err != nil {
			return nil, fmt.Errorf("list offsets: %w", err)
		}
		out := map[string]map[int32]int64{}
		var lerr error
		l.Each(func(o kadm.ListedOffset) {
			if o.Partition < 0 || o.Err != nil {
				if o.Err != nil && o.Partition >= 0 {
					lerr = fmt.Errorf("list offsets of %s[%d]: %w", o.Topic, o.Partition, o.Err)
				}
				return // a topic that does not exist: nothing to read
			}
			if out[o.Topic] == nil {
				out[o.Topic] = map[int32]int64{}
			}
			out[o.Topic][o.Partition] = o.Offset
		})
		return out, lerr
	}
	ends, err := list(adm.ListEndOffsets)
	if err != nil {
		return nil, nil, err
	}
	starts, err := list(func(c context.Context, t ...string) (kadm.ListedOffsets, error) {
		if from.IsZero() {
			return adm.ListStartOffsets(c, t...)
		}
		return adm.ListOffsetsAfterMilli(c, from.UnixMilli(), t...)
	})
	if err != nil {
		return nil, nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		stable, err := list(adm.ListCommittedOffsets)
		if err != nil {
			return nil, nil, err
		}
		var held []string
		for t, ps := range ends {
			for p, end := range ps {
				if stable[t][p] < end {
					held = append(held, fmt.Sprintf("%s[%d]", t, p))
				}
			}
		}
		if len(held) == 0 {
			return starts, ends, nil
		}
		if time.Now().After(deadline) {
			sort.Strings(held)
			if warn != nil {
				warn(fmt.Sprintf("open transactions hold back %s for more than %s: reading up to their last stable offsets", strings.Join(held, ", "), wait))
			}
			return starts, stable, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
