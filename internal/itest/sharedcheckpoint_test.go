//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// Two pipelines share one checkpoint topic. B is killed between flushing
// its batch (checkpoint record included) and committing, so its
// transaction stays open on the checkpoint partition; A goes on committing
// checkpoints behind it, then restarts. A must not load its older visible
// checkpoint and publish again what consumers already have: it waits,
// says which transactional id holds the topic back (so does `checkpoint
// show`), and resumes once B starts again and aborts its transaction.
func TestSharedCheckpointTopicHeldBack(t *testing.T) {
	k := StartKafka(t)
	sA, sB := env.NewSchema(t), env.NewSchema(t)
	cfgA, cfgB := env.RelayConfig(k, sA.Table()), env.RelayConfig(k, sB.Table())
	cfgB.Kafka.CheckpointTopic = cfgA.Kafka.CheckpointTopic
	cfgB.Kafka.TransactionTimeout = 10 * time.Minute // B's transaction stays open for the whole test
	pathA, pathB := WriteConfig(t, cfgA), WriteConfig(t, cfgB)

	a := env.StartProc(t, pathA)
	waitStarted(t, a, cfgA)
	b := env.StartProc(t, pathB, "OUTBOX_RELAY_FAILPOINT=after-flush:2") // 1: the start pin; 2: the first batch
	waitStarted(t, b, cfgB)
	if _, err := sB.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 20, Tag: "b1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Wait(time.Minute); err != nil || !b.Killed() {
		t.Fatalf("the failpoint did not kill pipeline B (%v):\n%s", err, b.Output())
	}

	// A commits behind B's open transaction: its records are visible, its
	// newer checkpoints are not.
	if _, err := sA.Write(context.Background(), WriteOptions{Writers: 2, Transactions: 50, Tag: "a1"}); err != nil {
		t.Fatal(err)
	}
	Eventually(t, time.Minute, func() error {
		if rep := Compare(t, sA, Consume(t, k.Brokers, cfgA.Router.TopicPrefix)); !rep.OK() {
			return fmt.Errorf("pipeline A: %s", rep)
		}
		return nil
	})
	time.Sleep(3 * cfgA.Kafka.CheckpointInterval) // a heartbeat checkpoint after the last batch
	a.Kill()

	out, errOut, code := env.CLI(t, "checkpoint", "show", "--wait", "1s", "--config", pathA)
	// B's open transaction is in either of its lanes (`name` or `name#2`).
	if code != 1 || !strings.Contains(errOut, "transactional id \""+cfgB.Name) ||
		!strings.Contains(out, "not final") || !strings.Contains(out, "held back by: transactional id "+cfgB.Name) {
		t.Fatalf("checkpoint show behind B's open transaction: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = env.CLI(t, "checkpoint", "show", "--json", "--wait", "1s", "--config", pathA)
	if code != 1 || out != "" || !strings.Contains(errOut, cfgB.Name) {
		t.Fatalf("checkpoint show --json behind B's open transaction: exit %d\n%s\n%s", code, out, errOut)
	}

	// A restarts while B's transaction is open: it publishes nothing again.
	if _, err := sA.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 10, Tag: "a2"}); err != nil {
		t.Fatal(err)
	}
	a = env.StartProc(t, pathA)
	Eventually(t, time.Minute, func() error {
		if a.Exited() {
			t.Fatalf("pipeline A exited instead of waiting for the checkpoint topic:\n%s", a.Output())
		}
		if !strings.Contains(a.Output(), cfgB.Name) {
			return fmt.Errorf("pipeline A does not name B's transactional id yet")
		}
		return nil
	})
	rep := Compare(t, sA, Consume(t, k.Brokers, cfgA.Router.TopicPrefix))
	if len(rep.Duplicates) > 0 || len(rep.Unexpected) > 0 || len(rep.Missing) != 10 {
		t.Fatalf("pipeline A while held back: %s; want the 10 rows written while it was down missing, nothing twice", rep)
	}

	// B starts again: its initialisation aborts the open transaction, and
	// both pipelines complete exactly once.
	b = env.StartProc(t, pathB)
	head := Head(t, env.DB)
	WaitCheckpoint(t, cfgA, head, 2*time.Minute)
	WaitCheckpoint(t, cfgB, head, 2*time.Minute)
	repA := requireExact(t, k, sA, cfgA.Router.TopicPrefix)
	repB := requireExact(t, k, sB, cfgB.Router.TopicPrefix)
	if repA.Expected != 110 || repB.Expected != 20 {
		t.Fatalf("outbox rows: A %d, B %d; want 110 and 20", repA.Expected, repB.Expected)
	}
	for _, p := range []*Proc{a, b} {
		if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
			t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
		}
	}
}

