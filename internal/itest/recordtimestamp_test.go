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
	"github.com/outbox-relay/outbox-relay/router"
)

// Record timestamps the broker refuses. kfake neither enforces nor reports
// message.timestamp.before.max.ms / after.max.ms: these run on Apache Kafka
// (RELAY_TEST_KAFKA, make test-kafka), whose topics refuse a CreateTime
// timestamp more than 1 h ahead of the broker's clock by default.

func needTimestampBounds(t *testing.T) {
	t.Helper()
	if ExternalKafka() == nil {
		t.Skip("kfake does not enforce message.timestamp.after.max.ms: run on Apache Kafka (RELAY_TEST_KAFKA, make test-kafka)")
	}
}

// insertSkewed commits one valid outbox row, then one committed with the
// session's clock ahead by skew (SET timestamp: the binlog's commit time,
// the record's timestamp), on one connection, back to back.
func insertSkewed(t *testing.T, s *Schema, valid, skewed string, skew time.Duration) {
	t.Helper()
	ins := func(id string) string {
		return fmt.Sprintf(`INSERT INTO %s.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', 'alarm', 'dev-1', 'X', '{}')`, s.Name, id)
	}
	if err := env.DB.Exec(ins(valid),
		fmt.Sprintf("SET timestamp = UNIX_TIMESTAMP() + %d", int(skew.Seconds())),
		ins(skewed),
		"SET timestamp = DEFAULT"); err != nil {
		t.Fatal(err)
	}
}

// ids are the event ids of recs in topic.
func ids(recs []Record, topic string) []string {
	var out []string
	for _, r := range recs {
		if r.Topic == topic {
			out = append(out, r.ID)
		}
	}
	return out
}

// A transaction committed with a clock 2 h ahead: its record would be
// refused by the topic (message.timestamp.after.max.ms, 1 h). It is a bad
// row: with on_error fail the relay stops with a data error naming the
// table, event id, GTID, topic and setting, the valid row before it
// published and the checkpoint just before it (a restart stops the same
// way); with dead-letter it goes to the dead-letter topic, stamped now, and
// the relay goes on.
func TestRecordTimestampAheadOfTopicBoundIsABadRow(t *testing.T) {
	needTimestampBounds(t)
	k := StartKafka(t)
	t.Run("fail", func(t *testing.T) {
		s := env.NewSchema(t)
		cfg := env.RelayConfig(k, s.Table())
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		insertSkewed(t, s, "ok-1", "ahead-1", 2*time.Hour)
		head := Head(t, env.DB)
		err := r.StoppedWith(t)
		if !errors.Is(err, router.ErrBadRow) || relay.ExitCode(err) != relay.ExitData {
			t.Fatalf("stopped with %v (exit %d), want a bad row (exit %d)", err, relay.ExitCode(err), relay.ExitData)
		}
		topic := cfg.Router.TopicPrefix + "alarm"
		for _, want := range []string{s.Table(), `"ahead-1"`, head, topic, "message.timestamp.after.max.ms"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not name %q: %v", want, err)
			}
		}
		if got := ids(Consume(t, k.Brokers, cfg.Router.TopicPrefix), topic); len(got) != 1 || got[0] != "ok-1" {
			t.Fatalf("published %v, want the valid row ok-1 alone", got)
		}
		cp := loadCheckpoint(t, cfg)
		if cp.GTIDSet == head {
			t.Fatalf("checkpoint %s covers the refused row", cp.GTIDSet)
		}
		// Every restart stops at the same row, publishing nothing more.
		again := RunRelay(t, cfg)
		if err := again.StoppedWith(t); !errors.Is(err, router.ErrBadRow) || !strings.Contains(err.Error(), `"ahead-1"`) {
			t.Fatalf("the restart stopped with %v, want the same bad row", err)
		}
		if now := loadCheckpoint(t, cfg); now.GTIDSet != cp.GTIDSet {
			t.Fatalf("the restart moved the checkpoint %s -> %s", cp.GTIDSet, now.GTIDSet)
		}
	})
	t.Run("dead-letter", func(t *testing.T) {
		s := env.NewSchema(t)
		cfg := env.RelayConfig(k, s.Table())
		cfg.Router.OnError = config.OnErrorDeadLetter
		cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		insertSkewed(t, s, "ok-1", "ahead-1", 2*time.Hour)
		insertSkewed(t, s, "ok-2", "ahead-2", 0) // the relay goes on
		WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
		recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
		topic := cfg.Router.TopicPrefix + "alarm"
		if got := strings.Join(ids(recs, topic), ","); got != "ok-1,ok-2,ahead-2" {
			t.Fatalf("published %s, want ok-1,ok-2,ahead-2", got)
		}
		var dead []Record
		for _, rec := range recs {
			if rec.Topic == cfg.Router.DeadLetterTopic {
				dead = append(dead, rec)
			}
		}
		if len(dead) != 1 || dead[0].ID != "ahead-1" || !strings.Contains(dead[0].Headers["error"], "message.timestamp.after.max.ms") ||
			dead[0].Headers["source.timestamp"] == "" {
			t.Fatalf("dead letters %+v, want ahead-1 naming message.timestamp.after.max.ms, with its source.timestamp", dead)
		}
		if d := time.Until(dead[0].Timestamp); d > time.Minute {
			t.Fatalf("the dead letter is stamped %s ahead, want the relay's clock", d)
		}
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// The topic's bound lowered after the relay read it (1 h -> 1 min): the
// broker refuses the record (INVALID_TIMESTAMP) although the relay's check
// passed it. The relay starts again once with the topic's settings read
// again, and then treats the row as a bad row (here: dead-letter), not as a
// configuration error that stops every restart.
func TestRecordTimestampBoundLoweredWhileRunningIsABadRow(t *testing.T) {
	needTimestampBounds(t)
	k := StartKafka(t)
	s := env.NewSchema(t)
	cfg := env.RelayConfig(k, s.Table())
	cfg.Router.OnError = config.OnErrorDeadLetter
	cfg.Router.DeadLetterTopic = cfg.Router.TopicPrefix + "dead-letter"
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	insertSkewed(t, s, "ok-1", "ok-2", 0) // the relay learns the topic: 1 h ahead at most
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	topic := cfg.Router.TopicPrefix + "alarm"
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "message.timestamp.after.max.ms", Value: kadm.StringPtr("60000")}}, topic)
	if err == nil {
		_, err = resp.On(topic, nil)
	}
	if err != nil {
		t.Fatalf("lower message.timestamp.after.max.ms: %v", err)
	}
	Eventually(t, 30*time.Second, func() error {
		rc, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return err
		}
		c, err := rc.On(topic, nil)
		if err != nil {
			return err
		}
		for _, e := range c.Configs {
			if e.Key == "message.timestamp.after.max.ms" && e.MaybeValue() == "60000" {
				return nil
			}
		}
		return fmt.Errorf("message.timestamp.after.max.ms not yet 60000")
	})
	insertSkewed(t, s, "ok-3", "ahead-1", 10*time.Minute)
	insertSkewed(t, s, "ok-4", "ok-5", 0)
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	if got := strings.Join(ids(recs, topic), ","); got != "ok-1,ok-2,ok-3,ok-4,ok-5" {
		t.Fatalf("published %s, want ok-1 to ok-5", got)
	}
	if got := ids(recs, cfg.Router.DeadLetterTopic); len(got) != 1 || got[0] != "ahead-1" {
		t.Fatalf("dead letters %v, want ahead-1", got)
	}
	if !strings.Contains(r.Logs(), "INVALID_TIMESTAMP") {
		t.Fatalf("the broker's refusal was not logged")
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}
