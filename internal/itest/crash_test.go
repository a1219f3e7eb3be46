//go:build integration

package itest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// requireExact fails unless the topic holds each committed outbox row exactly
// once, nothing else, per-aggregate in commit order.
func requireExact(t *testing.T, k *Kafka, s *Schema, prefix string) Report {
	t.Helper()
	rep := Compare(t, s, Consume(t, k.Brokers, prefix))
	if !rep.OK() {
		t.Fatal(rep)
	}
	return rep
}

// requireAtLeastOnce fails unless the topic holds every committed outbox
// row at least once with its key, and nothing else; duplicates are allowed.
func requireAtLeastOnce(t *testing.T, k *Kafka, s *Schema, prefix string) Report {
	t.Helper()
	rep := Compare(t, s, Consume(t, k.Brokers, prefix))
	if len(rep.Missing) != 0 || len(rep.Unexpected) != 0 || len(rep.WrongKey) != 0 {
		t.Fatal(rep)
	}
	return rep
}

// kill -9 at 20+ random instants while writers commit more than 20,000
// events; the final relay completes the stream exactly once.
func TestCrashKill9AtRandomInstants(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Batch.MaxRecords = 500 // more, smaller transactions: more instants to land in
	cfg.Log.Level = "info"
	path := WriteConfig(t, cfg)

	// "now" is pinned by the first committed checkpoint: writers start after it.
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	wrote := make(chan error, 1)
	var committed []Outcome
	go func() {
		var err error
		committed, err = s.Write(context.Background(), WriteOptions{Writers: 4, Transactions: 5600, RollbackRate: 0.05,
			Devices: 20, Pace: 500 * time.Microsecond})
		wrote <- err
	}()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	kills, writing, killsWhileWriting := 0, true, 0
	for {
		// A random instant: start-up, catch-up, mid-batch, mid-commit.
		wait := time.Duration(rng.IntN(700)) * time.Millisecond
		select {
		case err := <-wrote:
			if err != nil {
				t.Fatal(err)
			}
			writing = false
		case <-time.After(wait):
		}
		if p.Exited() {
			t.Fatalf("relay exited by itself: %s", p.Output())
		}
		p.Kill()
		kills++
		if writing {
			killsWhileWriting++
		}
		if kills >= 20 && !writing {
			break
		}
		p = env.StartProc(t, path)
	}
	if killsWhileWriting < 5 {
		t.Fatalf("only %d kills landed while writers were committing", killsWhileWriting)
	}
	if len(committed) < 20000 {
		t.Fatalf("writers committed %d events, want at least 20,000", len(committed))
	}
	cp := loadCheckpoint(t, cfg)
	t.Logf("%d kills (%d while writers committed); %d events committed; checkpoint had %d published at the last kill", kills, killsWhileWriting, len(committed), cp.Events)
	p = env.StartProc(t, path)
	WaitCheckpoint(t, cfg, Head(t, env.DB), 3*time.Minute)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	if rep.Expected != len(committed) {
		t.Fatalf("outbox has %d rows, writers committed %d", rep.Expected, len(committed))
	}
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("exit %d %v", code, err)
	}
}

// crashAt runs the relay with a failpoint until it kills the relay, checks
// the state left by the crash, restarts without the failpoint and requires
// exactly-once. big > 0 writes one source transaction of big rows (split by
// max_records 1000) instead of many small ones.
func crashAt(t *testing.T, point string, big int, check func(t *testing.T, k *Kafka, prefix string, s *Schema)) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Batch.MaxRecords = 1000
	// Rare heartbeat checkpoints: a failpoint counted in commits must land in
	// one that carries records, not in an idle heartbeat before the writers.
	cfg.Kafka.CheckpointInterval = 10 * time.Second
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path, "OUTBOX_RELAY_FAILPOINT="+point)
	waitStarted(t, p, cfg)
	if big > 0 {
		if err := s.BigInsert(big, "big"); err != nil {
			t.Fatal(err)
		}
	} else if _, err := s.Write(context.Background(), WriteOptions{Writers: 4, Transactions: 1000, RollbackRate: 0.1}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(2 * time.Minute); err != nil || !p.Killed() {
		t.Fatalf("the failpoint did not kill the relay (%v):\n%s", err, p.Output())
	}
	cp := loadCheckpoint(t, cfg)
	if big > 0 && (cp.Partial == nil || cp.Partial.Rows == 0 || cp.Partial.Rows >= int64(big)) {
		t.Fatalf("checkpoint at the crash %+v, want a partial count inside the big transaction", cp)
	}
	if check != nil {
		check(t, k, cfg.Router.TopicPrefix, s)
	}
	env.StartProc(t, path)
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("crash at %s (checkpoint then: %d events, partial %v); after restart %s", point, cp.Events, cp.Partial, rep)
}

