//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// deleteTopic deletes topic and waits until the brokers no longer list it
// (Apache Kafka deletes asynchronously).
func deleteTopic(t *testing.T, k *Kafka, topic string) {
	t.Helper()
	adm := kadmFor(t, k)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.DeleteTopics(ctx, topic)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatalf("delete topic %s: %v", topic, err)
	}
	Eventually(t, 30*time.Second, func() error {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		if d, ok := td[topic]; ok && d.Err == nil {
			return fmt.Errorf("topic %s still listed", topic)
		}
		return nil
	})
}

// createTopic creates topic with partitions and configs, retrying while an
// Apache Kafka broker still finishes deleting its former incarnation.
func createTopic(t *testing.T, k *Kafka, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	adm := kadmFor(t, k)
	Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
		if err == nil {
			err = resp.Err
		}
		return err
	})
}

// lostGTID is the GTID set the ErrLost stop of a process names for
// `checkpoint set --gtid`.
var lostGTID = regexp.MustCompile(`with SET '([^']*)'`)

// The checkpoint topic is deleted while the relay runs. The failed batch
// must not make the next attempt start over from source.start (with `now`
// the rows written meanwhile would never be published, with `earliest`
// everything again): the relay stops with a fatal error naming the topic,
// the GTID set it last committed and the fix; the operator's `checkpoint
// set --gtid` with that set then resumes exactly where it was.
func TestCheckpointTopicDeletedStopsWithoutFallback(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.RequestTimeout = 5 * time.Second // the produce to the deleted topic fails sooner
	path := WriteConfig(t, cfg)
	ctx := context.Background()
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(ctx, WriteOptions{Writers: 2, Transactions: 20, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)

	deleteTopic(t, k, cfg.Kafka.CheckpointTopic)
	if _, err := s.Write(ctx, WriteOptions{Writers: 2, Transactions: 20, Tag: "during"}); err != nil {
		t.Fatal(err)
	}
	err := r.StoppedWith(t)
	t.Logf("the relay stopped: %v", err)
	if !errors.Is(err, checkpoint.ErrLost) || !strings.Contains(err.Error(), cfg.Kafka.CheckpointTopic) ||
		!strings.Contains(err.Error(), "deleted and created again (topic id") || !strings.Contains(err.Error(), "checkpoint set") || !strings.Contains(err.Error(), "checkpoint reset") {
		t.Fatalf("the relay stopped with %v; want checkpoint.ErrLost naming %s and the fix", err, cfg.Kafka.CheckpointTopic)
	}
	if code := relay.ExitCode(err); code != relay.ExitData {
		t.Fatalf("exit code %d for %v; want %d", code, err, relay.ExitData)
	}
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); len(rep.Duplicates)+len(rep.Unexpected) > 0 || len(rep.Missing) != 40 {
		t.Fatalf("after the stop: %s; want the 40 rows written after the deletion unpublished, nothing twice", rep)
	}
	m := lostGTID.FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("the stop names no GTID set to restore: %v", err)
	}

	out, errOut, code := env.CLI(t, "checkpoint", "set", "--config", path, "--gtid", m[1], "--yes")
	if code != 0 {
		t.Fatalf("checkpoint set --gtid %s: exit %d\n%s\n%s", m[1], code, out, errOut)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 10, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	requireExactlyOnce(t, r, k, s, cfg, 90)
}

