//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// Partitions added to an output topic (on kfake, and on Apache Kafka with
// RELAY_TEST_KAFKA): an aggregate's records must stay in one partition.

// addPartitions grows topic to total partitions and waits until the
// broker's metadata shows them.
func addPartitions(t *testing.T, brokers []string, topic string, total int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.UpdatePartitions(ctx, total, topic)
	if err == nil {
		var r kadm.CreatePartitionsResponse
		if r, err = resp.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatalf("add partitions to %s: %v", topic, err)
	}
	Eventually(t, 30*time.Second, func() error {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		if n := len(td[topic].Partitions); n != total {
			return fmt.Errorf("topic %s has %d partitions, want %d", topic, n, total)
		}
		return nil
	})
}

// writeAlarms commits n transactions over 16 aggregates and returns when
// the relay's checkpoint covers them.
func writeAlarms(t *testing.T, s *Schema, cfg config.Config, n int, tag string) {
	t.Helper()
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: n / 2, Devices: 16, Tag: tag}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
}

// checkAggregatesWhole fails when a key's records are in two partitions of
// topic, or when the records differ from the outbox table.
func checkAggregatesWhole(t *testing.T, s *Schema, brokers []string, prefix, topic string) {
	t.Helper()
	recs := Consume(t, brokers, prefix)
	if rep := Compare(t, s, recs); !rep.OK() {
		t.Fatalf("records differ from the outbox: %s", rep)
	}
	parts := map[string]map[int32]bool{}
	for _, r := range recs {
		if r.Topic != topic {
			continue
		}
		if parts[r.Key] == nil {
			parts[r.Key] = map[int32]bool{}
		}
		parts[r.Key][r.Partition] = true
	}
	var split []string
	for k, p := range parts {
		if len(p) > 1 {
			split = append(split, fmt.Sprintf("%s in %d partitions", k, len(p)))
		}
	}
	if len(split) > 0 || len(parts) != 16 {
		t.Fatalf("%d of %d keys split across partitions: %v", len(split), len(parts), split)
	}
}