// checkpoint skip adds one GTID to the committed checkpoint, keeps the
// layout and counters, drops a partial of that GTID, refuses what would
// skip more (or nothing), and follows set's confirmation rules.
func TestCheckpointSkip(t *testing.T) {
	k, _, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	ctx := context.Background()
	if err := Store(t, cfg).EnsureTopic(ctx, kadmFor(t, k), 1); err != nil {
		t.Fatal(err)
	}
	schema := map[string][]string{"app.outbox": {"id", "event_id", "payload"}}
	cur := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: "0-1-10", Flavor: "mariadb", Events: 42, Schema: schema,
		Partial: &checkpoint.Partial{GTID: "0-1-11", Rows: 3}, Time: time.Now().Add(-time.Hour).UTC()}
	if err := Store(t, cfg).Write(ctx, cfg.Name, cfg.Kafka.TransactionLanes, cur); err != nil {
		t.Fatal(err)
	}
	skip := func(args ...string) (string, string, int) {
		return env.CLI(t, append([]string{"checkpoint", "skip", "--config", path}, args...)...)
	}
	if _, errOut, code := skip("--gtid", "0-1-13", "--yes"); code != 1 || !strings.Contains(errOut, "not the transaction right after") {
		t.Fatalf("skip past a gap: exit %d %s", code, errOut)
	}
	if _, errOut, code := skip("--gtid", "0-1-9", "--yes"); code != 1 || !strings.Contains(errOut, "already covers") {
		t.Fatalf("skip a covered gtid: exit %d %s", code, errOut)
	}
	if _, errOut, code := skip("--gtid", "0-1-11"); code != 2 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("skip without --yes, not a terminal: exit %d %s", code, errOut)
	}
	if _, errOut, code := skip("--yes"); code != 2 || !strings.Contains(errOut, "--gtid") {
		t.Fatalf("skip without --gtid: exit %d %s", code, errOut)
	}
	if cp := loadCheckpoint(t, cfg); cp.GTIDSet != "0-1-10" || cp.Partial == nil {
		t.Fatalf("a refused skip changed the checkpoint: %+v", cp)
	}
	out, errOut, code := skip("--gtid", "0-1-11", "--yes")
	if code != 0 || !strings.Contains(out, "skipped 0-1-11: 0-1-10 -> 0-1-11") || !strings.Contains(out, "dropped partial: 3 rows of 0-1-11") {
		t.Fatalf("skip: exit %d\n%s\n%s", code, out, errOut)
	}
	cp := loadCheckpoint(t, cfg)
	if cp.GTIDSet != "0-1-11" || cp.Partial != nil || cp.Events != 42 || len(cp.Schema["app.outbox"]) != 3 {
		t.Fatalf("checkpoint after skip: %+v", cp)
	}
	if _, errOut, code := skip("--gtid", "0-1-11", "--yes"); code != 1 || !strings.Contains(errOut, "already covers") {
		t.Fatalf("skip twice: exit %d %s", code, errOut)
	}
	// --force passes over a gap, and over a relay that looks live (the
	// checkpoint was just written).
	if out, errOut, code := skip("--gtid", "0-1-14", "--force", "--yes"); code != 0 || loadCheckpoint(t, cfg).GTIDSet != "0-1-14" {
		t.Fatalf("skip --force: exit %d\n%s\n%s", code, out, errOut)
	}
}

// The operator's way past a transaction the relay stops on: a
// statement-logged INSERT into the outbox stops the relay naming its GTID;
// `checkpoint skip` of that GTID lets it resume after it, publishing every
// other row exactly once and that one never.
func TestCheckpointSkipStatementLoggedInsert(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 5, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := env.DB.Exec("SET SESSION binlog_format = 'STATEMENT'",
		"INSERT INTO "+s.Table()+" (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('stmt-1', 'alarm', 'dev-s', 'AlarmCreated', '{}')"); err != nil {
		t.Fatal(err)
	}
	stuck := Head(t, env.DB)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 5, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(time.Minute); err != nil || code != relay.ExitData || !strings.Contains(p.Output(), stuck) {
		t.Fatalf("relay on a statement-logged outbox insert at %s: exit %d %v\n%s", stuck, code, err, p.Output())
	}
	var shown struct {
		GTIDSet string `json:"gtid_set"`
	}
	out, _, _ := env.CLI(t, "checkpoint", "show", "--json", "--config", path)
	if err := json.Unmarshal([]byte(out), &shown); err != nil || shown.GTIDSet == stuck {
		t.Fatalf("checkpoint after the stop: %q %v, want it before %s", out, err, stuck)
	}
	Eventually(t, time.Minute, func() error { // until the stopped relay no longer looks live
		out, errOut, code := env.CLI(t, "checkpoint", "skip", "--gtid", stuck, "--yes", "--config", path)
		if code != 0 {
			return fmt.Errorf("skip: exit %d %s %s", code, out, errOut)
		}
		return nil
	})
	p = env.StartProc(t, path)
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix))
	if len(rep.Missing) != 1 || rep.Missing[0] != "stmt-1" || len(rep.Duplicates)+len(rep.Unexpected)+len(rep.OutOfOrder)+len(rep.WrongKey) != 0 || rep.Expected != 11 {
		t.Fatalf("after skipping %s: %s; want only stmt-1 missing", stuck, rep)
	}
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
}

// A client with WRITE on a shared checkpoint topic writes, outside a
// transaction, a checkpoint at the source's head under pipeline A's name.
// A (exactly-once) must not take it, which would skip its unpublished
// rows: it stops naming the record; a checkpoint written as `checkpoint set` writes it (in
// a transaction) lets it go on and publish them.
func TestForgedCheckpointOnSharedTopicRefused(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 3, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	good := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 3, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	forged := *good
	forged.GTIDSet = Head(t, env.DB) // past the rows not yet published
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), Store(t, cfg).Record(&forged)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r = RunRelay(t, cfg)
	err = r.StoppedWith(t)
	if !errors.Is(err, checkpoint.ErrNotTransactional) || !strings.Contains(err.Error(), forged.GTIDSet) {
		t.Fatalf("relay on a forged checkpoint: %v, want a stop naming the record written outside a transaction", err)
	}
	if err := Store(t, cfg).Write(context.Background(), cfg.Name, cfg.Kafka.TransactionLanes, good); err != nil {
		t.Fatal(err)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() {
		t.Fatalf("after the checkpoint was set again: %s", rep)
	}
}
