package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// Without CREATE, a topic that does not exist stops replay before anything
// is produced, naming the topic and what to do.
func TestReplayEnsureTopicsMissingWithoutCreate(t *testing.T) {
	const topic = "outbox.event.Missing"
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "relay", "pw",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true},
		))
	cfg := config.Default()
	kopts := []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...), kgo.SASL(plain.Auth{User: "relay", Pass: "pw"}.AsMechanism())}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := ensureTopics(ctx, cfg, kopts, []*kgo.Record{{Topic: topic, Key: []byte("1"), Value: []byte("{}")}}, nil)
	if err == nil || !strings.Contains(err.Error(), "topic "+topic+" does not exist and creating it was refused") {
		t.Fatalf("got %v", err)
	}
}

// replay under least privilege (topics created beforehand, WRITE on them)
// publishes: topic creation is best effort. The failure guarded against:
// least privilege: with the topics created beforehand and a principal
// allowed WRITE on them, the relay runs; topic creation is best effort.
// `replay` still treats a refused CreateTopics as fatal, so replaying an
// event under least privilege fails before publishing.
func TestReplayUnderLeastPrivilegeTopicCreationBestEffort(t *testing.T) {
	const topic = "outbox.event.Order"
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(3, topic), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "relay", "pw",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true},
		))
	cfg := config.Default()
	kopts := []kgo.Opt{kgo.SeedBrokers(kc.ListenAddrs()...), kgo.SASL(plain.Auth{User: "relay", Pass: "pw"}.AsMechanism())}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// the principal can write the topic
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("principal cannot write %s: %v", topic, err)
	}
	recs := []*kgo.Record{{Topic: topic, Key: []byte("1"), Value: []byte("{}")}}
	if err := ensureTopics(ctx, cfg, kopts, recs, nil); err != nil {
		t.Fatalf("replay under least privilege: %v", err)
	}
}