// producedNotCommitted checks that the crash left acknowledged records of an
// open transaction in the log, invisible to read_committed.
func producedNotCommitted(t *testing.T, k *Kafka, prefix string, _ *Schema) {
	all, committed := CountAll(t, k.Brokers, prefix), len(Consume(t, k.Brokers, prefix))
	if all <= committed {
		t.Fatalf("log holds %d records, %d committed: the crash did not leave produced-but-uncommitted records", all, committed)
	}
}

// A crash injected at each named point of the commit protocol.
func TestCrashAtNamedPoints(t *testing.T) {
	t.Run("records produced, not committed", func(t *testing.T) { crashAt(t, "after-flush:3", 0, producedNotCommitted) })
	t.Run("committed, before the next batch", func(t *testing.T) { crashAt(t, "after-commit:4", 0, nil) })
	t.Run("inside a split large transaction", func(t *testing.T) { crashAt(t, "after-partial:5", 20000, nil) })
}

// The embedded broker stops and starts again (same data) mid-stream.
func TestCrashBrokerRestart(t *testing.T) {
	for _, delivery := range []config.Delivery{config.ExactlyOnce, config.AtLeastOnce} {
		t.Run(string(delivery), func(t *testing.T) { brokerRestart(t, delivery) })
	}
}

func brokerRestart(t *testing.T, delivery config.Delivery) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = delivery
	cfg.Kafka.RequestTimeout = 5 * time.Second
	p := env.StartProc(t, WriteConfig(t, cfg))
	waitStarted(t, p, cfg)
	wrote := writeInBackground(s, WriteOptions{Writers: 4, Transactions: 1500, Pace: time.Millisecond})
	waitEvents(t, cfg, 300)
	k.Restart(t)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	if delivery == config.ExactlyOnce {
		requireExact(t, k, s, cfg.Router.TopicPrefix)
	} else {
		rep := requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
		t.Logf("at-least-once across a broker restart: %d rows, %d records, %d duplicated", rep.Expected, rep.Received, len(rep.Duplicates))
	}
	if p.Exited() {
		t.Fatalf("relay exited instead of riding out the broker restart:\n%s", p.Output())
	}
}

// The source MariaDB crashes (SIGKILL) and restarts mid-stream.
func TestCrashSourceRestart(t *testing.T) {
	BrokerOnlyAsSink(t)
	k := StartKafka(t)
	db := startServer(t, nil)
	if err := db.Exec(fmt.Sprintf(AlarmDDL, "app"), fmt.Sprintf(SeqDDL, "app")); err != nil {
		t.Fatal(err)
	}
	s := &Schema{DB: db, Name: "app"}
	cfg := env.RelayConfig(k, s.Table())
	cfg.Source.Hosts = []string{db.Addr}
	cfg.Source.HeartbeatPeriod = 500 * time.Millisecond
	p := env.StartProc(t, WriteConfig(t, cfg))
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 4, Transactions: 500}); err != nil {
		t.Fatal(err)
	}
	crashAndRestart(t, db)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 4, Transactions: 500, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, db), 2*time.Minute)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	if rep.Expected != 4000 {
		t.Fatalf("outbox has %d rows, want 4000", rep.Expected)
	}
	if p.Exited() {
		t.Fatalf("relay exited instead of riding out the source restart:\n%s", p.Output())
	}
}

// Two instances with the same name: the second one waits as a standby
// instead of fencing the first; nothing is duplicated or lost.
func TestCrashTwoInstancesSameName(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	a := env.StartProc(t, WriteConfig(t, cfg))
	waitStarted(t, a, cfg)
	wrote := writeInBackground(s, WriteOptions{Writers: 4, Transactions: 1500, Pace: time.Millisecond})
	waitEvents(t, cfg, 200)
	cfgB := cfg
	cfgB.Source.ServerID++ // a second replica connection, same pipeline name
	b := env.StartProc(t, WriteConfig(t, cfgB))
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	requireExact(t, k, s, cfg.Router.TopicPrefix)
	if a.Exited() || b.Exited() {
		t.Fatalf("an instance exited:\n%s\n%s", a.Output(), b.Output())
	}
	if !strings.Contains(b.Output(), "standby") || strings.Contains(b.Output(), "relay started") || strings.Contains(a.Output(), "fenced") {
		t.Fatalf("the second instance did not wait as a standby:\n%s", b.Output())
	}
}
