package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// A principal allowed only to write the topics (least privilege) cannot
// read a replay's records back: the proof is skipped with a warning, and
// the replay is not failed after its commit.
func TestReplayProofUnderWriteOnlyPrincipalWarns(t *testing.T) {
	const topic = "outbox.event.Order"
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, topic), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "relay", "pw",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true},
			kfake.ACL{Resource: kmsg.ACLResourceTypeTransactionalId, Name: "p.replay", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true},
		))
	cfg := config.Default()
	cfg.Name = "p"
	cfg.Kafka.Brokers = kc.ListenAddrs()
	cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLPlain, User: "relay", Password: "pw"}
	cfg.Kafka.TransactionTimeout, cfg.Kafka.RequestTimeout = 5*time.Second, 5*time.Second
	k, err := clients.NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(k.Replay()...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	recs := []*kgo.Record{{Topic: topic, Partition: 1, Key: []byte("1"), Value: []byte("{}")}}
	if err := publishChunk(ctx, cfg, k, cl, kadm.NewClient(cl), recs); err != nil {
		t.Fatalf("replay by a principal that may only write: %v", err)
	}
}
