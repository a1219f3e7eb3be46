//go:build integration

package acltest

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/preflight"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

var env *itest.Env

func TestMain(m *testing.M) { os.Exit(itest.Main(m, &env)) }

// aclKafka is Apache Kafka in least-privilege mode (deploy/dev/kafka.sh
// with KAFKA_SASL=1; make test-kafka sets RELAY_TEST_KAFKA_ACL): the
// PLAINTEXT super-user listener and the SASL/SCRAM listener.
func aclKafka(t *testing.T) (admin *kadm.Client, plain, sasl string) {
	v := os.Getenv("RELAY_TEST_KAFKA_ACL")
	plain, sasl, ok := strings.Cut(v, ",")
	if !ok {
		t.Skip("RELAY_TEST_KAFKA_ACL=PLAINTEXT_ADDR,SASL_ADDR names Apache Kafka with an authorizer (make test-kafka)")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(plain))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl), plain, sasl
}

func scramUser(t *testing.T, adm *kadm.Client, name, pass string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: name, Mechanism: kadm.ScramSha512, Iterations: 4096, Password: pass}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("create scram user %s: %v", name, err)
	}
}

func allow(t *testing.T, adm *kadm.Client, b *kadm.ACLBuilder) {
	res, err := adm.CreateACLs(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatalf("create acl: %v", r.Err)
		}
	}
}

// TestLeastPrivilegeKafka: with the topics created beforehand and a SCRAM
// principal allowed only WRITE on the event topic, READ and WRITE on the
// checkpoint topic, READ on the lock topic and group, and WRITE on the
// transactional id, `check` passes every ACL item and the relay publishes
// every event; a principal without ACLs gets exactly the missing ones.
// leastPrivileged is a configuration for s's outbox on the SASL listener,
// as a SCRAM user of its own, with the checkpoint, lock and event topics
// (aggregate type alarm) created beforehand and exactly the ACLs
// docs/adopting.md lists granted; it also returns the event topic.
func leastPrivileged(t *testing.T, adm *kadm.Client, sasl string, s *itest.Schema) (config.Config, string) {
	t.Helper()
	ctx := context.Background()
	cfg := env.RelayConfig(&itest.Kafka{Brokers: []string{sasl}}, s.Table())
	user, pass := cfg.Name, "scram-"+cfg.Name
	scramUser(t, adm, user, pass)
	cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLScramSHA512, User: user, Password: pass}
	cfg.HA.LockTopic = "outbox-relay.lock." + cfg.Name
	event := cfg.Router.TopicPrefix + "alarm"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, cfg.Kafka.CheckpointTopic); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []struct {
		name  string
		parts int32
	}{{cfg.HA.LockTopic, 1}, {event, 3}} {
		if _, err := adm.CreateTopic(ctx, tp.parts, 1, nil, tp.name); err != nil {
			t.Fatal(err)
		}
	}
	principal := "User:" + user
	allow(t, adm, kadm.NewACLs().Allow(principal).Topics(cfg.Kafka.CheckpointTopic).Operations(kadm.OpRead, kadm.OpWrite))
	allow(t, adm, kadm.NewACLs().Allow(principal).Topics(cfg.HA.LockTopic).Operations(kadm.OpRead))
	allow(t, adm, kadm.NewACLs().Allow(principal).Groups(clients.GroupID(cfg.Name)).Operations(kadm.OpRead))
	allow(t, adm, kadm.NewACLs().Allow(principal).Topics(event).Operations(kadm.OpWrite))
	ids := checkpoint.TransactionalIDs(cfg.Name) // both lanes (kafka.transaction_lanes 2, the default)
	allow(t, adm, kadm.NewACLs().Allow(principal).TransactionalIDs(ids...).Operations(kadm.OpWrite))
	return cfg, event
}

