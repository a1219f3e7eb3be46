//go:build integration

package dbzitest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/itest"
)

// connect is one Kafka Connect worker running Debezium's MySQL connector
// (deploy/dev/debezium.sh), started and not yet stopped.
type connect struct {
	t        *testing.T
	mode     string // distributed | standalone
	dir      string
	env      []string
	cmd      *exec.Cmd
	done     chan struct{}
	name     string // the connector's name
	producer string // its task producer's client.id
}

// startConnect starts a worker for s's outbox from the binlog position
// file/pos, its records routed to topicPrefix<aggregate_type> as the
// relay's router.topic_prefix routes them.
func startConnect(t *testing.T, mode string, s *itest.Schema, brokers []string, topicPrefix, file string, pos uint32) *connect {
	t.Helper()
	rest, err := devdb.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	name := env.Unique("dbz")
	c := &connect{t: t, mode: mode, dir: t.TempDir(), name: name, producer: name + "-producer", done: make(chan struct{})}
	host, port, _ := strings.Cut(env.DB.Addr, ":")
	c.env = append(os.Environ(), "DBZ_DIR="+c.dir, "DBZ_BOOTSTRAP="+strings.Join(brokers, ","), "DBZ_DB_HOST="+host, "DBZ_DB_PORT="+port,
		"DBZ_DB_USER=root", "DBZ_DB_PASSWORD="+devdb.RootPassword, "DBZ_DB="+s.Name, "DBZ_TOPIC_PREFIX="+topicPrefix,
		"DBZ_BINLOG_FILE="+file, "DBZ_BINLOG_POS="+strconv.FormatUint(uint64(pos), 10), "DBZ_SERVER_ID="+strconv.Itoa(6100+rest%1000),
		"DBZ_REST_PORT="+strconv.Itoa(rest), "DBZ_NAME="+name, "DBZ_GROUP="+name+"-connect", "DBZ_HEAP=512m", "DBZ_POLL_MS=100",
		// Offsets flushed often; a stop's flush waits for every record sent.
		"DBZ_FLUSH_MS=1000", "DBZ_FLUSH_TIMEOUT_MS=60000",
		// The task's producer: named, so a quota can slow it; a small buffer,
		// so a slowed producer slows the task's polls (and the binlog read)
		// rather than buffering the whole transaction.
		"DBZ_EXTRA=producer.override.client.id="+c.producer+"\nproducer.override.buffer.memory=16384\nproducer.override.batch.size=2048")
	verb := "run"
	if mode == "distributed" {
		verb = "distributed"
	} else if out, err := c.script("seed"); err != nil {
		t.Fatalf("seed the offset file: %v\n%s", err, out)
	}
	c.cmd = exec.Command("deploy/dev/debezium.sh", verb)
	c.cmd.Dir = itest.RepoRoot()
	c.cmd.Env = c.env
	logf, err := os.Create(filepath.Join(c.dir, "worker.out"))
	if err != nil {
		t.Fatal(err)
	}
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); logf.Close(); close(c.done) }()
	t.Cleanup(func() {
		c.terminate()
		if t.Failed() {
			t.Logf("the Connect worker's warnings and errors:\n%s", c.logTail())
		}
	})
	if mode == "distributed" {
		if out, err := c.script("register"); err != nil {
			t.Fatalf("register the connector: %v\n%s\n%s", err, out, c.logTail())
		}
	}
	return c
}

// script runs deploy/dev/debezium.sh verb with the worker's environment.
func (c *connect) script(verb string) (string, error) {
	cmd := exec.Command("deploy/dev/debezium.sh", verb)
	cmd.Dir = itest.RepoRoot()
	cmd.Env = c.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// stop stops the connector gracefully: over REST (distributed), or the
// standalone worker with SIGTERM; either way its task commits its offsets.
func (c *connect) stop() {
	c.t.Helper()
	if c.mode == "distributed" {
		if out, err := c.script("stop-connector"); err != nil {
			c.t.Fatalf("stop the connector: %v\n%s\n%s", err, out, c.logTail())
		}
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(2 * time.Minute):
		c.t.Fatalf("the standalone worker did not stop within 2 minutes:\n%s", c.logTail())
	}
}

// terminate ends the worker process.
func (c *connect) terminate() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(time.Minute):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// logTail is the worker's errors, for a failure.
func (c *connect) logTail() string {
	b, _ := os.ReadFile(filepath.Join(c.dir, "connect.log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "ERROR") || strings.Contains(l, "WARN") {
			out = append(out, l)
		}
	}
	if len(out) > 15 {
		out = out[len(out)-15:]
	}
	w, _ := os.ReadFile(filepath.Join(c.dir, "worker.out"))
	return strings.Join(out, "\n") + "\n" + string(w)
}

// throttle sets (rate > 0) or removes the producer byte-rate quota of the
// connector's task producer.
func (c *connect) throttle(brokers []string, rate float64) {
	c.t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		c.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := c.producer
	op := kadm.AlterClientQuotaOp{Key: "producer_byte_rate", Value: rate, Remove: rate == 0}
	res, err := kadm.NewClient(cl).AlterClientQuotas(ctx, []kadm.AlterClientQuotaEntry{{
		Entity: kadm.ClientQuotaEntity{{Type: "client-id", Name: &id}}, Ops: []kadm.AlterClientQuotaOp{op}}})
	if err == nil {
		for _, r := range res {
			if r.Err != nil {
				err = r.Err
			}
		}
	}
	if err != nil {
		c.t.Fatalf("quota for %s: %v", id, err)
	}
}

// binlogPosition is the server's binlog file and position now.
func binlogPosition(t *testing.T) (string, uint32) {
	t.Helper()
	rows, err := env.DB.Query("SHOW MASTER STATUS")
	if err != nil || len(rows) == 0 || len(rows[0]) < 2 {
		t.Fatalf("SHOW MASTER STATUS: %v %v", rows, err)
	}
	pos, err := strconv.ParseUint(rows[0][1], 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return rows[0][0], uint32(pos)
}

// waitPublished waits until every id of want has a record in the topics
// of prefix (Debezium's, read_uncommitted: it writes none in transactions).
func waitPublished(t *testing.T, c *connect, brokers []string, prefix string, want []string) {
	t.Helper()
	itest.Eventually(t, 2*time.Minute, func() error {
		select {
		case <-c.done:
			t.Fatalf("the Connect worker exited:\n%s", c.logTail())
		default:
		}
		got := itest.ProducedIDs(t, brokers, prefix)
		missing := 0
		for _, id := range want {
			if got[id] == 0 {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d rows not yet published by Debezium", missing, len(want))
		}
		return nil
	})
}