// The checkpoint topic is deleted while every instance is stopped (a
// cluster rebuilt, a cleanup script). The next start finds no checkpoint:
// the lock group's record of the topic's id tells that the pipeline had
// one, and the relay stops instead of starting at source.start; `checkpoint
// reset --yes` is the operator's word to start there, and works.
func TestCheckpointTopicRecreatedStopsAtRestart(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	ctx := context.Background()
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 10, Tag: "first"}); err != nil {
		t.Fatal(err)
	}
	requireExactlyOnce(t, r, k, s, cfg, 10)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	deleteTopic(t, k, cfg.Kafka.CheckpointTopic)
	createTopic(t, k, cfg.Kafka.CheckpointTopic, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")})
	if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 10, Tag: "down"}); err != nil {
		t.Fatal(err)
	}
	r = RunRelay(t, cfg)
	err := r.StoppedWith(t)
	t.Logf("the relay stopped: %v", err)
	if !errors.Is(err, checkpoint.ErrLost) || !strings.Contains(err.Error(), "deleted and created again") ||
		!strings.Contains(err.Error(), cfg.Kafka.CheckpointTopic) {
		t.Fatalf("the relay stopped with %v; want checkpoint.ErrLost saying %s was deleted and created again", err, cfg.Kafka.CheckpointTopic)
	}
	if n := len(Consume(t, k.Brokers, cfg.Router.TopicPrefix)); n != 10 {
		t.Fatalf("%d records; want the first 10 only", n)
	}

	out, errOut, code := env.CLI(t, "checkpoint", "reset", "--config", path, "--yes")
	if code != 0 {
		t.Fatalf("checkpoint reset: exit %d\n%s\n%s", code, out, errOut)
	}
	r = RunRelay(t, cfg) // start: now, as the operator said
	r.WaitReady(t)
	if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 10, Tag: "reset"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
	rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if len(rep.Duplicates)+len(rep.Unexpected) > 0 || len(rep.Missing) != 10 || !strings.Contains(strings.Join(rep.Missing, " "), "down") {
		t.Fatalf("after the reset: %s; want exactly the 10 rows written while down missing", rep)
	}
	if !strings.Contains(r.Logs(), "checkpoint reset by the operator") {
		t.Fatalf("the start after the reset does not say so:\n%s", tailLines(r.Logs(), 20))
	}
}

// The checkpoint topic is deleted and created again with other settings
// while the relay is stopped: not compacted (the broker would delete
// checkpoints by age), or with more than one partition. The next start
// stops naming the topic and the setting, never starting over. (Deleted
// while the relay runs, the relay's next attempt may create the topic
// again before anyone else: TestCheckpointTopicDeletedStopsWithoutFallback.)
func TestCheckpointTopicRecreatedWithOtherSettingsStops(t *testing.T) {
	for _, tc := range []struct {
		name       string
		partitions int32
		policy     string
		want       string
	}{
		{"not compacted", 1, "delete", "cleanup.policy=delete"},
		{"three partitions", 3, "compact", "has 3 partitions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, s, cfg := env.Pipeline(t)
			cfg.Kafka.RequestTimeout = 5 * time.Second
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 5, Tag: "a"}); err != nil {
				t.Fatal(err)
			}
			WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			deleteTopic(t, k, cfg.Kafka.CheckpointTopic)
			createTopic(t, k, cfg.Kafka.CheckpointTopic, tc.partitions, map[string]*string{"cleanup.policy": kadm.StringPtr(tc.policy)})
			if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 5, Tag: "b"}); err != nil {
				t.Fatal(err)
			}
			r = RunRelay(t, cfg)
			err := r.StoppedWith(t)
			t.Logf("the relay stopped: %v", err)
			if !errors.Is(err, checkpoint.ErrTopicLayout) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), cfg.Kafka.CheckpointTopic) {
				t.Fatalf("the relay stopped with %v; want checkpoint.ErrTopicLayout naming %s and %q", err, cfg.Kafka.CheckpointTopic, tc.want)
			}
			if code := relay.ExitCode(err); code != relay.ExitConfig {
				t.Fatalf("exit code %d; want %d", code, relay.ExitConfig)
			}
		})
	}
}