func TestLeastPrivilegeKafka(t *testing.T) {
	adm, plain, sasl := aclKafka(t)
	ctx := context.Background()
	s := env.NewSchema(t)
	cfg, event := leastPrivileged(t, adm, sasl, s)
	user, pass := cfg.Kafka.SASL.User, cfg.Kafka.SASL.Password
	ids := checkpoint.TransactionalIDs(cfg.Name)

	items := aclItems(t, cfg)
	for _, it := range items {
		if it.Status != preflight.Pass {
			t.Errorf("check: %s %s: %s (fix: %s)", it.Status, it.Name, it.Detail, it.Fix)
		}
	}
	wantNames := []string{"acl topic " + cfg.Kafka.CheckpointTopic, "acl topic " + cfg.HA.LockTopic, "acl topic " + event,
		"acl group " + clients.GroupID(cfg.Name), "acl transactional-id " + ids[0], "acl transactional-id " + ids[1]}
	if got := names(items); !slices.Equal(got, wantNames) {
		t.Fatalf("acl items %q, want %q", got, wantNames)
	}

	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(ctx, itest.WriteOptions{Writers: 1, Transactions: 10}); err != nil {
		t.Fatal(err)
	}
	if cp := itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute); cp.Events != 10 {
		t.Fatalf("checkpoint counts %d events, want 10", cp.Events)
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("relay stopped with %v\n%s", err, r.Logs())
	}
	if n := itest.CountAll(t, []string{plain}, cfg.Router.TopicPrefix); n != 10 {
		t.Fatalf("%d records in %s*, want 10", n, cfg.Router.TopicPrefix)
	}
	if logs := r.Logs(); strings.Count(logs, "kafka refused to create the topic") != 1 || strings.Contains(logs, pass) {
		t.Fatalf("want the refused topic creation logged once (and no password):\n%s", logs)
	}

	// A principal without ACLs: check names each missing one and its fix.
	weak := cfg
	weak.Kafka.SASL.User, weak.Kafka.SASL.Password = user+"-weak", pass+"-weak"
	scramUser(t, adm, weak.Kafka.SASL.User, weak.Kafka.SASL.Password)
	want := map[string]string{
		"acl topic " + cfg.Kafka.CheckpointTopic: "--operation Read --operation Write --topic " + cfg.Kafka.CheckpointTopic,
		"acl topic " + cfg.HA.LockTopic:          "--operation Read --topic " + cfg.HA.LockTopic,
		"acl group " + clients.GroupID(cfg.Name): "--operation Read --group " + clients.GroupID(cfg.Name),
		"acl transactional-id " + cfg.Name:       "--operation Write --transactional-id " + cfg.Name,
		"acl transactional-id " + ids[1]:         "--operation Write --transactional-id " + ids[1],
	}
	got := aclItems(t, weak)
	for _, it := range got {
		w, ok := want[it.Name]
		if !ok {
			continue
		}
		delete(want, it.Name)
		if it.Status != preflight.Fail || !strings.Contains(it.Fix, "--allow-principal User:"+weak.Kafka.SASL.User+" "+w) {
			t.Errorf("%s: %s %s, fix %q; want FAIL with %q", it.Name, it.Status, it.Detail, it.Fix, w)
		}
	}
	if len(want) > 0 {
		t.Fatalf("no item for %v in %+v", want, got)
	}
}

func aclItems(t *testing.T, cfg config.Config) preflight.Report {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out preflight.Report
	for _, it := range preflight.Run(ctx, cfg) {
		if it.Target == "kafka" && strings.HasPrefix(it.Name, "acl ") {
			out = append(out, it)
		}
	}
	return out
}

func names(r preflight.Report) []string {
	var out []string
	for _, it := range r {
		out = append(out, it.Name)
	}
	return out
}

// A principal without WRITE on the transactional id stops the relay with a
// configuration error, never loops as fenced. The failure guarded against:
// a principal without WRITE on the transactional id gets
// TRANSACTIONAL_ID_AUTHORIZATION_FAILED. classify (sink.go) files it under
// fencing (ErrFenced), and the election loop answers ErrFenced with "back
// to standby" and a rejoin: the instance takes the lease again, is refused
// again, forever, logging "another producer with the same name took over"
// (no other producer exists). A missing ACL is a configuration error the
// relay should stop on (exit 78/1, ErrRejected), as it does for other
// *_AUTHORIZATION_FAILED errors.
func TestMissingTransactionalIDWriteStopsAsRejected(t *testing.T) {
	all := func(rt kmsg.ACLResourceType) kfake.ACL {
		return kfake.ACL{Resource: rt, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationAll, Allow: true}
	}
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.EnableACLs(), kfake.EnableSASL(),
		kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "900000", "group.min.session.timeout.ms": "1000"}),
		kfake.Superuser("PLAIN", "admin", "admin"),
		// everything but the transactional id: DESCRIBE only there
		kfake.User("PLAIN", "good", "pw", all(kmsg.ACLResourceTypeTopic), all(kmsg.ACLResourceTypeGroup), all(kmsg.ACLResourceTypeCluster),
			all(kmsg.ACLResourceTypeTransactionalId)),
		kfake.User("PLAIN", "notxn", "pw", all(kmsg.ACLResourceTypeTopic), all(kmsg.ACLResourceTypeGroup), all(kmsg.ACLResourceTypeCluster),
			kfake.ACL{Resource: kmsg.ACLResourceTypeTransactionalId, Name: "*", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: kmsg.ACLOperationDescribe, Allow: true}),
	)
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

