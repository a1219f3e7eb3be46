// Package itest is the integration harness: a scratch MariaDB (devdb) shared
// by a test package, a Kafka broker per test (franz-go's kfake embedded, or
// the broker named by RELAY_TEST_KAFKA), the relay binary built once, an
// outbox schema per test, writers that commit business and outbox rows as an
// application would, and a read_committed consumer that checks what arrived
// against the outbox table.
package itest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/internal/devdb"
)

// FailpointTag is the build tag that compiles the relay's failpoints in
// (internal/relay/failpoint.go: OUTBOX_RELAY_FAILPOINT). The harness builds
// the relay binary with it so that crash tests can stop it at a commit
// boundary; the shipped build has none.
const FailpointTag = "failpoint"

// Env is shared by the tests of one package: set it up in TestMain with Main.
type Env struct {
	DB      *devdb.Server
	Binary  string // built relay binary
	dir     string
	counter atomic.Int64
}

// RepoRoot is the module root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Main starts the shared MariaDB, builds the relay, runs the tests and
// cleans up. Use from TestMain: os.Exit(itest.Main(m, &env)).
func Main(m *testing.M, env **Env) int { return MainWith(m, env, nil) }

// MainWith is Main with extra mariadbd settings (devdb.Options.Settings).
func MainWith(m *testing.M, env **Env, settings map[string]string) int {
	dir, err := os.MkdirTemp("", "outbox-relay-itest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "itest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := devdb.Start(ctx, devdb.Options{Dir: filepath.Join(dir, "mariadb"), Settings: settings})
	if err != nil {
		fmt.Fprintln(os.Stderr, "itest: start mariadb:", err)
		return 1
	}
	defer func() { db.Stop() }()
	// RELAY_TEST_BINARY: a relay built with FailpointTag once for several
	// test processes (internal/itest/shards.sh builds one for its shards).
	bin := os.Getenv("RELAY_TEST_BINARY")
	if bin == "" {
		bin = filepath.Join(dir, "outbox-relay")
		build := exec.CommandContext(ctx, "go", "build", "-tags", FailpointTag, "-o", bin, "./cmd/outbox-relay")
		build.Dir = RepoRoot()
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "itest: build relay: %v\n%s", err, out)
			return 1
		}
	}
	*env = &Env{DB: db, Binary: bin, dir: dir}
	return m.Run()
}

// Unique returns a name unique within this test binary, with prefix.
func (e *Env) Unique(prefix string) string {
	return fmt.Sprintf("%s%d_%d", prefix, os.Getpid()%10000, e.counter.Add(1))
}

// Kafka is a broker for one test.
type Kafka struct {
	Brokers []string
	Cluster *kfake.Cluster // nil when external
	dir     string
	port    int
}

// ExternalKafka returns RELAY_TEST_KAFKA's brokers, if set.
func ExternalKafka() []string {
	v := strings.TrimSpace(os.Getenv("RELAY_TEST_KAFKA"))
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// BrokerOnlyAsSink marks a test whose subject is the source (binlog shapes,
// DDL and schema, SQL modes, row images, the proof of a host's history,
// failover between source hosts), the configuration, the command line or
// the relay's own logic: the broker is only where records go, through the
// produce and commit path that the tests without the mark run on Apache
// Kafka too. Against an external broker (RELAY_TEST_KAFKA: make test-kafka)
// it is skipped, unless RELAY_TEST_KAFKA_ALL=1 runs every test there. Broker
// behaviour kfake does not reproduce (transactions fenced, aborted or timed
// out; group sessions; metadata of topics created, deleted or grown; broker
// faults; its limits) is the subject of the tests without the mark
// (docs/testing.md: which tests run on both, and the evidence).
func BrokerOnlyAsSink(t testing.TB) {
	t.Helper()
	if ExternalKafka() != nil && os.Getenv("RELAY_TEST_KAFKA_ALL") != "1" {
		t.Skip("the broker is only where records go: covered on kfake (RELAY_TEST_KAFKA_ALL=1 runs it on this broker too)")
	}
}

// StartKafka returns the external broker, or starts an embedded one that
// keeps its data in a directory of the test (so Restart keeps it).
func StartKafka(t testing.TB) *Kafka {
	t.Helper()
	if b := ExternalKafka(); b != nil {
		return &Kafka{Brokers: b}
	}
	port, err := devdb.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	k := &Kafka{dir: t.TempDir(), port: port}
	k.start(t)
	t.Cleanup(func() {
		if k.Cluster != nil {
			k.Cluster.Close()
		}
	})
	return k
}

func (k *Kafka) start(t testing.TB) {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(k.port), kfake.DataDir(k.dir),
		// Short group sessions (RelayConfig): a relay killed and restarted
		// waits for its dead incarnation's session to end.
		kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "900000", "group.min.session.timeout.ms": "1000"}))
	if err != nil {
		t.Fatalf("start kfake: %v", err)
	}
	k.Cluster = c
	k.Brokers = c.ListenAddrs()
}

