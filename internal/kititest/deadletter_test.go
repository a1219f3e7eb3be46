//go:build integration

package kititest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Pipelines sharing a dead-letter topic each replay only their own records.
// The failure guarded against: router.dead_letter_topic is a free setting;
// two pipelines (two shards of one service, same schema) that set the same
// topic each replay the other's dead letters: the event is published twice,
// once by a pipeline whose database never had the row. And a record from a
// pipeline with another table blocks every replay.
func TestDeadLetterReplaySharedTopicEachPipelineItsOwn(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	cfg.Router.DeadLetterTopic = "shared.dead-letter." + s.Name
	cfgA := cfg
	cfgB := cfg
	cfgB.Name = cfg.Name + "-shard-b"
	pathA := itest.WriteConfig(t, cfgA)
	pathB := itest.WriteConfig(t, cfgB)
	cl := kgoClient(t, k.Brokers)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, cfg.Router.DeadLetterTopic); err != nil {
		t.Fatal(err)
	}
	// Shard B's relay dead-lettered its row b-1 (headers as the relay writes them).
	value := `{"id":7,"event_id":"b-1","aggregate_type":"alarm","aggregate_id":"dev-b","event_type":"X","payload":"{\"shard\":\"b\"}"}`
	r := &kgo.Record{Topic: cfg.Router.DeadLetterTopic, Value: []byte(value), Headers: []kgo.RecordHeader{
		{Key: "error", Value: []byte("partition 7 of a topic with 1")}, {Key: "source.table", Value: []byte(s.Table())},
		{Key: "source.gtid", Value: []byte("0-2-99")}, {Key: "id", Value: []byte("b-1")}}}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Without a pipeline header on dead-letter records,
	// a record whose row is in neither pipeline's table (here both
	// pipelines read one test server, so b-1 cannot be put into B's table
	// only) is claimed by neither on a configured, possibly shared, topic;
	// shard B's operator takes it with --from-record. On two real servers
	// B finds b-1 in its own table (prune keeps pending dead-lettered rows)
	// and needs no flag.
	for _, run := range [][]string{{"--config", pathA}, {"--config", pathB, "--from-record"}} {
		args := append([]string{"dead-letter", "replay", "--yes"}, run...)
		if code, out := runCLI(t, nil, args...); code != 0 {
			t.Fatalf("dead-letter replay %v: exit %d: %s", run, code, out)
		}
	}
	n := 0
	for _, rec := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm") {
		if rec.ID == "b-1" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("shard B's dead-lettered event b-1 was published %d times by the two pipelines' dead-letter replays, want 1", n)
	}

	// A dead letter from a pipeline of another table, then one of ours.
	other := &kgo.Record{Topic: cfg.Router.DeadLetterTopic}
	other.Headers = []kgo.RecordHeader{{Key: "error", Value: []byte("x")}, {Key: "source.table", Value: []byte("billing.outbox")},
		{Key: "source.gtid", Value: []byte("0-3-5")}, {Key: "id", Value: []byte("bill-1")}}
	other.Value = []byte(`{"event_id":"bill-1","aggregate_type":"invoice","aggregate_id":"i","event_type":"X","payload":"{}"}`)
	mine := &kgo.Record{Topic: cfg.Router.DeadLetterTopic, Value: []byte(strings.ReplaceAll(value, "b-1", "a-1")), Headers: []kgo.RecordHeader{
		{Key: "error", Value: []byte("x")}, {Key: "source.table", Value: []byte(s.Table())}, {Key: "source.gtid", Value: []byte("0-1-5")}, {Key: "id", Value: []byte("a-1")}}}
	if err := cl.ProduceSync(ctx, other, mine).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", pathA, "--yes"); code != 0 {
		t.Errorf("dead-letter replay of pipeline A is blocked for good by another pipeline's record on the shared topic: exit %d: %s", code, out)
	}
	// The ignored records are not pending for A any more
	// (a run that only ignores commits the group's offsets too).
	if code, out := runCLI(t, nil, "dead-letter", "list", "--config", pathA); code != 0 || !strings.Contains(out, "dead-letter: 0 records listed") {
		t.Errorf("after A's replay ignored the other pipelines' records they are still pending for A: exit %d: %s", code, out)
	}
}

