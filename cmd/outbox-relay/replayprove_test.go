package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
)

// replayConfig is the configuration of pipeline p on kc, with the
// transaction timeout given (the broker aborts a transaction left open
// after it).
func replayConfig(kc *kfake.Cluster, txnTimeout time.Duration) config.Config {
	cfg := config.Default()
	cfg.Name = "p"
	cfg.Kafka.Brokers = kc.ListenAddrs()
	cfg.Kafka.TransactionTimeout, cfg.Kafka.RequestTimeout = txnTimeout, 5*time.Second
	return cfg
}

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
	cfg := replayConfig(kc, 5*time.Second)
	cfg.Kafka.SASL = config.SASL{Mechanism: config.SASLPlain, User: "relay", Password: "pw"}
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

// A replayed record that retention removes before it is read back (replay
// keeps the events' timestamps: old events in a topic of shorter
// retention.ms) committed: replay does not publish it again.
func TestReplayDoesNotPublishAgainARecordDeletedBeforeItsReadBack(t *testing.T) {
	const topic = "outbox.event.Order"
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	cfg := replayConfig(kc, 5*time.Second)
	k, err := clients.NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	admCl, err := kgo.NewClient(k.Admin()...)
	if err != nil {
		t.Fatal(err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	var deleted atomic.Bool
	kc.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		f := req.(*kmsg.FetchRequest)
		if f.IsolationLevel != 1 || len(f.Topics) == 0 || len(f.Topics[0].Partitions) == 0 || !deleted.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		at := f.Topics[0].Partitions[0].FetchOffset + 1 // the read-back's record: retention deletes it
		kc.SleepControl(func() {
			if _, err := adm.DeleteRecords(context.Background(), kadm.Offsets{topic: {0: {Topic: topic, Partition: 0, At: at}}}); err != nil {
				t.Errorf("delete records: %v", err)
			}
		})
		return nil, nil, false
	})
	ctx := context.Background()
	recs := []*kgo.Record{{Topic: topic, Partition: 0, Key: []byte("1"), Value: []byte("{}")}}
	if _, err := publishTransactional(ctx, cfg, recs, 10); err != nil {
		t.Fatalf("replay of a record deleted after its commit: %v", err)
	}
	if !deleted.Load() {
		t.Fatal("the read-back never fetched: nothing was deleted")
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if end, _ := ends.Lookup(topic, 0); end.Offset != 2 { // the record and its commit marker
		t.Fatalf("end offset %d after one replayed record, want 2 (published once)", end.Offset)
	}
}

// Interrupted (Ctrl-C) while it proves a committed transaction, dead-letter
// replay does not say that nothing was replayed: Kafka answered the commit
// (records and the replay group's offsets), and it says so.
func TestDeadLetterReplayInterruptedMidProofSaysTheCommitWasAnswered(t *testing.T) {
	const topic, dlTopic = "outbox.event.Order", "outbox.dead-letter"
	kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, topic, dlTopic))
	cfg := replayConfig(kc, 5*time.Second)
	k, err := clients.NewKafka(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	var interrupted atomic.Bool
	kc.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kc.KeepControl()
		if req.(*kmsg.FetchRequest).IsolationLevel == 1 && interrupted.CompareAndSwap(false, true) {
			interrupt() // Ctrl-C while the record is read back
		}
		return nil, nil, false
	})
	items := []dlItem{{
		in:  &kgo.Record{Topic: dlTopic, Partition: 0, Offset: 0},
		out: &kgo.Record{Topic: topic, Partition: 0, Key: []byte("1"), Value: []byte("{}")},
	}}
	_, _, err = replayDeadLetters(ctx, cfg, k, items)
	if !interrupted.Load() {
		t.Fatalf("the proof never read back (%v)", err)
	}
	if err == nil {
		t.Fatal("dead-letter replay interrupted mid-proof: no error")
	}
	if msg := deadLetterReplayFailed(err).Error(); strings.Contains(msg, "nothing was replayed") || !strings.Contains(msg, "Kafka answered its commit") {
		t.Fatalf("dead-letter replay interrupted after its commit: %q, want it to say the commit was answered, not that nothing was replayed", msg)
	}
}

// A commit answered although its EndTxn never reached the broker (franz-go
// can end a transaction so): the broker aborts the transaction at its
// timeout and, with EndTxn before v5 (Kafka 3, transaction version 1),
// bumps the producer's epoch, so the replay's client is fenced. Replay
// publishes the records again with a client of its own: once, committed.
func TestReplayPublishesAgainATransactionTheBrokerAbortedAtItsTimeout(t *testing.T) {
	for _, endTxn := range []int16{4, 5} {
		t.Run(fmt.Sprintf("EndTxn v%d", endTxn), func(t *testing.T) {
			const topic = "outbox.event.Order"
			versions := kversion.Stable()
			versions.SetMaxKeyVersion(int16(kmsg.EndTxn), endTxn)
			kc := kafkatest.Cluster(t, kfake.NumBrokers(1), kfake.SeedTopics(1, topic), kfake.MaxVersions(versions))
			cfg := replayConfig(kc, 1500*time.Millisecond)
			var lost atomic.Bool
			kc.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				kc.KeepControl()
				end := req.(*kmsg.EndTxnRequest)
				if end.TransactionalID != "p.replay" || !end.Commit || !lost.CompareAndSwap(false, true) {
					return nil, nil, false
				}
				resp := end.ResponseKind().(*kmsg.EndTxnResponse) // answered, never done
				resp.Version = end.Version
				resp.ProducerID, resp.ProducerEpoch = end.ProducerID, end.ProducerEpoch+1
				return resp, nil, true
			})
			ctx := context.Background()
			recs := []*kgo.Record{{Topic: topic, Partition: 0, Key: []byte("1"), Value: []byte("{}")}}
			if _, err := publishTransactional(ctx, cfg, recs, 10); err != nil {
				t.Fatalf("replay after the broker aborted its answered commit: %v", err)
			}
			cl, err := kgo.NewClient(kgo.SeedBrokers(kc.ListenAddrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			if end, _ := ends.Lookup(topic, 0); !lost.Load() || end.Offset != 4 { // aborted record and marker, committed record and marker
				t.Fatalf("commit lost %v, end offset %d, want 4 (aborted once, published again once)", lost.Load(), end.Offset)
			}
		})
	}
}
