//go:build integration

package itest

// The article's four failure windows (its section 8), each with what the
// relay guarantees in it.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Window 1: "MQ acknowledged, database rolled back" makes a ghost message.
// The relay only reads committed transactions from the binlog: a rolled-back
// transaction, however large, or one whose client vanished before COMMIT,
// never produces a record, not even an aborted one.
func TestWindow1RolledBackTransactionIsNeverPublished(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	RunRelay(t, cfg).WaitReady(t)

	c, err := env.DB.Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"BEGIN",
		fmt.Sprintf("INSERT INTO %s.alarm_record (device_id, level, temp, seq) VALUES ('d', 'CRITICAL', 99, 1)", s.Name),
		fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
			SELECT CONCAT('ghost-', seq), 'alarm', 'd', 'X', '{}' FROM %s.seq_1_to_5000`, s.Table(), s.Name),
		"ROLLBACK"} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	// A client that disappears inside its transaction: the server rolls back.
	for _, q := range []string{"BEGIN", fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ('ghost-vanished', 'alarm', 'd', 'X', '{}')`, s.Table())} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if err := env.DB.Exec(fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
		VALUES ('real-1', 'alarm', 'd', 'X', '{}')`, s.Table())); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	recs := Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	if len(recs) != 1 || recs[0].ID != "real-1" {
		t.Fatalf("published %d records (%v), want only real-1", len(recs), recs)
	}
	if all := CountAll(t, k.Brokers, cfg.Router.TopicPrefix); all != 1 {
		t.Fatalf("the log holds %d records, aborted included; want 1", all)
	}
}

// Window 2: "database committed, the sender died before sending" loses the
// event. The outbox row is in the binlog; the relay resumes from its
// committed checkpoint and publishes every row committed while it was dead.
func TestWindow2CommittedWhileRelayIsDeadIsPublished(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 200, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	committed, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 300, Tag: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	env.StartProc(t, path)
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	if rep.Expected != 400+len(committed) {
		t.Fatalf("outbox has %d rows, want %d", rep.Expected, 400+len(committed))
	}
}

// Window 3: "the broker wrote, the sender does not know" duplicates on retry.
// The relay's records live in a Kafka transaction with the checkpoint: a crash
// after the broker acknowledged them aborts them, the retry publishes them
// once more in a new transaction, and read_committed sees them once.
func TestWindow3AcknowledgedButUnknownIsNotDuplicated(t *testing.T) {
	crashAt(t, "after-flush:2", 0, producedNotCommitted)
}

// Window 4: "the consumer committed its effect, not its offset" redelivers.
// Kafka redelivers; the relay guarantees a stable header id = event_id on
// every delivery, so a consumer that records (consumer, event_id) in the same
// local transaction as its effect applies each event once.
func TestWindow4RedeliveryIsDeduplicatedByEventID(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	RunRelay(t, cfg).WaitReady(t)
	committed, err := s.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 100})
	if err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := env.DB.Exec(
		fmt.Sprintf("CREATE TABLE %s.consumed_event (consumer_name VARCHAR(64) NOT NULL, event_id VARCHAR(64) NOT NULL, PRIMARY KEY (consumer_name, event_id))", s.Name),
		fmt.Sprintf("CREATE TABLE %s.notification (event_id VARCHAR(64) NOT NULL, device_id VARCHAR(64) NOT NULL)", s.Name),
	); err != nil {
		t.Fatal(err)
	}
	group := env.Unique("notify")
	// Two deliveries of everything: the first consumer applies its effects and
	// "crashes" before committing offsets; the second gets it all again.
	for delivery := 1; delivery <= 2; delivery++ {
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(cfg.Router.TopicPrefix+"alarm"), kgo.DisableAutoCommit(),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatal(err)
		}
		db, err := env.DB.Root()
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for seen < len(committed) && ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				seen++
				var id string
				for _, h := range r.Headers {
					if h.Key == "id" {
						id = string(h.Value)
					}
				}
				if _, err := db.Execute("BEGIN"); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Execute("INSERT INTO "+s.Name+".consumed_event VALUES ('notify', ?)", id); err != nil {
					var me *mysql.MyError
					if !errors.As(err, &me) || me.Code != mysql.ER_DUP_ENTRY {
						t.Fatal(err)
					}
					if _, err := db.Execute("ROLLBACK"); err != nil { // seen before: skip the effect
						t.Fatal(err)
					}
					return
				}
				if _, err := db.Execute("INSERT INTO "+s.Name+".notification VALUES (?, ?)", id, string(r.Key)); err != nil {
					t.Fatal(err)
				}
				if _, err := db.Execute("COMMIT"); err != nil {
					t.Fatal(err)
				}
			})
		}
		cancel()
		db.Close()
		cl.Close() // no offset commit: the crash of window 4
		if seen < len(committed) {
			t.Fatalf("delivery %d: consumed %d of %d", delivery, seen, len(committed))
		}
	}
	rows, err := env.DB.Query("SELECT COUNT(*), COUNT(DISTINCT event_id) FROM " + s.Name + ".notification")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(len(committed)); rows[0][0] != want || rows[0][1] != want {
		t.Fatalf("notifications %s (distinct %s) after two deliveries, want %s", rows[0][0], rows[0][1], want)
	}
}
