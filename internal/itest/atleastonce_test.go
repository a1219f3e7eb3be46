//go:build integration

package itest

import (
	"context"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// at-least-once, for brokers without transactions: kill -9 mid-stream may
// publish some records twice, never loses one, never publishes a rolled-back
// row.
func TestAtLeastOnceLosesNothing(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = config.AtLeastOnce
	cfg.Kafka.Batch.MaxRecords = 200
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg) // pins "now" before the writers start
	wrote := writeInBackground(s, WriteOptions{Writers: 4, Transactions: 1000, RollbackRate: 0.1, Pace: 500 * time.Microsecond})
	for writing := true; writing; p = env.StartProc(t, path) {
		select {
		case err := <-wrote:
			if err != nil {
				t.Fatal(err)
			}
			writing = false
		case <-time.After(300 * time.Millisecond):
		}
		p.Kill()
	}
	p.Kill()
	env.StartProc(t, path)
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	rep := requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("at-least-once after kills: %d rows, %d records, %d duplicated", rep.Expected, rep.Received, len(rep.Duplicates))
}

// at-least-once writes a batch's checkpoint only after the batch is
// acknowledged: a crash in between (after-flush) leaves acknowledged records
// beyond the last checkpoint, which the restart publishes again; nothing is
// lost.
func TestAtLeastOnceCrashBeforeCheckpoint(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = config.AtLeastOnce
	cfg.Kafka.Batch.MaxRecords = 50
	// No heartbeat checkpoints: the 2nd and 3rd checkpoints must be those of
	// batches. At 200 ms (the harness's), two heartbeats can pass before the
	// writers' first row on a broker slow to answer the test's first load.
	cfg.Kafka.CheckpointInterval = time.Hour
	path := WriteConfig(t, cfg)
	// The 1st checkpoint pins the start; die before writing the 3rd.
	p := env.StartProc(t, path, "OUTBOX_RELAY_FAILPOINT=after-flush:3")
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 4, Transactions: 500, RollbackRate: 0.1}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(2 * time.Minute); err != nil || !p.Killed() {
		t.Fatalf("the failpoint did not kill the relay (%v):\n%s", err, p.Output())
	}
	cp := loadCheckpoint(t, cfg)
	before := len(Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if int64(before) <= cp.Events {
		t.Fatalf("at the crash Kafka held %d records and the checkpoint counted %d: no acknowledged batch was waiting for its checkpoint", before, cp.Events)
	}
	env.StartProc(t, path)
	WaitCheckpoint(t, cfg, Head(t, env.DB), 2*time.Minute)
	rep := requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
	if len(rep.Duplicates) == 0 {
		t.Fatalf("records acknowledged after the last checkpoint were not published again: %s", rep)
	}
	t.Logf("crash before the checkpoint (%d records in Kafka, checkpoint at %d): after restart %d rows, %d records, %d published twice",
		before, cp.Events, rep.Expected, rep.Received, len(rep.Duplicates))
}
