//go:build integration

package itest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// badRowExitBound is how long the relay process may take from the commit of
// a transaction with a bad row to its exit (65, http.listen off: no
// http.exit_grace): reading the row, committing the transactions before it,
// leaving the lock group and closing its clients. A supervisor and an
// operator at a terminal wait for it; measured at 10-150 ms on kfake and
// Apache Kafka.
const badRowExitBound = 5 * time.Second

// A bad row stops the relay process promptly, with exit 65, idle or while
// rows stream, in both deliveries, and the transactions before it stay
// committed: the checkpoint is just before the bad row's transaction,
// nothing of that transaction is published, and exactly-once nothing twice.
func TestBadRowStopExitsPromptly(t *testing.T) {
	for _, delivery := range []config.Delivery{config.ExactlyOnce, config.AtLeastOnce} {
		for _, streaming := range []bool{false, true} {
			name := string(delivery) + "/idle"
			if streaming {
				name = string(delivery) + "/streaming"
			}
			t.Run(name, func(t *testing.T) { badRowStop(t, delivery, streaming) })
		}
	}
}

func badRowStop(t *testing.T, delivery config.Delivery, streaming bool) {
	k, s, cfg := env.Pipeline(t)
	// The shipped timings of the lock group, the heartbeat checkpoint and
	// the source's heartbeat (the harness shortens them).
	def := config.Default()
	cfg.HA, cfg.Kafka.CheckpointInterval, cfg.Source.HeartbeatPeriod = def.HA, def.Kafka.CheckpointInterval, def.Source.HeartbeatPeriod
	cfg.Kafka.Delivery = delivery
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	ctx, stopWriting := context.WithCancel(context.Background())
	defer stopWriting()
	wrote := make(chan error, 1)
	if streaming {
		go func() {
			_, err := s.Write(ctx, WriteOptions{Writers: 3, Transactions: 100000, Devices: 10})
			wrote <- err
		}()
		waitEvents(t, cfg, 300)
	} else {
		wrote <- nil
		if err := env.DB.Exec(fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('good-1', 'alarm', 'd', 'X', '{}')", s.Table())); err != nil {
			t.Fatal(err)
		}
		WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	}
	c, err := env.DB.Root()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{
		"BEGIN",
		fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('sibling-1', 'alarm', 'd', 'X', '{}')", s.Table()),
		fmt.Sprintf("INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('bad-1', 'alarm', '', 'X', '{}')", s.Table()),
		"COMMIT",
	} {
		if _, err := c.Execute(q); err != nil {
			t.Fatal(err)
		}
	}
	committed := time.Now()
	res, err := c.Execute("SELECT @@last_gtid")
	if err != nil {
		t.Fatal(err)
	}
	badGTID, _ := res.GetString(0, 0)
	code, err := p.Wait(time.Minute)
	took := time.Since(committed)
	stopWriting()
	if err != nil || code != relay.ExitData {
		t.Fatalf("exit %d (%v), want %d (a bad row)\n%s", code, err, relay.ExitData, lastLines(p.Output(), 20))
	}
	t.Logf("from the bad row's commit to the process exit: %s", took.Round(time.Millisecond))
	if took > badRowExitBound {
		t.Errorf("the relay exited %s after the bad row's commit, want at most %s:\n%s", took.Round(time.Millisecond), badRowExitBound, lastLines(p.Output(), 40))
	}
	if err := <-wrote; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	var dom, srv, seq int
	if _, err := fmt.Sscanf(badGTID, "%d-%d-%d", &dom, &srv, &seq); err != nil {
		t.Fatalf("last_gtid %q: %v", badGTID, err)
	}
	before := fmt.Sprintf("%d-%d-%d", dom, srv, seq-1)
	if cp := loadCheckpoint(t, cfg); cp == nil || cp.GTIDSet != before {
		t.Fatalf("checkpoint %+v, want %s: every transaction before the bad row's (%s) committed, not the bad row's", cp, before, badGTID)
	}
	seen := map[string]int{}
	for _, rec := range Consume(t, k.Brokers, cfg.Router.TopicPrefix) {
		seen[rec.ID]++
	}
	if seen["sibling-1"] > 0 || seen["bad-1"] > 0 {
		t.Fatalf("the bad row's transaction was published: sibling-1 %d, bad-1 %d times", seen["sibling-1"], seen["bad-1"])
	}
	if !streaming && seen["good-1"] != 1 {
		t.Fatalf("good-1 published %d times, want once", seen["good-1"])
	}
	for id, n := range seen {
		if n > 1 && delivery == config.ExactlyOnce {
			t.Fatalf("%s published %d times", id, n)
		}
	}
}
