//go:build integration

package itest

// The pipelined exactly-once catch-up on a real Apache Kafka
// (RELAY_TEST_KAFKA): broker crashes, freezes and large payloads.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// soak skips a long test (minutes of broker crashes or catch-up under
// signals) unless RELAY_TEST_SOAK=1: run them after a change to the sink,
// the commit pipeline or the batch bounds.
func soak(t *testing.T) {
	t.Helper()
	if os.Getenv("RELAY_TEST_SOAK") != "1" {
		t.Skip("soak test: RELAY_TEST_SOAK=1 runs it")
	}
}

// awaitCoveredRunning waits (a minute at most) until the checkpoint covers
// head, failing with what when the relay stops first.
func awaitCoveredRunning(t *testing.T, r *InProcess, cfg config.Config, head, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		select {
		case <-r.Done():
			t.Fatalf("%s: %v", what, r.Err())
		case <-time.After(200 * time.Millisecond):
		}
		if cp := loadCheckpoint(t, cfg); cp != nil && Covers(cp, head) {
			return
		}
	}
}

// brokerKill9 kills the external broker with SIGKILL (an unclean stop: the
// transaction state log is recovered at start) and starts it again after
// down.
func brokerKill9(t *testing.T, k *Kafka, down time.Duration) {
	t.Helper()
	dir := os.Getenv("RELAY_TEST_SOAK_KAFKA_DIR")
	if dir == "" {
		t.Skip("RELAY_TEST_SOAK_KAFKA_DIR names the external broker's KAFKA_DIR")
	}
	b, err := os.ReadFile(filepath.Join(dir, "kafka.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(down)
	k.Start(t)
}

// Broker crashes (kill -9) and graceful restarts at random instants while a
// 100,000-row source transaction is caught up in 20,000-record partial
// commits (the default bound) and writers commit small transactions: the
// relay must ride them out (never exit) and publish every row exactly once,
// in order per key.
func TestSoakBrokerCrashDuringPipelinedCatchUp(t *testing.T) {
	soak(t)
	if len(ExternalKafka()) == 0 {
		t.Skip("needs a real broker")
	}
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.RequestTimeout = 5 * time.Second
	cfg.Kafka.CheckpointInterval = time.Second
	cfg.Log.Level = "info"
	p := env.StartProc(t, WriteConfig(t, cfg))
	waitStarted(t, p, cfg)
	wrote := writeInBackground(s, WriteOptions{Writers: 3, Transactions: 3000, Pace: 2 * time.Millisecond})
	if err := s.BigInsert(100000, "big"); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	for i := 0; i < 4; i++ {
		time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
		if i%2 == 0 {
			brokerKill9(t, k, time.Duration(rng.IntN(3000))*time.Millisecond)
		} else {
			k.Stop(t)
			k.Start(t)
		}
		if p.Exited() {
			t.Fatalf("relay exited after broker restart %d", i)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), 4*time.Minute)
	if p.Exited() {
		t.Fatalf("relay exited")
	}
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("%s", rep)
}

// A 300,000-row INSERT ... SELECT caught up with the default batch bound
// (20,000 records: commits pipelined, partial checkpoints), the relay
// stopped by SIGTERM or kill -9 at random instants; every row exactly once,
// in order per key. A SIGTERM must end with exit 0 in time.
func TestSoakBulkCatchUpTermKill(t *testing.T) {
	soak(t)
	k, s, cfg := env.Pipeline(t)
	cfg.Log.Level = "info"
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	p.Kill() // the bulk insert is a catch-up from the checkpoint
	if err := s.BigInsert(300000, "bulk"); err != nil {
		t.Fatal(err)
	}
	wrote := writeInBackground(s, WriteOptions{Writers: 2, Transactions: 500, Pace: 5 * time.Millisecond})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	stops := 14
	if v, err := strconv.Atoi(os.Getenv("RELAY_TEST_SOAK_STOPS")); err == nil {
		stops = v
	}
	for i := 0; i < stops; i++ {
		p = env.StartProc(t, path)
		// Stop inside the catch-up: once this run committed something.
		before := loadCheckpoint(t, cfg)
		for j := 0; j < 600 && !p.Exited(); j++ {
			cp := loadCheckpoint(t, cfg)
			if cp.Events != before.Events || (cp.Partial != nil) != (before.Partial != nil) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(300)) * time.Millisecond)
		if p.Exited() {
			t.Fatalf("relay exited by itself: %s", tailLines(p.Output(), 20))
		}
		how := "kill"
		if rng.IntN(2) == 0 {
			how = "term"
			began := time.Now()
			code, err := p.Terminate(time.Minute)
			if err != nil || code != 0 {
				t.Fatalf("SIGTERM %d: exit %d %v after %s\n%s", i, code, err, time.Since(began), tailLines(p.Output(), 20))
			}
		} else {
			p.Kill()
		}
		cp := loadCheckpoint(t, cfg)
		t.Logf("stop %d (%s): events %d partial %v", i, how, cp.Events, cp.Partial)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	p = env.StartProc(t, path)
	WaitCheckpoint(t, cfg, Head(t, env.DB), 5*time.Minute)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("%s", rep)
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("exit %d %v", code, err)
	}
}

// One-row transactions at a high commit rate (every commit pipelined, the
// settle wait asking the coordinator after each), the broker killed -9 or
// stopped at random instants eight times: the relay must never exit (a
// fencing error misread from a restarted coordinator is fatal) and must
// publish every row exactly once.
func TestSoakBrokerCrashOneRowTransactions(t *testing.T) {
	soak(t)
	if len(ExternalKafka()) == 0 {
		t.Skip("needs a real broker")
	}
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.RequestTimeout = 4 * time.Second
	cfg.Kafka.CheckpointInterval = 300 * time.Millisecond
	cfg.Log.Level = "info"
	p := env.StartProc(t, WriteConfig(t, cfg))
	waitStarted(t, p, cfg)
	wrote := writeInBackground(s, WriteOptions{Writers: 4, Transactions: 2500, Pace: 3 * time.Millisecond, Devices: 8})
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	n := 8
	if v, err := strconv.Atoi(os.Getenv("RELAY_TEST_SOAK_BROKER_RESTARTS")); err == nil {
		n = v
	}
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Millisecond)
		if rng.IntN(3) > 0 {
			brokerKill9(t, k, time.Duration(rng.IntN(2000))*time.Millisecond)
		} else {
			k.Stop(t)
			k.Start(t)
		}
		if p.Exited() {
			t.Fatalf("relay exited after broker restart %d: %s", i, tailLines(p.Output(), 30))
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), 4*time.Minute)
	if p.Exited() {
		t.Fatalf("relay exited: %s", tailLines(p.Output(), 30))
	}
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("%s", rep)
}

