package clients

import (
	"context"
	"fmt"
	"time"

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