// Restart stops the broker and starts it again with the same port and data:
// the embedded one directly, an external one with the shell command in
// RELAY_TEST_KAFKA_RESTART (make test-kafka sets it); without that command
// the test is skipped.
// Stop stops the broker for an outage test and Start brings it back: the
// embedded one directly, an external one with RELAY_TEST_KAFKA_CTL stop and
// start (make test-kafka sets it to deploy/dev/kafka.sh); without that
// command the test is skipped.
func (k *Kafka) Stop(t testing.TB) {
	t.Helper()
	if k.Cluster == nil {
		kafkaCtl(t, "stop")
		// The shard's broker is up again for the next test, even when this
		// one fails before it starts it (start reuses a running broker).
		t.Cleanup(func() { kafkaCtl(t, "start") })
		t.Cleanup(func() { // before that start: the broker as the test left it
			if t.Failed() {
				t.Logf("the broker's logs at the failure:\n%s", brokerLogs())
			}
		})
		return
	}
	k.Cluster.Close()
}

// Start: see Stop.
func (k *Kafka) Start(t testing.TB) {
	t.Helper()
	if len(ExternalKafka()) > 0 {
		kafkaCtl(t, "start")
		return
	}
	k.Cluster = nil
	k.start(t)
}

func kafkaCtl(t testing.TB, verb string) {
	t.Helper()
	script := os.Getenv("RELAY_TEST_KAFKA_CTL")
	if script == "" {
		t.Skip("stopping an external broker needs RELAY_TEST_KAFKA_CTL")
	}
	run := func(verb string) {
		t.Helper()
		cmd := exec.Command("bash", "-c", script+" "+verb)
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s broker: %v\n%s\n%s", verb, err, out, brokerLogs())
		}
	}
	run(verb)
	if verb == "start" {
		awaitBroker(t, func() { run("restart") })
	}
}

// awaitBroker waits until the external broker just started answers Kafka
// requests, and starts it again once (again) when it does not. The scripts
// return once the broker logged its start and took a connection; a broker
// that went down again right after (seen once in CI: a relay found it
// refusing connections for two minutes after a start) does not answer:
// asked from here, with the broker's logs.
func awaitBroker(t testing.TB, again func()) {
	t.Helper()
	for try := 1; ; try++ {
		err := brokerAnswers(60 * time.Second)
		if err == nil {
			return
		}
		if try == 2 {
			t.Fatalf("the broker does not answer after its start: %v\n%s", err, brokerLogs())
		}
		t.Logf("the broker does not answer after its start (%v): starting it again\n%s", err, brokerLogs())
		again()
	}
}

// brokerAnswers waits up to limit for the external broker to answer a
// metadata request.
func brokerAnswers(limit time.Duration) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(ExternalKafka()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		if err = cl.Ping(ctx); err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// brokerLogs is the end of the external broker's logs (deploy/dev/kafka.sh
// keeps them in KAFKA_DIR), for a failure.
func brokerLogs() string {
	dir := os.Getenv("KAFKA_DIR")
	if dir == "" {
		return "(KAFKA_DIR not set: no broker logs)"
	}
	var b strings.Builder
	for _, name := range []string{"server.log", "kafka.out"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", name, err)
			continue
		}
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "--- %s (end):\n%s\n", name, data)
	}
	return b.String()
}

func (k *Kafka) Restart(t testing.TB) {
	t.Helper()
	if k.Cluster == nil {
		script := os.Getenv("RELAY_TEST_KAFKA_RESTART")
		if script == "" {
			t.Skip("restarting an external broker needs RELAY_TEST_KAFKA_RESTART")
		}
		restart := func() {
			t.Helper()
			cmd := exec.Command("bash", "-c", script)
			cmd.Dir = RepoRoot()
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("restart broker: %v\n%s\n%s", err, out, brokerLogs())
			}
		}
		restart()
		awaitBroker(t, restart)
		return
	}
	k.Cluster.Close()
	k.Cluster = nil
	k.start(t)
}