// brokerPause freezes the external broker (SIGSTOP: a long GC pause, a hung
// disk) for d: requests already sent sit in its sockets and are processed
// when it resumes, after the relay gave up on them.
func brokerPause(t *testing.T, d time.Duration) {
	t.Helper()
	dir := os.Getenv("RELAY_TEST_SOAK_KAFKA_DIR")
	if dir == "" {
		t.Skip("RELAY_TEST_SOAK_KAFKA_DIR names the external broker's KAFKA_DIR")
	}
	b, err := os.ReadFile(filepath.Join(dir, "kafka.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	_ = syscall.Kill(pid, syscall.SIGSTOP)
	time.Sleep(d)
	_ = syscall.Kill(pid, syscall.SIGCONT)
}

// A 200,000-row source transaction caught up in partial commits while the
// broker freezes for longer than kafka.request_timeout at random instants:
// flushes time out (the batch bound halves: attempts with different bounds
// resume from partial checkpoints written under other bounds), EndTxn
// requests sent before the freeze complete after the relay gave up. Every
// row exactly once, in order per key; the relay never exits.
func TestSoakBrokerFreezeHalvesBoundMidTransaction(t *testing.T) {
	soak(t)
	if len(ExternalKafka()) == 0 {
		t.Skip("needs a real broker")
	}
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.RequestTimeout = 2 * time.Second
	cfg.Kafka.Batch.MaxRecords = 20000
	cfg.Log.Level = "info"
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	wrote := writeInBackground(s, WriteOptions{Writers: 2, Transactions: 400, Pace: 10 * time.Millisecond})
	if err := s.BigInsert(200000, "frz"); err != nil {
		t.Fatal(err)
	}
	before := loadCheckpoint(t, cfg).Events
	for i := 0; i < 5; i++ {
		// Inside the catch-up: once something more is committed.
		for j := 0; j < 300; j++ {
			if cp := loadCheckpoint(t, cfg); cp.Events != before {
				before = cp.Events
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		brokerPause(t, time.Duration(2500+rng.IntN(3000))*time.Millisecond)
		if p.Exited() {
			t.Fatalf("relay exited after freeze %d: %s", i, tailLines(p.Output(), 30))
		}
		t.Logf("freeze %d at %d events", i, before)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), 4*time.Minute)
	if p.Exited() {
		t.Fatalf("relay exited: %s", tailLines(p.Output(), 30))
	}
	out := p.Output()
	t.Logf("halvings logged: %d", strings.Count(out, "next batches are smaller"))
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("%s", rep)
}

// Large payloads: one source transaction of RELAY_TEST_SOAK_ROWS (default 2,000)
// rows of 50 KB (100 MB: batches bound by max_bytes 8 MB, each commit
// pipelined with the next batch's reading, so up to two batches in memory),
// the relay SIGTERMed and killed -9 inside it. Every row exactly once;
// the peak RSS of the final run is logged against the 150 MB goal.
func TestSoakLargePayloadTransaction(t *testing.T) {
	soak(t)
	k, s, cfg := env.Pipeline(t)
	cfg.Log.Level = "info"
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	p.Kill()
	n := 2000
	if v, err := strconv.Atoi(os.Getenv("RELAY_TEST_SOAK_ROWS")); err == nil {
		n = v
	}
	if err := env.DB.Exec("SET SESSION max_allowed_packet = 1073741824"); err != nil {
		t.Log(err)
	}
	if err := env.DB.Exec(fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT CONCAT('L-', seq), 'alarm', CONCAT('dev-', seq %% 7), 'X', JSON_QUOTE(REPEAT(MD5(seq), 1600))
		FROM %s.seq_1_to_%d`, s.Table(), s.Name, n)); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 17))
	for i := 0; i < 4; i++ {
		p = env.StartProc(t, path)
		before := loadCheckpoint(t, cfg)
		for j := 0; j < 600 && !p.Exited(); j++ {
			if cp := loadCheckpoint(t, cfg); cp.Events != before.Events {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		if p.Exited() {
			t.Fatalf("relay exited: %s", tailLines(p.Output(), 20))
		}
		how := "kill"
		if i%2 == 1 {
			how = "term"
			if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
				t.Fatalf("SIGTERM: exit %d %v\n%s", code, err, tailLines(p.Output(), 20))
			}
		} else {
			p.Kill()
		}
		cp := loadCheckpoint(t, cfg)
		t.Logf("stop %d (%s): events %d partial %v", i, how, cp.Events, cp.Partial)
	}
	p = env.StartProc(t, path)
	var peak int64
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
				if v := p.PeakRSS(); v > peak {
					peak = v
				}
			}
		}
	}()
	WaitCheckpoint(t, cfg, Head(t, env.DB), 5*time.Minute)
	close(done)
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("%s; peak RSS of the last run %d MB", rep, peak>>20)
}

// Peak RSS while one run catches up one source transaction of
// RELAY_TEST_SOAK_ROWS rows (2,000) of RELAY_TEST_SOAK_ROW_KB KB (50). The reader's buffers are
// bounded by event count (go-mysql's 512-event cache, the events channel of
// two 513-event batches), not bytes, and one batch is held while another
// commits: with 50 KB rows 109 MB (2,000 rows) to 162 MB (14,000 rows);
// with 500 KB rows (RELAY_TEST_SOAK_ROW_KB=500 RELAY_TEST_SOAK_ROWS=1200) 453 MB, beyond the
// shipped Kubernetes manifest's 256Mi limit (an OOM kill on every restart
// at the same position). The goal is under 150 MB.
func TestSoakLargePayloadPeakRSS(t *testing.T) {
	BrokerOnlyAsSink(t)
	k, s, cfg := env.Pipeline(t)
	cfg.Log.Level = "info"
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	p.Kill()
	n, rowKB := 2000, 50
	if v, err := strconv.Atoi(os.Getenv("RELAY_TEST_SOAK_ROWS")); err == nil {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("RELAY_TEST_SOAK_ROW_KB")); err == nil {
		rowKB = v
	}
	if err := env.DB.Exec(fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, event_type, payload)
		SELECT CONCAT('L-', seq), 'alarm', CONCAT('dev-', seq %% 7), 'X', JSON_QUOTE(REPEAT(MD5(seq), %d))
		FROM %s.seq_1_to_%d`, s.Table(), rowKB*32, s.Name, n)); err != nil {
		t.Fatal(err)
	}
	head := Head(t, env.DB)
	_ = rowKB
	p = env.StartProc(t, path)
	var peak int64
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
		if v := p.PeakRSS(); v > peak {
			peak = v
		}
		if cp := loadCheckpoint(t, cfg); cp != nil && Covers(cp, head) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v := p.PeakRSS(); v > peak {
		peak = v
	}
	rep := requireExact(t, k, s, cfg.Router.TopicPrefix)
	t.Logf("%s; peak RSS %d MB", rep, peak>>20)
	if peak > 150<<20 {
		t.Errorf("peak RSS %d MB catching up %d rows of %d KB, over the 150 MB goal", peak>>20, n, rowKB)
	}
}