// Partitions added while the relay runs, and between two runs: with the
// default kafka.on_partitions_added (keep), every aggregate stays in its
// partition (keys placed by the count the checkpoint recorded), and the
// change is logged with the topic, both counts and how to adopt it.
func TestPartitionsAddedKeepEachAggregateInOnePartition(t *testing.T) {
	t.Run("while running", func(t *testing.T) {
		k, s, cfg := env.Pipeline(t)
		topic := cfg.Router.TopicPrefix + "alarm"
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		writeAlarms(t, s, cfg, 64, "a")
		addPartitions(t, k.Brokers, topic, 8)
		// Rows to new topics, until the producer's metadata (loaded again for
		// a new topic) shows the alarm topic's 8 partitions to the
		// partitioner, which logs it; then more alarms.
		const changed = "partition count changed while running"
		for i := 1; !strings.Contains(r.Logs(), changed); i++ {
			if i > 20 {
				t.Fatalf("the producer did not see the added partitions after %d new topics; the log:\n%s", i-1, tailLines(r.Logs(), 20))
			}
			if err := env.DB.Exec(fmt.Sprintf(`INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('other-%d', 'other%d', 'other-%d', 'X', '{}')`, s.Name, i, i, i)); err != nil {
				t.Fatal(err)
			}
			writeAlarms(t, s, cfg, 2, fmt.Sprintf("w%d", i))
		}
		writeAlarms(t, s, cfg, 64, "b")
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		checkAggregatesWhole(t, s, k.Brokers, cfg.Router.TopicPrefix, topic)
		// The count goes on with the checkpoint.
		if cp := loadCheckpoint(t, cfg); cp.Partitions[topic] != 3 {
			t.Fatalf("checkpoint records %v partitions for %s, want 3", cp.Partitions, topic)
		}
		r = RunRelay(t, cfg)
		r.WaitReady(t)
		writeAlarms(t, s, cfg, 64, "c")
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		checkAggregatesWhole(t, s, k.Brokers, cfg.Router.TopicPrefix, topic)
		if !strings.Contains(r.Logs(), "more partitions than the checkpoint places keys by") {
			t.Fatalf("the restart did not log the changed partition count; its log:\n%s", tailLines(r.Logs(), 20))
		}
	})
	t.Run("between restarts", func(t *testing.T) {
		k, s, cfg := env.Pipeline(t)
		topic := cfg.Router.TopicPrefix + "alarm"
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		writeAlarms(t, s, cfg, 64, "a")
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		addPartitions(t, k.Brokers, topic, 8)
		r = RunRelay(t, cfg)
		r.WaitReady(t)
		writeAlarms(t, s, cfg, 64, "b")
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		checkAggregatesWhole(t, s, k.Brokers, cfg.Router.TopicPrefix, topic)
		logs := r.Logs()
		for _, want := range []string{topic, `"recorded_partitions":3`, `"partitions":8`, "kafka.on_partitions_added: adopt"} {
			if !strings.Contains(logs, want) {
				t.Fatalf("the warning does not name %q; the log:\n%s", want, tailLines(logs, 20))
			}
		}
		// replay publishes a row again where the relay placed its aggregate.
		one := map[string]string{} // aggregate -> one of its event ids
		for id, agg := range s.OutboxRows(t) {
			one[agg] = id
		}
		var list []string
		for _, id := range one {
			list = append(list, id)
		}
		if out, errOut, code := env.CLI(t, "replay", "--config", WriteConfig(t, cfg), "--event-id", strings.Join(list, ","), "--yes"); code != 0 {
			t.Fatalf("replay: exit %d: %s%s", code, out, errOut)
		}
		// replay returns once its commit is acknowledged; a broker writes
		// the commit's markers to each partition after that (Apache Kafka
		// does so asynchronously), and a read_committed reader sees a
		// partition's records once its marker is written.
		placed := map[string]int32{}
		var replayed []Record
		Eventually(t, 30*time.Second, func() error {
			clear(placed)
			replayed = replayed[:0]
			for _, rec := range Consume(t, k.Brokers, topic) {
				if rec.Headers["replayed"] != "" {
					replayed = append(replayed, rec)
				} else {
					placed[rec.Key] = rec.Partition
				}
			}
			if len(replayed) < len(list) {
				return fmt.Errorf("%d of %d replayed records visible", len(replayed), len(list))
			}
			return nil
		})
		for _, rec := range replayed {
			if rec.Partition != placed[rec.Key] {
				t.Errorf("replay put %s (%s) in partition %d, its aggregate is in %d", rec.ID, rec.Key, rec.Partition, placed[rec.Key])
			}
		}
		if len(replayed) != len(list) {
			t.Fatalf("%d records replayed, want %d", len(replayed), len(list))
		}
	})
}

// kafka.on_partitions_added stop: a restart after partitions were added
// stops before publishing to the topic, naming it and both counts, with
// exit 78; adopt: the new count is used and recorded from then on.
func TestPartitionsAddedStopOrAdopt(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	topic := cfg.Router.TopicPrefix + "alarm"
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	writeAlarms(t, s, cfg, 32, "a")
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	addPartitions(t, k.Brokers, topic, 8)

	cfg.Kafka.OnPartitionsAdded = config.PartitionsStop
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 1, Devices: 1, Tag: "b"}); err != nil {
		t.Fatal(err)
	}
	err := r.StoppedWith(t)
	if !errors.Is(err, relay.ErrPartitionsChanged) || relay.ExitCode(err) != relay.ExitConfig ||
		!strings.Contains(err.Error(), topic) || !strings.Contains(err.Error(), "8 partitions") || !strings.Contains(err.Error(), "by 3") {
		t.Fatalf("stopped with %v (exit %d), want the topic, 8 and 3 named (exit %d)", err, relay.ExitCode(err), relay.ExitConfig)
	}

	cfg.Kafka.OnPartitionsAdded = config.PartitionsAdopt
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	writeAlarms(t, s, cfg, 32, "c")
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if cp := loadCheckpoint(t, cfg); cp.Partitions[topic] != 8 {
		t.Fatalf("checkpoint records %v partitions for %s, want 8 (adopted)", cp.Partitions, topic)
	}
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); len(rep.Missing)+len(rep.Duplicates) > 0 {
		t.Fatalf("records differ from the outbox: %s", rep)
	}
}