// TestAtLeastOnceCheckpointCommandsNeedNoTransactions: an at-least-once
// pipeline's principal has the ACLs of the table above except the
// transactional ids (it writes no transactions; brokers without
// transactions are what at-least-once is for). `checkpoint set` and
// `checkpoint reset` still write (without a transaction, as its relay
// does), and the relay then starts from what they wrote.
func TestAtLeastOnceCheckpointCommandsNeedNoTransactions(t *testing.T) {
	adm, plain, sasl := aclKafka(t)
	ctx := context.Background()
	s := env.NewSchema(t)
	cfg := env.RelayConfig(&itest.Kafka{Brokers: []string{sasl}}, s.Table())
	cfg.Kafka.Delivery = config.AtLeastOnce
	user, pass := cfg.Name, "scram-"+cfg.Name
	scramUser(t, adm, user, pass)
	cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLScramSHA512, User: user, Password: pass}
	cfg.HA.LockTopic = "outbox-relay.lock." + cfg.Name
	event := cfg.Router.TopicPrefix + "alarm"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, cfg.Kafka.CheckpointTopic); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{cfg.HA.LockTopic, event} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, tp); err != nil {
			t.Fatal(err)
		}
	}
	principal := "User:" + user
	allow(t, adm, kadm.NewACLs().Allow(principal).Topics(cfg.Kafka.CheckpointTopic).Operations(kadm.OpRead, kadm.OpWrite))
	allow(t, adm, kadm.NewACLs().Allow(principal).Topics(cfg.HA.LockTopic).Operations(kadm.OpRead))
	allow(t, adm, kadm.NewACLs().Allow(principal).Groups(clients.GroupID(cfg.Name)).Operations(kadm.OpRead))
	allow(t, adm, kadm.NewACLs().Allow(principal).Topics(event).Operations(kadm.OpWrite))

	r := itest.RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(ctx, itest.WriteOptions{Writers: 1, Transactions: 5, Tag: "a"}); err != nil {
		t.Fatal(err)
	}
	before := itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatalf("relay stopped with %v\n%s", err, r.Logs())
	}
	path := itest.WriteConfig(t, cfg)
	if out, errOut, code := env.CLI(t, "checkpoint", "reset", "--yes", "--config", path); code != 0 {
		t.Fatalf("checkpoint reset without transactional ids: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", before.GTIDSet, "--yes", "--config", path); code != 0 {
		t.Fatalf("checkpoint set without transactional ids: exit %d\n%s%s", code, out, errOut)
	}
	// Rows written while it is stopped are published: it resumes at the
	// set position, not at source.start (now).
	if _, err := s.Write(ctx, itest.WriteOptions{Writers: 1, Transactions: 3, Tag: "gap"}); err != nil {
		t.Fatal(err)
	}
	r = itest.RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(ctx, itest.WriteOptions{Writers: 1, Transactions: 5, Tag: "b"}); err != nil {
		t.Fatal(err)
	}
	itest.WaitCheckpoint(t, cfg, itest.Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatalf("relay stopped with %v\n%s", err, r.Logs())
	}
	if n := itest.CountAll(t, []string{plain}, cfg.Router.TopicPrefix); n != 13 {
		t.Fatalf("%d records in %s*, want 13 (resumed at %s)", n, cfg.Router.TopicPrefix, before.GTIDSet)
	}
}

// TestCheckpointTopicNotAuthorizedIsConfigError: a principal not allowed
// the checkpoint topic (an ACL forgotten, or a kafka.checkpoint_topic of
// another pipeline) stops the relay as a configuration error (exit 78,
// naming the topic), not as a transient one a supervisor restarts forever.
func TestCheckpointTopicNotAuthorizedIsConfigError(t *testing.T) {
	adm, _, sasl := aclKafka(t)
	ctx := context.Background()
	s := env.NewSchema(t)
	cfg := env.RelayConfig(&itest.Kafka{Brokers: []string{sasl}}, s.Table())
	user, pass := cfg.Name, "scram-"+cfg.Name
	scramUser(t, adm, user, pass)
	cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLScramSHA512, User: user, Password: pass}
	cfg.HA.LockTopic = "outbox-relay.lock." + cfg.Name
	event := cfg.Router.TopicPrefix + "alarm"
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, cfg.Kafka.CheckpointTopic); err != nil {
		t.Fatal(err)
	}
	for _, tp := range []string{cfg.HA.LockTopic, event} {
		if _, err := adm.CreateTopic(ctx, 1, 1, nil, tp); err != nil {
			t.Fatal(err)
		}
	}
	principal := "User:" + user
	allow(t, adm, kadm.NewACLs().Allow(principal).Topics(cfg.HA.LockTopic).Operations(kadm.OpRead))
	allow(t, adm, kadm.NewACLs().Allow(principal).Groups(clients.GroupID(cfg.Name)).Operations(kadm.OpRead))
	allow(t, adm, kadm.NewACLs().Allow(principal).Topics(event).Operations(kadm.OpWrite))
	allow(t, adm, kadm.NewACLs().Allow(principal).TransactionalIDs(checkpoint.TransactionalIDs(cfg.Name)...).Operations(kadm.OpWrite))

	r := itest.RunRelay(t, cfg)
	err := r.StoppedWith(t)
	if code := relay.ExitCode(err); code != relay.ExitConfig || !strings.Contains(err.Error(), cfg.Kafka.CheckpointTopic) {
		t.Fatalf("stopped with %v (exit %d); want exit %d naming %s", err, code, relay.ExitConfig, cfg.Kafka.CheckpointTopic)
	}
}