// Two dead-letter replays at once publish each record once. The failure
// guarded against: two dead-letter replays run at the same time (a retried
// CI job, two operators) both read the same pending records before either
// commits the replay group's offsets; the second transaction fences the
// first only if they overlap at the producer, so the record can be
// published twice although "a replayed record is not pending any more".
func TestDeadLetterReplayConcurrentRunsPublishOnce(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	path := itest.WriteConfig(t, cfg)
	dlq := "outbox-relay.dead-letter." + cfg.Name
	cl := kgoClient(t, k.Brokers)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, dlq); err != nil {
		t.Fatal(err)
	}
	dup := 0
	for round := range 5 {
		id := fmt.Sprintf("dl-%d", round)
		value := fmt.Sprintf(`{"event_id":%q,"aggregate_type":"alarm","aggregate_id":"d","event_type":"X","payload":"{}"}`, id)
		r := &kgo.Record{Topic: dlq, Value: []byte(value), Headers: []kgo.RecordHeader{{Key: "error", Value: []byte("x")},
			{Key: "source.table", Value: []byte(s.Table())}, {Key: "source.gtid", Value: []byte("0-1-1")}, {Key: "id", Value: []byte(id)}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
		outs := make(chan string, 2)
		for range 2 {
			go func() {
				cmd := exec.Command(env.Binary, "dead-letter", "replay", "--config", path, "--yes")
				out, err := cmd.CombinedOutput()
				outs <- fmt.Sprintf("%v: %s", err, out)
			}()
		}
		t.Logf("round %d:\n%s\n%s", round, <-outs, <-outs)
		n := 0
		for _, rec := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm") {
			if rec.ID == id {
				n++
			}
		}
		if n > 1 {
			dup++
		}
	}
	if dup > 0 {
		t.Errorf("%d of 5 dead-lettered records were published twice by two concurrent dead-letter replays", dup)
	}
}

// TestDeadLetterReplaySkip: a pending dead-letter record that cannot be
// rebuilt (truncated, its row gone) stops dead-letter replay with an error
// naming --skip; --skip EVENT_ID marks it replayed without publishing and
// the records after it are replayed; a --skip naming no pending record is
// a usage error.
func TestDeadLetterReplaySkip(t *testing.T) {
	ctx := context.Background()
	k, s, cfg := env.Pipeline(t)
	cfg.Router.OnError = "dead-letter"
	path := itest.WriteConfig(t, cfg)
	dlq := "outbox-relay.dead-letter." + cfg.Name
	cl := kgoClient(t, k.Brokers)
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, dlq); err != nil {
		t.Fatal(err)
	}
	hdr := func(id string) []kgo.RecordHeader {
		return []kgo.RecordHeader{{Key: "error", Value: []byte("x")}, {Key: "source.table", Value: []byte(s.Table())},
			{Key: "source.gtid", Value: []byte("0-1-1")}, {Key: "id", Value: []byte(id)}}
	}
	gone := &kgo.Record{Topic: dlq, Headers: append(hdr("gone-1"), kgo.RecordHeader{Key: "truncated", Value: []byte("true")})}
	ok := &kgo.Record{Topic: dlq, Headers: hdr("ok-1"),
		Value: []byte(`{"event_id":"ok-1","aggregate_type":"alarm","aggregate_id":"d","event_type":"X","payload":"{}"}`)}
	if err := cl.ProduceSync(ctx, gone, ok).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes"); code != 1 || !strings.Contains(out, "--skip gone-1") {
		t.Fatalf("replay of an unrebuildable record: exit %d, want 1 and a hint naming --skip gone-1: %s", code, out)
	}
	if code, _ := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes", "--skip", "nope"); code != 2 {
		t.Errorf("--skip of an id nothing pending has: exit %d, want 2", code)
	}
	if code, out := runCLI(t, nil, "dead-letter", "replay", "--config", path, "--yes", "--skip", "gone-1"); code != 0 || !strings.Contains(out, "replayed 1 records (1 skipped") {
		t.Fatalf("replay --skip gone-1: exit %d: %s", code, out)
	}
	var ids []string
	for _, r := range itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix+"alarm") {
		ids = append(ids, r.ID)
	}
	if len(ids) != 1 || ids[0] != "ok-1" {
		t.Errorf("published %v, want [ok-1]", ids)
	}
	if code, out := runCLI(t, nil, "dead-letter", "list", "--config", path); code != 0 || !strings.Contains(out, "dead-letter: 0 records listed") {
		t.Errorf("records still pending after the replay: exit %d: %s", code, out)
	}
}
