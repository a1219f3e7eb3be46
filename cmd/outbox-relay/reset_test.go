package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// After a downgrade the newest checkpoint is in a newer format: reset
// refuses without --force (a newer relay may still run) and with --force
// deletes it, after which Load reads "no checkpoint".
func TestResetNewerFormatNeedsForce(t *testing.T) {
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, config.Default().Kafka.CheckpointTopic))
	cfg := config.Default()
	cfg.Name = "alarms"
	cfg.Kafka.Brokers = kc.ListenAddrs()
	cfg.Kafka.RequestTimeout = 15 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	newer := []byte(`{"format":2,"name":"alarms","gtid_set":"0-1-9","flavor":"mariadb"}`)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: cfg.Kafka.CheckpointTopic, Key: []byte("alarms"), Value: newer}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	no, yes := false, true
	err = checkpointReset(cfg, writeFlags{force: &no, yes: &yes})
	if !errors.Is(err, checkpoint.ErrNewerFormat) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("without --force: %v", err)
	}
	if err := checkpointReset(cfg, writeFlags{force: &yes, yes: &yes}); err != nil {
		t.Fatalf("with --force: %v", err)
	}
	store, err := checkpointStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := store.Load(ctx, cfg.Name)
	if err != nil || cp != nil {
		t.Fatalf("after reset: %+v, %v", cp, err)
	}
}
