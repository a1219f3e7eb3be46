package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// Least privilege (issue 13): with the topics created beforehand and a
// principal allowed WRITE on them, the relay runs; topic creation is best
// effort. `replay` still treats a refused CreateTopics as fatal, so
// replaying an event under least privilege fails before publishing.
func TestAttack13ReplayEnsureTopicsLeastPrivilege(t *testing.T) {
	const topic = "outbox.event.Order"
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "relay", "pw",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: topic, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationWrite, Allow: true},
		))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
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
	if err := ensureTopics(ctx, cfg, kopts, recs); err != nil {
		t.Fatalf("replay under least privilege: %v", err)
	}
}
