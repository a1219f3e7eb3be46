package relay

// The harness's checks: runs of attempts stopped at every event, and what
// a read_committed consumer and the checkpoints show against the script.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// stopEvery runs the script in a chain of attempts: the k-th reads up to
// script event k (1, 2, ... len-1) and is then stopped by stop (term or
// crash); the last reads to the end and stops with SIGTERM.
func (h *harness) stopEvery(stop func(*attempt) error, want error) {
	h.t.Helper()
	for k := 1; k < len(h.s.events); k++ {
		a := h.start()
		a.feed(k)
		if err := stop(a); !errors.Is(err, want) {
			h.t.Fatalf("stopped after event %d: %v, want %v", k, err, want)
		}
	}
	h.start().finish()
}

// waitCheckpoint polls the committed checkpoint until ok accepts it.
func (h *harness) waitCheckpoint(what string, ok func(*checkpoint.Checkpoint) bool) *checkpoint.Checkpoint {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		cp := h.load()
		if cp != nil && ok(cp) {
			return cp
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no committed checkpoint %s; the last is %+v", what, cp)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *harness) load() *checkpoint.Checkpoint {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cp, err := h.relay.store.Load(ctx, h.cfg.Name)
	if err != nil {
		h.t.Fatal(err)
	}
	return cp
}

func (h *harness) history() []*checkpoint.Checkpoint {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	all, err := h.relay.store.History(ctx, h.cfg.Name, 1<<20)
	if err != nil {
		h.t.Fatal(err)
	}
	return all
}

// verify checks the end state: every committed outbox row published once
// (read_committed), nothing else, each aggregate in commit order; the
// checkpoint at the script's end; no checkpoint ever moved backwards; no
// transaction left open.
func (h *harness) verify() {
	h.t.Helper()
	h.verifyPublished(h.s.want)
	cp := h.load()
	if cp == nil || cp.GTIDSet != h.s.end() || cp.Partial != nil {
		h.t.Errorf("final checkpoint %+v, want gtid_set %q and nothing partial", cp, h.s.end())
	} else if cp.Events != int64(len(h.s.want)) {
		h.t.Errorf("final checkpoint counts %d events, %d published", cp.Events, len(h.s.want))
	}
	var prepared []string
	if cp != nil && cp.XA != nil {
		for _, p := range cp.XA.Prepared {
			prepared = append(prepared, p.XID)
		}
	}
	if want := slices.Sorted(maps.Keys(h.s.held)); !slices.Equal(slices.Sorted(slices.Values(prepared)), want) {
		h.t.Errorf("final checkpoint lists prepared XA transactions %v, want %v", prepared, want)
	}
	h.verifyHistory()
	h.verifyNoOpenTransaction()
}

// verifyHistory checks that no checkpoint moved backwards: the GTID set
// never shrinks, and at the same GTID set a partial transaction's count of
// published rows never drops (nor is forgotten); and that each carries the
// fingerprint of the last transaction with digested rows it covers.
func (h *harness) verifyHistory() {
	h.t.Helper()
	all := h.history()
	for i, cp := range all {
		h.verifyFingerprint(i, cp)
	}
	for i := 1; i < len(all); i++ {
		prev, cur := all[i-1], all[i]
		ps, err1 := binlog.ParseSet(h.s.flavor, prev.GTIDSet)
		cs, err2 := binlog.ParseSet(h.s.flavor, cur.GTIDSet)
		if err := errors.Join(err1, err2); err != nil {
			h.t.Fatal(err)
		}
		if !cs.Contain(ps) {
			h.t.Errorf("checkpoint %d moved backwards: gtid_set %q after %q", i, cur.GTIDSet, prev.GTIDSet)
			continue
		}
		if ps.Contain(cs) && prev.Partial != nil &&
			(cur.Partial == nil || cur.Partial.GTID != prev.Partial.GTID || cur.Partial.Rows < prev.Partial.Rows) {
			h.t.Errorf("checkpoint %d moved backwards at %q: partial %+v after %+v", i, cur.GTIDSet, cur.Partial, prev.Partial)
		}
	}
}

// verifyFingerprint checks that the k-th checkpoint written by the relay
// carries the fingerprint of the last transaction of the script with a
// digest (a commit of rows, not of an XA transaction) whose GTID its set
// covers, with the set just before that transaction; nil when none.
func (h *harness) verifyFingerprint(k int, cp *checkpoint.Checkpoint) {
	h.t.Helper()
	if cp.Operator != nil {
		return
	}
	covered, err := binlog.ParseSet(h.s.flavor, cp.GTIDSet)
	if err != nil {
		h.t.Fatal(err)
	}
	var want *checkpoint.Fingerprint
	before := ""
	for _, ev := range h.s.events {
		if ev.Set == nil {
			continue
		}
		one, err := binlog.ParseSet(h.s.flavor, ev.GTID)
		if err != nil {
			h.t.Fatal(err)
		}
		if ev.Digest != nil && covered.Contain(one) {
			want = &checkpoint.Fingerprint{GTID: ev.GTID, Before: before, Tables: ev.Digest.Tables, Rows: int64(ev.Digest.Rows), Digest: ev.Digest.Sum}
		}
		before = ev.Set.String()
	}
	got := cp.Fingerprint
	switch {
	case want == nil && got == nil:
	case want == nil || got == nil || got.GTID != want.GTID || got.Before != want.Before || got.Rows != want.Rows ||
		got.Digest != want.Digest || !slices.Equal(got.Tables, want.Tables):
		h.t.Errorf("checkpoint %d at %q carries fingerprint %+v, want %+v", k, cp.GTIDSet, got, want)
	}
}

// verifyPublished reads the outbox topics read_committed and compares them
// with want.
func (h *harness) verifyPublished(want []outboxRow) {
	h.t.Helper()
	recs := h.consume()
	seen := map[string]int{}
	got := map[string][]string{} // topic/key -> event ids, in offset order
	for _, r := range recs {
		id := header(r, "id")
		seen[id]++
		k := r.Topic + "/" + string(r.Key)
		got[k] = append(got[k], id)
		if string(r.Value) != payload(id) {
			h.t.Errorf("record %s has value %s", id, r.Value)
		}
	}
	wantOrder := map[string][]string{}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.id] = true
		k := h.cfg.Router.TopicPrefix + w.aggType + "/" + w.aggID
		wantOrder[k] = append(wantOrder[k], w.id)
		if seen[w.id] == 0 {
			h.t.Errorf("row %s (%s/%s) not published", w.id, w.aggType, w.aggID)
		}
	}
	for id, n := range seen {
		switch {
		case !wanted[id]:
			h.t.Errorf("record %s published %d times, but its row was never committed", id, n)
		case n > 1:
			h.t.Errorf("row %s published %d times", id, n)
		}
	}
	if h.t.Failed() {
		return
	}
	for k, ids := range wantOrder {
		if !slices.Equal(got[k], ids) {
			h.t.Errorf("aggregate %s published in the order %v, committed %v", k, got[k], ids)
		}
	}
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// outboxTopics are the topics the relay created for outbox rows.
func (h *harness) outboxTopics(ctx context.Context, adm *kadm.Client) []string {
	h.t.Helper()
	all, err := adm.ListTopics(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, name := range all.Names() {
		if strings.HasPrefix(name, h.cfg.Router.TopicPrefix) {
			out = append(out, name)
		}
	}
	return out
}

// consume returns every record of the outbox topics a read_committed
// consumer sees, up to each partition's last stable offset, in offset order
// per partition.
func (h *harness) consume() []*kgo.Record {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := h.outboxTopics(ctx, adm)
	if len(topics) == 0 {
		return nil
	}
	starts, err1 := adm.ListStartOffsets(ctx, topics...)
	ends, err2 := adm.ListCommittedOffsets(ctx, topics...)
	if err := errors.Join(err1, err2, starts.Error(), ends.Error()); err != nil {
		h.t.Fatal(err)
	}
	parts := map[string]map[int32]kgo.Offset{}
	left := map[string]int64{} // topic/partition -> end offset still to reach
	ends.Each(func(o kadm.ListedOffset) {
		start, _ := starts.Lookup(o.Topic, o.Partition)
		if o.Offset > start.Offset {
			if parts[o.Topic] == nil {
				parts[o.Topic] = map[int32]kgo.Offset{}
			}
			parts[o.Topic][o.Partition] = kgo.NewOffset().At(start.Offset)
			left[fmt.Sprintf("%s/%d", o.Topic, o.Partition)] = o.Offset
		}
	})
	if len(parts) == 0 {
		return nil
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...), kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	var out []*kgo.Record
	for len(left) > 0 {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			h.t.Fatalf("consume the outbox topics: %v (partitions not read to the end: %v)", err, left)
		}
		fs.EachError(func(topic string, p int32, err error) { h.t.Fatalf("consume %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			k := fmt.Sprintf("%s/%d", r.Topic, r.Partition)
			if end, ok := left[k]; ok && r.Offset+1 >= end {
				delete(left, k)
			}
			if !r.Attrs.IsControl() {
				out = append(out, r)
			}
		})
	}
	return out
}

// verifyNoOpenTransaction checks that on every outbox and checkpoint
// partition the last stable offset (what read_committed consumers read up
// to) is the high watermark: no transaction is left open.
func (h *harness) verifyNoOpenTransaction() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.cfg.Kafka.Brokers...))
	if err != nil {
		h.t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics := append(h.outboxTopics(ctx, adm), h.cfg.Kafka.CheckpointTopic)
	hwm, err1 := adm.ListEndOffsets(ctx, topics...)
	lso, err2 := adm.ListCommittedOffsets(ctx, topics...)
	if err := errors.Join(err1, err2, hwm.Error(), lso.Error()); err != nil {
		h.t.Fatal(err)
	}
	hwm.Each(func(o kadm.ListedOffset) {
		if s, _ := lso.Lookup(o.Topic, o.Partition); s.Offset != o.Offset {
			h.t.Errorf("%s/%d: last stable offset %d, high watermark %d: a transaction is open", o.Topic, o.Partition, s.Offset, o.Offset)
		}
	})
}
