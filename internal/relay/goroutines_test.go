package relay

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kfake"
	"go.uber.org/goleak"

	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/kafkatest"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

// TestMain fails the package's tests when a goroutine they started is still
// running once they have all ended.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// glog (imported by Vitess, which the MySQL double encodes its
		// binlog events with) starts its flush daemon in its package init,
		// for the life of the process.
		goleak.IgnoreTopFunction("github.com/golang/glog.(*fileSink).flushDaemon"),
		// kfake's Cluster.Close does not wait for the goroutines that run
		// control functions: a test's SleepControl wake-up (a broker slowed
		// down on purpose) sleeps on after its cluster closed, and a control
		// goroutine that returns after the close waits on the closed
		// cluster's lock for good. Both are the fake broker's, not the
		// relay's.
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).SleepControl.func1"),
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).runControl.func1"))
}

// An attempt joins every goroutine it started before it returns: the
// reader (and its silence watchdog), the source sampler, the stale-host
// watcher, the commit in flight and the settle wait. The attempt runs
// against a MySQL double with two hosts (so the stale-host watcher runs)
// and kfake until the row committed before it is in the checkpoint, then
// stops; at the moment it returns no goroutine of the relay's code, or of
// go-mysql's client, is left.
func TestAttemptJoinsItsGoroutinesBeforeReturning(t *testing.T) {
	p, tbl := startDoubleOutbox(t)
	row := []any{int64(1), "ev-1", "alarm", "dev-1", "AlarmCreated", `{"deviceId":"dev-1"}`, time.Now()}
	if _, err := p.Commit(mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: tbl, Rows: [][]any{row}}}}); err != nil {
		t.Fatal(err)
	}
	replica, err := p.Replica(mysqlsource.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	k := kafkatest.Cluster(t, kfake.NumBrokers(1))

	cfg := kfakeDoubleConfig(t, k, "joined", 2001, p.Addr(), replica.Addr())
	r, err := New(cfg, zerolog.Nop(), metrics.New("test"))
	if err != nil {
		t.Fatal(err)
	}
	// Several attempts, each to its end: a goroutine left running after
	// its attempt returned is seen the moment it returns, and such a
	// goroutine usually ends soon after, so one attempt could miss it.
	for n := 1; n <= 5; n++ {
		if n > 1 {
			row := []any{int64(n), fmt.Sprintf("ev-%d", n), "alarm", "dev-1", "AlarmCreated", `{"deviceId":"dev-1"}`, time.Now()}
			if _, err := p.Commit(mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: tbl, Rows: [][]any{row}}}}); err != nil {
				t.Fatal(err)
			}
		}
		runAttemptToCheckpoint(t, r, p.Executed().Flat())
	}
}

// runAttemptToCheckpoint runs one attempt of r until its checkpoint is want,
// stops it (SIGTERM), and fails when a goroutine it started is still running
// at the moment it returns.
func runAttemptToCheckpoint(t *testing.T, r *Relay, want string) {
	t.Helper()
	before := goroutineIDs()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ended := make(chan error, 1)
	go func() {
		started := false
		ended <- r.attempt(ctx, nil, &started)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		cp, err := r.store.Load(lctx, r.cfg.Name)
		cancel()
		if err == nil && cp != nil && cp.GTIDSet == want {
			break
		}
		select {
		case err := <-ended:
			t.Fatalf("the attempt ended before its checkpoint reached %s: %v", want, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the checkpoint did not reach %s within 30s (last %+v, %v)", want, cp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop() // SIGTERM
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("attempt stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt did not return within 30s of its context's end")
	}
	if left := attemptGoroutines(before); len(left) > 0 {
		t.Fatalf("%d goroutines of the attempt still run after it returned:\n%s", len(left), strings.Join(left, "\n\n"))
	}
}

// goroutineIDs are the goroutines running now, by their header line.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range goroutineStacks() {
		ids[goroutineID(g)] = true
	}
	return ids
}

// attemptGoroutines are the stacks of goroutines not in before that run the
// relay's own code (but for this test's and the MySQL double's) or
// go-mysql's client and replication packages.
func attemptGoroutines(before map[string]bool) []string {
	var left []string
	for _, g := range goroutineStacks()[1:] { // the first is the caller's
		if before[goroutineID(g)] || strings.Contains(g, "runAttemptToCheckpoint") {
			continue
		}
		for _, line := range strings.Split(g, "\n") {
			ours := strings.Contains(line, "github.com/outbox-relay/outbox-relay/") && !strings.Contains(line, "/internal/mysqlsource")
			if ours || strings.Contains(line, "go-mysql/replication.") || strings.Contains(line, "go-mysql/client.") {
				left = append(left, g)
				break
			}
		}
	}
	return left
}

// goroutineStacks is every goroutine's stack, the caller's first.
func goroutineStacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Split(string(bytes.TrimSpace(buf[:n])), "\n\n")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// goroutineID is "goroutine N" from a stack's header line.
func goroutineID(stack string) string {
	head, _, _ := strings.Cut(stack, " [")
	return head
}

// doubleConfig is a relay configuration named name reading app.outbox from
// the MySQL doubles at hosts from their start, as server_id serverID (the
// double's user, its RSA public key for the login).
func doubleConfig(t testing.TB, name string, serverID uint32, hosts ...string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Name = name
	cfg.Source.Hosts = hosts
	cfg.Source.User, cfg.Source.Password = "relay", "relay-pw"
	cfg.Source.ServerID = serverID
	cfg.Source.Flavor = "mysql"
	cfg.Source.Tables = []string{"app.outbox"}
	cfg.Source.Start = "earliest"
	cfg.Source.HeartbeatPeriod = time.Second
	cfg.Source.ServerPublicKeyFile = filepath.Join(t.TempDir(), "server-public-key.pem")
	if err := os.WriteFile(cfg.Source.ServerPublicKeyFile, mysqlsource.PublicKeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// startDoubleOutbox starts a MySQL double holding the outbox table
// app.outbox; it closes when t ends.
func startDoubleOutbox(t *testing.T) (*mysqlsource.Primary, *mysqlsource.Table) {
	t.Helper()
	p, err := mysqlsource.Start(mysqlsource.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	tbl, err := p.CreateOutbox("app", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	return p, tbl
}

// kfakeDoubleConfig is doubleConfig writing to the embedded cluster k:
// checkpoints every 100 ms, no progress lines, no HTTP listener.
func kfakeDoubleConfig(t testing.TB, k *kfake.Cluster, name string, serverID uint32, hosts ...string) config.Config {
	t.Helper()
	cfg := doubleConfig(t, name, serverID, hosts...)
	cfg.Kafka.Brokers = k.ListenAddrs()
	cfg.Kafka.ReplicationFactor = 1
	cfg.Kafka.RequestTimeout = 5 * time.Second
	cfg.Kafka.CheckpointInterval = 100 * time.Millisecond
	cfg.Log.ProgressInterval = 0
	cfg.HTTP.Listen = ""
	return cfg
}
