package ha_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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

// On a new cluster the group coordinator answers COORDINATOR_NOT_AVAILABLE
// until it has created __consumer_offsets (Apache Kafka does so at the
// first group request): the guard asks again rather than fail a
// `checkpoint set` that runs before any relay ever did.
func TestRefuseLiveWaitsForANewCoordinator(t *testing.T) {
	kc, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	var asked atomic.Int32
	kc.ControlKey(int16(kmsg.DescribeGroups), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if asked.Add(1) > 30 {
			return nil, nil, false
		}
		r := req.(*kmsg.DescribeGroupsRequest)
		resp := r.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range r.Groups {
			dg := kmsg.NewDescribeGroupsResponseGroup()
			dg.Group, dg.ErrorCode = g, kerr.CoordinatorNotAvailable.Code
			resp.Groups = append(resp.Groups, dg)
		}
		return resp, nil, true
	})
	cfg := config.Default()
	cfg.Name = "alarms"
	cfg.Kafka.Brokers = kc.ListenAddrs()
	cfg.Kafka.RequestTimeout = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// franz-go asks again itself, up to its retries (20) within its retry
	// timeout; quickly here.
	kopts := append(kafkaOf(t, cfg).Admin(), kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }))
	if err := ha.RefuseLive(ctx, cfg, kopts); err != nil || asked.Load() <= 30 {
		t.Fatalf("a coordinator not available yet: %v (asked %d times)", err, asked.Load())
	}
}
