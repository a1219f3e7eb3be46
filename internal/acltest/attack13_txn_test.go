//go:build integration

package acltest

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// A principal without WRITE on the transactional id gets
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED. classify (sink.go) files it under
// fencing (ErrFenced), and the election loop answers ErrFenced with "back
// to standby" and a rejoin: the instance takes the lease again, is
// refused again, forever, logging "another producer with the same name
// took over" (no other producer exists). A missing ACL is a configuration
// error the relay should stop on (exit 78/1, ErrRejected), as it does for
// other *_AUTHORIZATION_FAILED errors.
func TestAttack13MissingTxnIDWriteLoopsAsFenced(t *testing.T) {
	all := func(rt kmsg.ACLResourceType) kfake.ACL {
		return kfake.ACL{Resource: rt, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true}
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "900000", "group.min.session.timeout.ms": "1000"}),
		kfake.Superuser("PLAIN", "admin", "admin"),
		// everything but the transactional id: DESCRIBE only there
		kfake.User("PLAIN", "good", "pw", all(kmsg.ACLResourceTypeTopic), all(kmsg.ACLResourceTypeGroup), all(kmsg.ACLResourceTypeCluster),
			all(kmsg.ACLResourceTypeTransactionalId)),
		kfake.User("PLAIN", "notxn", "pw", all(kmsg.ACLResourceTypeTopic), all(kmsg.ACLResourceTypeGroup), all(kmsg.ACLResourceTypeCluster),
			kfake.ACL{Resource: kmsg.ACLResourceTypeTransactionalId, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true}),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	k := &itest.Kafka{Brokers: kc.ListenAddrs()}
	s := env.NewSchema(t)

	// control: with WRITE on the transactional id the relay runs on kfake's ACLs
	cfg := env.RelayConfig(k, s.Table())
	cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLPlain, User: "good", Password: "pw"}
	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	if err := r.Stop(); err != nil {
		t.Fatalf("control relay: %v\n%s", err, r.Logs())
	}

	cfg = env.RelayConfig(k, s.Table())
	cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLPlain, User: "notxn", Password: "pw"}
	r = itest.RunRelay(t, cfg)
	select {
	case <-r.Done():
		t.Logf("relay stopped: %v", r.Err())
		if strings.Contains(r.Err().Error(), "fenced") {
			t.Errorf("stopped as 'fenced': %v", r.Err())
		}
	case <-time.After(30 * time.Second):
		logs := r.Logs()
		_ = r.Stop()
		n := strings.Count(logs, "another producer with the same name took over")
		var first string
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, "fenced") {
				first = l
				break
			}
		}
		t.Errorf("still running after 30s without WRITE on its transactional id; %d 'fenced ... back to standby' cycles; e.g.:\n%s", n, first)
	}
}