// An output topic deleted and created again with fewer partitions than the
// checkpoint places keys by, between two runs: the default
// (kafka.on_partitions_added keep) cannot keep placing keys by the recorded
// count, so the relay stops before publishing to it, naming the topic, both
// counts and the fix (exit 78); adopt for one start places keys by the new
// count from then on.
func TestOutputTopicRecreatedWithFewerPartitionsStops(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	topic := cfg.Router.TopicPrefix + "alarm"
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	writeAlarms(t, s, cfg, 32, "a")
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	deleteTopic(t, k, topic)
	createTopic(t, k, topic, 1, nil)

	r = RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 1, Devices: 1, Tag: "b"}); err != nil {
		t.Fatal(err)
	}
	err := r.StoppedWith(t)
	if !errors.Is(err, relay.ErrPartitionsChanged) || relay.ExitCode(err) != relay.ExitConfig ||
		!strings.Contains(err.Error(), topic) || !strings.Contains(err.Error(), "has 1 partitions, fewer than the 3") ||
		!strings.Contains(err.Error(), "kafka.on_partitions_added: adopt") {
		t.Fatalf("stopped with %v (exit %d), want the topic, 1 and 3 and the fix named (exit %d)", err, relay.ExitCode(err), relay.ExitConfig)
	}
	if got := ids(Consume(t, k.Brokers, topic), topic); len(got) != 0 {
		t.Fatalf("published %v to the recreated topic before stopping", got)
	}

	cfg.Kafka.OnPartitionsAdded = config.PartitionsAdopt
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	writeAlarms(t, s, cfg, 2, "c")
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if cp := loadCheckpoint(t, cfg); cp.Partitions[topic] != 1 {
		t.Fatalf("checkpoint records %v partitions for %s, want 1 (adopted)", cp.Partitions, topic)
	}
	// The row written before the stop (b) and the two after (c), once.
	got := ids(Consume(t, k.Brokers, topic), topic)
	for _, id := range got {
		if !strings.HasPrefix(id, s.Name+"-bw") && !strings.HasPrefix(id, s.Name+"-cw") {
			t.Fatalf("published %v to the recreated topic, want only the 3 rows written since", got)
		}
	}
	if len(got) != 3 {
		t.Fatalf("published %v to the recreated topic, want the 3 rows written since", got)
	}
}

// The partition counts a checkpoint places keys by outlive the operator's
// commands that replace the position: after `checkpoint reset` (the relay
// starts at source.start), after a second reset, and after a reset then
// `checkpoint set`, an aggregate whose topic gained partitions stays in the
// partition of its earlier records (kafka.on_partitions_added keep), and
// the count is still recorded.
func TestPartitionsAddedKeptAcrossCheckpointReset(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmds [][]string
	}{
		{"reset", [][]string{{"reset"}}},
		{"reset twice", [][]string{{"reset"}, {"reset"}}},
		{"reset then set", [][]string{{"reset"}, {"set", "--to", "now"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, s, cfg := env.Pipeline(t)
			topic := cfg.Router.TopicPrefix + "alarm"
			path := WriteConfig(t, cfg)
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			writeAlarms(t, s, cfg, 64, "a")
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			addPartitions(t, k.Brokers, topic, 8)
			for _, c := range tc.cmds {
				args := append(append([]string{"checkpoint"}, c...), "--yes", "--config", path)
				if out, errOut, code := env.CLI(t, args...); code != 0 {
					t.Fatalf("%v: exit %d\n%s%s", c, code, out, errOut)
				}
			}
			r = RunRelay(t, cfg)
			r.WaitReady(t)
			writeAlarms(t, s, cfg, 64, "b")
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			checkAggregatesWhole(t, s, k.Brokers, cfg.Router.TopicPrefix, topic)
			if cp := loadCheckpoint(t, cfg); cp.Partitions[topic] != 3 {
				t.Fatalf("checkpoint records %v partitions for %s, want 3", cp.Partitions, topic)
			}
		})
	}
}
