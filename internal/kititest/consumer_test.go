//go:build integration

package kititest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The consumer helper: this test binary re-executed with helperEnv set runs
// an inbox consumer whose handler inserts a notification row per record,
// and kills itself with SIGKILL right after the database commit of the
// record whose event id is in KITITEST_CRASH_AFTER (before its offset
// commit).
const helperEnv = "KITITEST_CONSUMER"

func consumerHelper() int {
	db, err := sql.Open("mysql", os.Getenv("KITITEST_DSN"))
	if err != nil {
		fmt.Println("helper:", err)
		return 1
	}
	crashAfter := os.Getenv("KITITEST_CRASH_AFTER")
	store := &inbox.Store{DB: db, Name: "notifier", AfterCommit: func(r *kgo.Record, o inbox.Outcome) {
		id, _ := inbox.EventID(r)
		fmt.Printf("%s %s\n", o, id)
		if id == crashAfter && o == inbox.Applied {
			fmt.Println("crash: killed after the database commit, before the offset commit")
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}}
	c, err := inbox.NewConsumer(store, os.Getenv("KITITEST_GROUP"), []string{os.Getenv("KITITEST_TOPIC")},
		kgo.SeedBrokers(strings.Split(os.Getenv("KITITEST_BROKERS"), ",")...),
		// The killed member's session must end before the restarted one
		// gets its partitions (the brokers allow 1s and up).
		kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(500*time.Millisecond))
	if err != nil {
		fmt.Println("helper:", err)
		return 1
	}
	defer c.Close()
	err = c.Run(context.Background(), func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		id, _ := inbox.EventID(r)
		_, err := tx.ExecContext(ctx, "INSERT INTO notification (event_id, body) VALUES (?, ?)", id, string(r.Value))
		return err
	})
	fmt.Println("helper: run:", err)
	return 1
}

// TestConsumerKilledBetweenDBCommitAndOffsetCommit: a consumer process
// killed with SIGKILL after committing an event's effect and before
// committing its offset gets the record again after a restart, and the
// effect is applied once.
func TestConsumerKilledBetweenDBCommitAndOffsetCommit(t *testing.T) {
	k := itest.StartKafka(t)
	name := env.Unique("inbox")
	if err := env.DB.Exec("CREATE DATABASE "+name,
		"USE "+name,
		inbox.DDL(name+".consumed_event"),
		"CREATE TABLE "+name+".notification (n BIGINT AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(64) NOT NULL, body TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, name)
	topic := "outbox.event." + name
	// Five events in one Kafka transaction, as the relay publishes them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID(name), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 3, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	const n = 5
	for i := 1; i <= n; i++ {
		r := &kgo.Record{Key: []byte("device-1"), Value: []byte(fmt.Sprintf(`{"alarm":%d}`, i)),
			Headers: []kgo.RecordHeader{{Key: "id", Value: []byte(fmt.Sprintf("e%d", i))}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	start := func(crashAfter string) (*exec.Cmd, string) {
		out := filepath.Join(t.TempDir(), "consumer.log")
		f, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=1", "KITITEST_DSN="+dsn(env.DB.Addr, name), "KITITEST_GROUP="+name,
			"KITITEST_TOPIC="+topic, "KITITEST_BROKERS="+strings.Join(k.Brokers, ","), "KITITEST_CRASH_AFTER="+crashAfter)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); f.Close() })
		return cmd, out
	}
	read := func(path string) string { b, _ := os.ReadFile(path); return string(b) }

	// Run 1: killed right after e3's database commit.
	cmd, log1 := start("e3")
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("consumer ended with %v, want SIGKILL at e3; output:\n%s", err, read(log1))
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("consumer was not killed within 90s; output:\n%s", read(log1))
	}
	if got := count(t, db, "SELECT COUNT(*) FROM notification WHERE event_id = 'e3'"); got != 1 {
		t.Fatalf("e3 applied %d times before the kill, want 1", got)
	}
	t.Logf("run 1 (killed):\n%s", read(log1))

	// Run 2: the uncommitted records come again; each effect stays single.
	_, log2 := start("")
	itest.Eventually(t, 90*time.Second, func() error {
		if got := count(t, db, "SELECT COUNT(*) FROM consumed_event WHERE consumer_name = 'notifier'"); got != n {
			return fmt.Errorf("%d of %d events consumed", got, n)
		}
		if !strings.Contains(read(log2), "duplicate e3") {
			return fmt.Errorf("e3 not redelivered yet; output:\n%s", read(log2))
		}
		return nil
	})
	t.Logf("run 2:\n%s", read(log2))
	for i := 1; i <= n; i++ {
		if got := count(t, db, "SELECT COUNT(*) FROM notification WHERE event_id = ?", fmt.Sprintf("e%d", i)); got != 1 {
			t.Errorf("e%d applied %d times, want exactly once", i, got)
		}
	}
}

// A consumer started before the relay created its topic waits. The failure
// guarded against: the demo's and the docs' consumer subscribes to
// outbox.event.<type>, which the relay creates on the first event. A
// consumer started first should wait, not fail.
func TestConsumerWaitsForTopicNotCreatedYet(t *testing.T) {
	k := itest.StartKafka(t)
	name := env.Unique("atk16nt")
	if err := env.DB.Exec("CREATE DATABASE "+name, inbox.DDL(name+".consumed_event")); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, name)
	c, err := inbox.NewConsumer(&inbox.Store{DB: db, Name: "n"}, name, []string{"outbox.event." + name}, kgo.SeedBrokers(k.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = c.Run(ctx, func(context.Context, *sql.Tx, *kgo.Record) error { return nil })
	if err != nil {
		t.Errorf("consumer of a topic not created yet stopped for good within 20s: %v", err)
	}
}
