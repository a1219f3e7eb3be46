//go:build integration

package itest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// insertAlarms puts n outbox rows of n aggregates (alarm dev-0..) into s's
// table, without a relay, and returns their event ids.
func insertAlarms(t *testing.T, s *Schema, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("rv-%d", i)
		q := fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', 'alarm', 'dev-%d', 'X', '{}')`, s.Table(), ids[i], i)
		if err := env.DB.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// replayedIDs reads the topic at once (read_committed, up to each
// partition's last stable offset now) and counts the replayed records by
// event id, and the partitions they are in.
func replayedIDs(t *testing.T, k *Kafka, topic string) (map[string]int, map[int32]bool) {
	t.Helper()
	ids, parts := map[string]int{}, map[int32]bool{}
	for _, rec := range Consume(t, k.Brokers, topic) {
		if rec.Headers["replayed"] != "" {
			ids[rec.ID]++
			parts[rec.Partition] = true
		}
	}
	return ids, parts
}

// replay returns once a read_committed reader sees every record it
// published, in every partition it wrote: a reader right after it needs
// no polling (the broker writes the commit's markers after answering it).
func TestReplayReturnsOnceEveryPartitionItWroteIsVisible(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.TopicPartitions = 32
	ids := insertAlarms(t, s, 96)
	out, errOut, code := env.CLI(t, "replay", "--config", WriteConfig(t, cfg), "--event-id", strings.Join(ids, ","), "--batch", "48", "--yes")
	if code != 0 || !strings.Contains(out, "published 96 records in 2 transactions") {
		t.Fatalf("replay: exit %d\n%s%s", code, out, errOut)
	}
	t.Log(strings.TrimSpace(out[strings.LastIndex(out, "replay: published"):]))
	got, parts := replayedIDs(t, k, cfg.Router.TopicPrefix+"alarm")
	if len(got) != len(ids) || len(parts) < 16 {
		t.Fatalf("right after replay returned, a read_committed reader sees %d of %d replayed records in %d partitions", len(got), len(ids), len(parts))
	}
}

// abortCommit makes the harness's kfake abort the next commit of
// transactional id while its producer is answered success.
func abortCommit(t *testing.T, k *Kafka, id string) *atomic.Int32 {
	t.Helper()
	if k.Cluster == nil {
		t.Skip("controls the broker's answers: kfake only")
	}
	return kafkatest.AbortCommits(k.Cluster, id, 1)
}

// A replay transaction the broker aborted after its commit was answered is
// published again: replay reports only records a reader sees, each once.
func TestReplayPublishesAgainWhenTheBrokerAbortedItsCommit(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	aborted := abortCommit(t, k, cfg.Name+".replay")
	ids := insertAlarms(t, s, 6)
	out, errOut, code := env.CLI(t, "replay", "--config", WriteConfig(t, cfg), "--event-id", strings.Join(ids, ","), "--batch", "4", "--yes")
	if code != 0 || !strings.Contains(out, "published 6 records in 2 transactions") || aborted.Load() != 1 {
		t.Fatalf("replay: exit %d (commits aborted: %d)\n%s%s", code, aborted.Load(), out, errOut)
	}
	got, _ := replayedIDs(t, k, cfg.Router.TopicPrefix+"alarm")
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("event %s replayed %d times, want 1 (all: %v)", id, got[id], got)
		}
	}
}

// A dead-letter replay whose transaction the broker aborted after its
// commit was answered says nothing was replayed, and its records stay
// pending; the next run publishes them.
func TestDeadLetterReplayFailsWhenTheBrokerAbortedItsCommit(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	aborted := abortCommit(t, k, cfg.Name+".dead-letter-replay")
	path := WriteConfig(t, cfg)
	dlq := "outbox-relay.dead-letter." + cfg.Name
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, dlq); err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Topic: dlq, Headers: []kgo.RecordHeader{{Key: "error", Value: []byte("x")}, {Key: "source.table", Value: []byte(s.Table())},
		{Key: "source.gtid", Value: []byte("0-1-1")}, {Key: "id", Value: []byte("dl-1")}},
		Value: []byte(`{"event_id":"dl-1","aggregate_type":"alarm","aggregate_id":"d","event_type":"X","payload":"{}"}`)}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := env.CLI(t, "dead-letter", "replay", "--config", path, "--yes")
	if code == 0 || aborted.Load() != 1 || !strings.Contains(errOut, "not committed") || !strings.Contains(errOut, "nothing was replayed") {
		t.Fatalf("dead-letter replay whose commit was aborted: exit %d (commits aborted: %d)\n%s%s", code, aborted.Load(), out, errOut)
	}
	if got, _ := replayedIDs(t, k, cfg.Router.TopicPrefix+"alarm"); len(got) != 0 {
		t.Fatalf("aborted dead-letter replay published %v", got)
	}
	if out, errOut, code := env.CLI(t, "dead-letter", "replay", "--config", path, "--yes"); code != 0 || !strings.Contains(out, "replayed 1 records") {
		t.Fatalf("dead-letter replay again: exit %d\n%s%s", code, out, errOut)
	}
	if got, _ := replayedIDs(t, k, cfg.Router.TopicPrefix+"alarm"); got["dl-1"] != 1 {
		t.Fatalf("after the second run a reader sees %v, want dl-1 once", got)
	}
}
