package ha_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// kafkaOf is the relay's client builder for cfg.
func kafkaOf(t *testing.T, cfg config.Config) clients.Kafka {
	t.Helper()
	k, err := clients.NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The liveness guard of the checkpoint commands reads the lock group: no
// group or no member is no relay; a member (an instance that joined, as
// the relay does) is a running relay, named by its instance id; once it
// leaves (a relay that exits, on an error too) there is none again.
func TestRefuseLiveTellsRunningRelayByLockGroup(t *testing.T) {
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, "outbox-relay.lock"))
	cfg := config.Default()
	cfg.Name = "alarms"
	cfg.Kafka.Brokers = kc.ListenAddrs()
	cfg.Kafka.RequestTimeout = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ha.RefuseLive(ctx, cfg, kafkaOf(t, cfg).Admin()); err != nil {
		t.Fatalf("no lock group: %v", err)
	}
	member, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...), kgo.ConsumerGroup(clients.GroupID(cfg.Name)),
		kgo.ConsumeTopics("outbox-relay.lock"), kgo.InstanceID("host-a-4242"))
	if err != nil {
		t.Fatal(err)
	}
	defer member.Close()
	for {
		err = ha.RefuseLive(ctx, cfg, kafkaOf(t, cfg).Admin())
		if err != nil || ctx.Err() != nil {
			break
		}
		pctx, pcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		member.PollFetches(pctx) // joins the group
		pcancel()
	}
	if !errors.Is(err, ha.ErrRelayLive) || !strings.Contains(err.Error(), "instance host-a-4242") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("with a member: %v", err)
	}
	// As the relay leaves (Elector.Leave): a static member is removed by
	// its instance id.
	if _, err := kadm.NewClient(member).LeaveGroup(ctx, kadm.LeaveGroup(clients.GroupID(cfg.Name)).InstanceIDs("host-a-4242")); err != nil {
		t.Fatal(err)
	}
	member.Close()
	for {
		if err = ha.RefuseLive(ctx, cfg, kafkaOf(t, cfg).Admin()); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("after the member left: %v", err)
	}
}

// A principal that may not describe the lock group cannot tell: the guard
// refuses, naming the ACL, rather than guess.
func TestRefuseLiveCannotTellWithoutDescribeOnTheGroup(t *testing.T) {
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", "admin"),
		kfake.User("PLAIN", "relay", "pw",
			kfake.ACL{Resource: kmsg.ACLResourceTypeTopic, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true},
		))
	cfg := config.Default()
	cfg.Name = "alarms"
	cfg.Kafka.Brokers = kc.ListenAddrs()
	cfg.Kafka.RequestTimeout = 10 * time.Second
	cfg.Kafka.SASL = config.SASL{Mechanism: "PLAIN", User: "relay", Password: "pw"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := ha.RefuseLive(ctx, cfg, kafkaOf(t, cfg).Admin())
	if err == nil || errors.Is(err, ha.ErrRelayLive) || !strings.Contains(err.Error(), "cannot tell") || !strings.Contains(err.Error(), "DESCRIBE on the group") {
		t.Fatalf("without DESCRIBE on the group: %v", err)
	}
}