// A checkpoint topic compacted and also deleted by age (cleanup.policy
// compact,delete with a finite retention.ms, Kafka's default 7 days)
// loses a pipeline's checkpoint once it is stopped or idle longer than
// that, like one not compacted at all: the relay refuses it (exit 78),
// naming the topic, the policy and the fix. With retention.ms -1 (and no
// retention.bytes) nothing is deleted by age, and the relay runs.
func TestCheckpointTopicDeletingByAgeStops(t *testing.T) {
	for _, tc := range []struct {
		name    string
		configs map[string]*string
		want    string // "" : runs
	}{
		{"compact,delete with the default retention", map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete")}, "retention.ms=604800000"},
		{"compact,delete with a retention by size", map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete"),
			"retention.ms": kadm.StringPtr("-1"), "retention.bytes": kadm.StringPtr("1048576")}, "retention.bytes=1048576"},
		{"compact,delete kept forever", map[string]*string{"cleanup.policy": kadm.StringPtr("compact,delete"), "retention.ms": kadm.StringPtr("-1")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, s, cfg := env.Pipeline(t)
			createTopic(t, k, cfg.Kafka.CheckpointTopic, 1, tc.configs)
			r := RunRelay(t, cfg)
			if tc.want == "" {
				r.WaitReady(t)
				if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 3, Tag: "a"}); err != nil {
					t.Fatal(err)
				}
				WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
				if err := r.Stop(); err != nil {
					t.Fatal(err)
				}
				return
			}
			err := r.StoppedWith(t)
			if !errors.Is(err, checkpoint.ErrTopicLayout) || relay.ExitCode(err) != relay.ExitConfig ||
				!strings.Contains(err.Error(), cfg.Kafka.CheckpointTopic) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("the relay stopped with %v (exit %d); want checkpoint.ErrTopicLayout (exit %d) naming %s and %q",
					err, relay.ExitCode(err), relay.ExitConfig, cfg.Kafka.CheckpointTopic, tc.want)
			}
		})
	}
}

// The operator restores a pipeline whose checkpoint topic is gone (deleted
// while every instance was stopped, or a new kafka.checkpoint_topic, such
// as a topic of its own) before any relay ran again: `checkpoint set` or
// `checkpoint reset` creates the topic compacted with one partition, as
// the relay does, instead of failing on an unknown topic (or leaving one a
// broker auto-created with its defaults, which the relay then refuses).
// The relay then resumes exactly at the set position, or starts at
// source.start saying so.
func TestCheckpointCommandsCreateMissingCheckpointTopic(t *testing.T) {
	for _, cmd := range []string{"set", "reset"} {
		t.Run(cmd, func(t *testing.T) {
			k, s, cfg := env.Pipeline(t)
			cfg.Kafka.RequestTimeout = 10 * time.Second
			ctx := context.Background()
			r := RunRelay(t, cfg)
			r.WaitReady(t)
			if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 10, Tag: "before"}); err != nil {
				t.Fatal(err)
			}
			before := WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			deleteTopic(t, k, cfg.Kafka.CheckpointTopic)
			args := []string{"checkpoint", "reset"}
			if cmd == "set" {
				args = []string{"checkpoint", "set", "--gtid", before.GTIDSet}
			}
			path := WriteConfig(t, cfg)
			if out, errOut, code := env.CLI(t, append(args, "--yes", "--config", path)...); code != 0 {
				t.Fatalf("%v on a missing checkpoint topic: exit %d\n%s%s", args, code, out, errOut)
			}
			r = RunRelay(t, cfg)
			r.WaitReady(t)
			if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 5, Tag: "after"}); err != nil {
				t.Fatal(err)
			}
			WaitCheckpoint(t, cfg, Head(t, s.DB), time.Minute)
			if err := r.Stop(); err != nil {
				t.Fatal(err)
			}
			if cmd == "reset" && !strings.Contains(r.Logs(), "checkpoint reset by the operator") {
				t.Fatalf("the relay did not log the reset:\n%s", tailLines(r.Logs(), 20))
			}
			if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() {
				t.Fatalf("after %s: %s", cmd, rep)
			}
		})
	}
}
