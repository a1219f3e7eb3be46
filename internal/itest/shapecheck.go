package itest

// What a shape run checks: the checkpoint it reached, clean stops, open
// transactions, and the records produced and visible.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// Checkpoint loads the committed checkpoint (nil when none).
func (r *ShapeRun) Checkpoint() *checkpoint.Checkpoint {
	r.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cp, err := r.store().Load(ctx, r.Cfg.Name)
	if err != nil {
		r.T.Fatalf("load checkpoint: %v", err)
	}
	return cp
}

// tryCheckpoint loads the committed checkpoint within wait; ok is false
// when it cannot be read now, e.g. while a relay killed between flush and
// commit left a transaction open on the checkpoint partition (a reader then
// waits for the next relay run to fence it, or for the broker to abort it).
func (r *ShapeRun) tryCheckpoint(wait time.Duration) (cp *checkpoint.Checkpoint, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	cp, err := r.store().Load(ctx, r.Cfg.Name)
	return cp, err == nil
}

// Covers reports whether cp covers the GTID set target completely (no
// partial transaction pending).
func Covers(cp *checkpoint.Checkpoint, target string) bool {
	if cp == nil || cp.Partial != nil {
		return false
	}
	have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
	if err != nil {
		return false
	}
	want, err := binlog.ParseSet(cp.Flavor, target)
	if err != nil {
		return false
	}
	return have.Contain(want)
}

// ContainsGTID reports whether the checkpoint's GTID set includes gtid.
func ContainsGTID(cp *checkpoint.Checkpoint, gtid string) bool {
	if cp == nil {
		return false
	}
	have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
	if err != nil {
		return false
	}
	want, err := binlog.ParseSet(cp.Flavor, gtid)
	if err != nil {
		return false
	}
	return have.Contain(want)
}

func (r *ShapeRun) waitCheckpoint(p *Proc) {
	r.T.Helper()
	Eventually(r.T, r.opts.RunTimeout, func() error {
		if p.Exited() {
			r.T.Fatalf("relay exited while starting:\n%s", r.Tail())
		}
		if cp, ok := r.tryCheckpoint(2 * time.Second); !ok || cp == nil {
			return fmt.Errorf("no checkpoint yet")
		}
		return nil
	})
}

// checkCleanStop reports (without ending the test, so that the data checks
// still run) a SIGTERM stop that was not clean; at most three reports per
// shape run.
func (r *ShapeRun) checkCleanStop(p *Proc, code int, what string) {
	r.T.Helper()
	var problem string
	switch {
	case code != 0:
		problem = fmt.Sprintf("relay exited %d after SIGTERM, want 0", code)
	case strings.Contains(p.Output(), `"relay started"`) && !strings.Contains(p.Output(), "final checkpoint written"):
		problem = "relay stopped on SIGTERM without writing its final checkpoint"
	default:
		if open := OpenTransactions(r.T, r.Kafka.Brokers, r.Prefix, r.Cfg.Kafka.CheckpointTopic); len(open) > 0 {
			problem = fmt.Sprintf("after a clean SIGTERM stop, Kafka transactions are still open on %v (last stable offset below the high watermark): "+
				"read_committed consumers are stuck until the broker aborts them", open)
		}
	}
	if problem == "" {
		return
	}
	r.unclean++
	if r.unclean <= 3 {
		r.T.Errorf("%s: %s:\n%s", what, problem, tail(p.Log, 3000))
	}
}

// OpenTransactions lists the partitions (of topics matching prefix, and of
// the named topics) whose last stable offset is below their high
// watermark: a transaction is open there.
func OpenTransactions(t testing.TB, brokers []string, prefix string, topics ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(cl)
	defer adm.Close()
	all, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tp := range all.Sorted() {
		if (prefix != "" && strings.HasPrefix(tp.Topic, prefix)) || slices.Contains(topics, tp.Topic) {
			names = append(names, tp.Topic)
		}
	}
	if len(names) == 0 {
		return nil
	}
	hw, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := adm.ListCommittedOffsets(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	hw.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			return
		}
		if l, ok := ls.Lookup(o.Topic, o.Partition); ok && l.Err == nil && l.Offset < o.Offset {
			open = append(open, fmt.Sprintf("%s/%d (lso %d, hwm %d)", o.Topic, o.Partition, l.Offset, o.Offset))
		}
	})
	return open
}

// ProducedIDs returns the id header of every data record of the topics
// matching prefix, aborted ones included (read_uncommitted).
func ProducedIDs(t testing.TB, brokers []string, prefix string) map[string]int {
	t.Helper()
	out := map[string]int{}
	EachProduced(t, brokers, prefix, func(r *kgo.Record) {
		for _, h := range r.Headers {
			if h.Key == "id" {
				out[string(h.Value)]++
			}
		}
	})
	return out
}

// RequireNeverProduced fails if any of ids was ever produced, even in a
// transaction that was aborted later.
func (r *ShapeRun) RequireNeverProduced(ids []string) {
	r.T.Helper()
	produced := ProducedIDs(r.T, r.Kafka.Brokers, r.Prefix)
	var seen []string
	for _, id := range ids {
		if produced[id] > 0 {
			seen = append(seen, id)
		}
	}
	if len(seen) > 0 {
		r.T.Fatalf("%s: rows of rolled-back work were produced to Kafka (aborted or not): %v", r.Mode, seen)
	}
}

// WaitVisible polls until every id is visible to read_committed consumers
// (Straight mode, the live relay).
func (r *ShapeRun) WaitVisible(ids ...string) {
	r.T.Helper()
	Eventually(r.T, time.Minute, func() error {
		if r.Live != nil && r.Live.Exited() {
			r.T.Fatalf("the relay stopped:\n%s", r.Tail())
		}
		seen := map[string]bool{}
		for _, rec := range Consume(r.T, r.Kafka.Brokers, r.Prefix) {
			seen[rec.ID] = true
		}
		for _, id := range ids {
			if !seen[id] {
				return fmt.Errorf("%s not published yet", id)
			}
		}
		return nil
	})
}

// Visible returns which of ids read_committed consumers see now.
func (r *ShapeRun) Visible(ids ...string) []string {
	r.T.Helper()
	seen := map[string]bool{}
	for _, rec := range Consume(r.T, r.Kafka.Brokers, r.Prefix) {
		seen[rec.ID] = true
	}
	var out []string
	for _, id := range ids {
		if seen[id] {
			out = append(out, id)
		}
	}
	return out
}
