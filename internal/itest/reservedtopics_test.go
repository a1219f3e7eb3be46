//go:build integration

package itest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/router"
)

// reservedRows are outbox rows whose aggregate type, with topic_prefix "",
// names one of the relay's own topics (this pipeline's and another's) or
// Kafka's: event id (unique to the pipeline: a broker keeps earlier runs'
// dead letters) -> aggregate type.
func reservedRows(cfg config.Config) map[string]string {
	rows := map[string]string{}
	for what, topic := range map[string]string{
		"checkpoint":         cfg.Kafka.CheckpointTopic,
		"default-checkpoint": "outbox-relay.checkpoints",
		"dead-letter":        config.DefaultDeadLetterPrefix + cfg.Name,
		"other-dead-letter":  config.DefaultDeadLetterPrefix + "other",
		"lock":               cfg.HA.LockTopic,
		"default-lock":       "outbox-relay.lock",
		"lock-group":         "outbox-relay.lock." + cfg.Name,
		"offsets":            "__consumer_offsets",
	} {
		rows["forged-"+what+"-"+cfg.Name] = topic
	}
	return rows
}

func insertRoutedAs(t *testing.T, s *Schema, id, aggType string) {
	t.Helper()
	if err := env.DB.Exec(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('%s', '%s', 'd', 'X', '{}')",
		s.Table(), id, aggType)); err != nil {
		t.Fatal(err)
	}
}

// With topic_prefix "" (the aggregate type is the topic), rows naming the
// relay's own topics (checkpoint, lock, dead-letter: this pipeline's and
// another's) or Kafka's (__consumer_offsets) are bad rows: with on_error
// dead-letter each goes to this pipeline's dead-letter topic, saying why,
// and nothing of them lands in the topic it names; with on_error fail the
// relay stops at the first, its checkpoint before it. Run on kfake and, with
// RELAY_TEST_KAFKA, on Apache Kafka.
func TestRowsNamingTheRelaysOwnTopicsAreRefused(t *testing.T) {
	t.Run("dead-letter", func(t *testing.T) {
		k, s, cfg := env.Pipeline(t)
		cfg.Router.TopicPrefix = ""
		cfg.Router.OnError = config.OnErrorDeadLetter
		// Its own checkpoint and lock topics outside the relay's namespace:
		// refused by name.
		cfg.Kafka.CheckpointTopic, cfg.HA.LockTopic = "cp."+cfg.Name, "lock."+cfg.Name
		ok := "ok." + cfg.Name
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		forged := reservedRows(cfg)
		for id, aggType := range forged {
			insertRoutedAs(t, s, id, aggType)
		}
		insertRoutedAs(t, s, "fine", ok)
		WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)

		deadLetter := config.DefaultDeadLetterPrefix + cfg.Name
		var dead []string
		for _, rec := range Consume(t, k.Brokers, deadLetter) {
			if rec.Topic != deadLetter {
				continue
			}
			dead = append(dead, rec.Key)
			if !strings.Contains(rec.Headers["error"], "a row may not be routed there") || !strings.Contains(rec.Headers["error"], forged[rec.Key]) {
				t.Errorf("dead letter %s: error %q, want the refusal naming %s", rec.Key, rec.Headers["error"], forged[rec.Key])
			}
		}
		slices.Sort(dead)
		want := make([]string, 0, len(forged))
		for id := range forged {
			want = append(want, id)
		}
		slices.Sort(want)
		if !slices.Equal(dead, want) {
			t.Fatalf("dead letters %q, want one for each forged row %q", dead, want)
		}
		if recs := Consume(t, k.Brokers, ok); len(recs) != 1 || recs[0].ID != "fine" {
			t.Fatalf("records of %s: %+v, want the good row", ok, recs)
		}
		// Nothing of a forged row anywhere else, aborted records included:
		// only the dead letters carry their ids.
		for _, prefix := range []string{router.RelayNamespace, "__consumer_offsets", cfg.Kafka.CheckpointTopic, cfg.HA.LockTopic} {
			EachProduced(t, k.Brokers, prefix, func(rec *kgo.Record) {
				if rec.Topic == deadLetter {
					return
				}
				for _, h := range rec.Headers {
					if _, isForged := forged[string(h.Value)]; h.Key == "id" && isForged {
						t.Errorf("forged row %s landed in %s", h.Value, rec.Topic)
					}
				}
				if _, isForged := forged[string(rec.Key)]; isForged {
					t.Errorf("a record keyed %s landed in %s", rec.Key, rec.Topic)
				}
			})
		}
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("fail", func(t *testing.T) {
		_, s, cfg := env.Pipeline(t)
		cfg.Router.TopicPrefix = ""
		cfg.Kafka.CheckpointTopic = "cp." + cfg.Name
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		before := loadCheckpoint(t, cfg)
		insertRoutedAs(t, s, "forged-checkpoint", cfg.Kafka.CheckpointTopic)
		err := r.StoppedWith(t)
		if !errors.Is(err, router.ErrBadRow) || !strings.Contains(err.Error(), `"forged-checkpoint"`) ||
			!strings.Contains(err.Error(), "one of the relay's own topics") {
			t.Fatalf("error %v, want a bad row naming the row and the reserved topic", err)
		}
		if cp := loadCheckpoint(t, cfg); cp.GTIDSet != before.GTIDSet {
			t.Fatalf("checkpoint moved past the forged row: %s -> %s", before.GTIDSet, cp.GTIDSet)
		}
	})
}
