package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// What the relay published, read back: every committed record of a
// pipeline's topics, the aborted ones too, and their comparison with the
// outbox table.

// Record is one consumed record.
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	ID        string // header "id"
	Headers   map[string]string
	Timestamp time.Time
}

// Consume reads every committed record of the topics matching prefix, with
// read_committed, up to each partition's last stable offset at call time.
func Consume(t testing.TB, brokers []string, prefix string) []Record {
	t.Helper()
	recs, err := consume(brokers, prefix)
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	return recs
}

func consume(brokers []string, prefix string) ([]Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admc, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	adm := kadm.NewClient(admc)
	defer adm.Close()
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, tp := range topics.Sorted() {
		if strings.HasPrefix(tp.Topic, prefix) {
			names = append(names, tp.Topic)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	ends, err := adm.ListCommittedOffsets(ctx, names...)
	if err != nil {
		return nil, err
	}
	want := map[string]map[int32]kgo.Offset{}
	remaining := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil || o.Offset == 0 {
			return
		}
		if want[o.Topic] == nil {
			want[o.Topic] = map[int32]kgo.Offset{}
			remaining[o.Topic] = map[int32]int64{}
		}
		want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
		remaining[o.Topic][o.Partition] = o.Offset
	})
	if len(want) == 0 {
		return nil, nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(want),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var out []Record
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil, fmt.Errorf("consume %v: %w (still waiting for %v)", names, ctx.Err(), remaining)
		}
		if err := fs.Err(); err != nil {
			return nil, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(remaining[r.Topic], r.Partition)
				if len(remaining[r.Topic]) == 0 {
					delete(remaining, r.Topic)
				}
			}
			if r.Attrs.IsControl() {
				return
			}
			rec := Record{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key),
				Value: r.Value, Timestamp: r.Timestamp, Headers: map[string]string{}}
			for _, h := range r.Headers {
				rec.Headers[h.Key] = string(h.Value)
				if h.Key == "id" {
					rec.ID = string(h.Value)
				}
			}
			out = append(out, rec)
		})
	}
	return out, nil
}

// EachProduced calls fn, in partition order, for every data record of the
// topics matching prefix (Kafka's internal topics included) up to their
// high watermark at call time, aborted ones included (read_uncommitted;
// control records are read, not passed).
func EachProduced(t testing.TB, brokers []string, prefix string, fn func(*kgo.Record)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	defer adm.Close()
	topics, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tp := range topics.Sorted() {
		if strings.HasPrefix(tp.Topic, prefix) {
			names = append(names, tp.Topic)
		}
	}
	if len(names) == 0 {
		return
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]kgo.Offset{}
	remaining := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			if want[o.Topic] == nil {
				want[o.Topic], remaining[o.Topic] = map[int32]kgo.Offset{}, map[int32]int64{}
			}
			want[o.Topic][o.Partition] = kgo.NewOffset().AtStart()
			remaining[o.Topic][o.Partition] = o.Offset
		}
	})
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(want),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for len(remaining) > 0 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read produced records: %v", ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Topic][r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
			if r.Offset+1 >= end {
				delete(remaining[r.Topic], r.Partition)
				if len(remaining[r.Topic]) == 0 {
					delete(remaining, r.Topic)
				}
			}
		})
	}
}

// CountAll counts every data record of the topics matching prefix, aborted
// ones included (read_uncommitted, up to the high watermark).
func CountAll(t testing.TB, brokers []string, prefix string) int {
	t.Helper()
	n := 0
	EachProduced(t, brokers, prefix, func(*kgo.Record) { n++ })
	return n
}

// Report compares consumed records with the outbox table.
type Report struct {
	Expected, Received int
	Missing            []string // committed rows never received
	Duplicates         []string // event ids received more than once
	Unexpected         []string // received, not in the outbox table (rolled back or invented)
	OutOfOrder         []string // per-aggregate sequence not strictly increasing
	WrongKey           []string // key differs from the row's aggregate_id
}

// OK reports a clean comparison.
func (r Report) OK() bool {
	return len(r.Missing)+len(r.Duplicates)+len(r.Unexpected)+len(r.OutOfOrder)+len(r.WrongKey) == 0
}

func (r Report) String() string {
	cut := func(s []string) []string {
		sort.Strings(s)
		if len(s) > 5 {
			return append(s[:5:5], fmt.Sprintf("... %d in all", len(s)))
		}
		return s
	}
	return fmt.Sprintf("expected %d, received %d; missing %v; duplicates %v; unexpected %v; out of order %v; wrong key %v",
		r.Expected, r.Received, cut(r.Missing), cut(r.Duplicates), cut(r.Unexpected), cut(r.OutOfOrder), cut(r.WrongKey))
}

// Compare checks recs against the schema's outbox table: each row exactly
// once with key = aggregate_id, nothing else, and per aggregate the payload's
// "seq" strictly increasing in partition order.
func Compare(t testing.TB, s *Schema, recs []Record) Report {
	t.Helper()
	rows := s.OutboxRows(t)
	rep := Report{Expected: len(rows), Received: len(recs)}
	seen := map[string]int{}
	lastSeq := map[string]int64{}
	for _, r := range recs {
		seen[r.ID]++
		if seen[r.ID] == 2 {
			rep.Duplicates = append(rep.Duplicates, r.ID)
		}
		agg, ok := rows[r.ID]
		if !ok {
			rep.Unexpected = append(rep.Unexpected, r.ID)
			continue
		}
		if agg != r.Key {
			rep.WrongKey = append(rep.WrongKey, r.ID)
		}
		var p struct{ Seq int64 }
		if err := json.Unmarshal(r.Value, &p); err == nil && p.Seq > 0 {
			if p.Seq <= lastSeq[r.Key] {
				rep.OutOfOrder = append(rep.OutOfOrder, fmt.Sprintf("%s: seq %d after %d", r.Key, p.Seq, lastSeq[r.Key]))
			}
			lastSeq[r.Key] = p.Seq
		}
	}
	for id := range rows {
		if seen[id] == 0 {
			rep.Missing = append(rep.Missing, id)
		}
	}
	return rep
}

// CreateTopics creates topics with partitions each (replication factor 1),
// failing the test on an error.
func CreateTopics(t testing.TB, brokers []string, partitions int32, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := kadm.NewClient(cl).CreateTopics(ctx, partitions, 1, nil, topics...)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("create topics %v: %v", topics, err)
	}
}
