//go:build integration

package mysqlitest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/binlog"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/itest"
	"github.com/outbox-relay/outbox-relay/internal/mysqlsource"
)

var env *itest.Env

// TestMain builds the relay binary once (for the process tests), with the
// failpoints compiled in (the crash cases of the matrix use them).
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outbox-relay-mysqlitest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin := filepath.Join(dir, "outbox-relay")
	build := exec.Command("go", "build", "-tags", itest.FailpointTag, "-o", bin, "./cmd/outbox-relay")
	build.Dir = itest.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build relay: %v\n%s", err, out)
		os.Exit(1)
	}
	env = &itest.Env{Binary: bin}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Versions of MySQL the doubles claim.
const (
	v80 = "8.0.40"
	v84 = "8.4.3"
)

// startPrimary starts a double and closes it at the end of the test; the
// test fails if the relay sent a statement the double does not model.
func startPrimary(t *testing.T, opts mysqlsource.Options) *mysqlsource.Primary {
	t.Helper()
	p, err := mysqlsource.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		if u := p.Unmodelled(); len(u) > 0 {
			t.Errorf("statements the MySQL double does not model: %q", u)
		}
	})
	return p
}

// app is an application writing one outbox table on a double: it commits
// transactions of outbox rows and remembers what it committed.
type app struct {
	p     *mysqlsource.Primary
	tbl   *mysqlsource.Table
	mu    sync.Mutex
	seq   map[string]int64
	rows  map[string]string // event_id -> aggregate_id
	value map[string]string // event_id -> payload
	next  int64
}

func newApp(t *testing.T, p *mysqlsource.Primary) *app {
	t.Helper()
	tbl, err := p.CreateOutbox("app", "outbox")
	if err != nil {
		t.Fatal(err)
	}
	return &app{p: p, tbl: tbl, seq: map[string]int64{}, rows: map[string]string{}, value: map[string]string{}}
}

// rows returns n outbox rows over devices, each with the device's next seq.
func (a *app) newRows(n, devices int, tag string) [][]any {
	return a.rowsOn(n, devices, "dev", tag)
}

// rowsOn is newRows over the aggregates prefix-0 ... prefix-(devices-1).
func (a *app) rowsOn(n, devices int, prefix, tag string) [][]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out [][]any
	for i := 0; i < n; i++ {
		a.next++
		dev := fmt.Sprintf("%s-%d", prefix, a.next%int64(devices))
		a.seq[dev]++
		id := fmt.Sprintf("ev-%s%d", tag, a.next)
		payload := fmt.Sprintf(`{"deviceId":"%s","level":"CRITICAL","temperature":%d.5,"seq":%d}`, dev, 80+a.next%40, a.seq[dev])
		out = append(out, []any{a.next, id, "alarm", dev, "AlarmCreated", payload, time.Now()})
	}
	return out
}

// commit commits one transaction of rows (GTID "" = the server's own).
func (a *app) commit(t *testing.T, gtid string, rows [][]any) {
	t.Helper()
	if _, err := a.p.Commit(mysqlsource.Tx{GTID: gtid, Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: rows}}}); err != nil {
		t.Fatal(err)
	}
	a.committed(rows)
}

// commitTx commits one transaction of rows on a's server, as commit does,
// and returns it with its GTID, for another server to log too.
func (a *app) commitTx(t *testing.T, rows [][]any) mysqlsource.Tx {
	t.Helper()
	tx := mysqlsource.Tx{Inserts: []mysqlsource.Insert{{Table: a.tbl, Rows: rows}}}
	g, err := a.p.Commit(tx)
	if err != nil {
		t.Fatal(err)
	}
	a.committed(rows)
	tx.GTID = g.String()
	return tx
}

// primaryAndReplica starts a MySQL 8.0 double with an application's
// three transactions of outbox rows and a replica of it (server_id 2)
// that holds them; the replica logs what follows as a test commits it.
func primaryAndReplica(t *testing.T) (*mysqlsource.Primary, *app, *mysqlsource.Primary) {
	t.Helper()
	primary := startPrimary(t, mysqlsource.Options{Version: v80})
	a := newApp(t, primary)
	for i := 0; i < 3; i++ {
		a.commit(t, "", a.newRows(2, 2, "p"))
	}
	replica, err := primary.Replica(mysqlsource.Options{Version: v80, ServerID: 2, ReplicaOf: primary.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Close)
	return primary, a, replica
}

// committed records rows as committed (after a commit made elsewhere).
func (a *app) committed(rows [][]any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range rows {
		a.rows[r[1].(string)] = r[3].(string)
		a.value[r[1].(string)] = r[5].(string)
	}
}

// relayConfig is a relay configuration for the outbox of hosts, with
// test-friendly timings (as itest.Env.RelayConfig).
func relayConfig(t *testing.T, k *itest.Kafka, flavor string, hosts ...string) config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Name = fmt.Sprintf("mysql%d_%d", os.Getpid()%10000, counter.next())
	cfg.Source.Hosts = hosts
	cfg.Source.User, cfg.Source.Password = "relay", "relay-pw"
	cfg.Source.ServerID = uint32(2000 + counter.next())
	cfg.Source.Flavor = config.Flavor(flavor)
	cfg.Source.Tables = []string{"app.outbox"}
	cfg.Source.HeartbeatPeriod = time.Second
	// Plaintext caching_sha2_password: the doubles' RSA key, pinned.
	cfg.Source.ServerPublicKeyFile = filepath.Join(t.TempDir(), "server-public-key.pem")
	if err := os.WriteFile(cfg.Source.ServerPublicKeyFile, mysqlsource.PublicKeyPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Kafka.Brokers = k.Brokers
	cfg.Kafka.CheckpointTopic = "outbox-relay.checkpoints." + cfg.Name
	cfg.Kafka.CheckpointInterval = 200 * time.Millisecond
	cfg.Kafka.TopicPartitions = 3
	cfg.Router.TopicPrefix = "outbox.event." + cfg.Name + "."
	cfg.HTTP.Listen = ""
	cfg.Log.Level = "debug"
	cfg.HA.SessionTimeout = 3 * time.Second
	cfg.HA.HeartbeatInterval = 500 * time.Millisecond
	return cfg
}

type count struct {
	mu sync.Mutex
	n  int
}

func (c *count) next() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

var counter count

// waitCheckpoint polls the committed checkpoint until it holds every GTID
// of want (MySQL notation) and no partial transaction.
func waitCheckpoint(t *testing.T, cfg config.Config, want string, timeout time.Duration) string {
	t.Helper()
	target, err := binlog.ParseSet("mysql", want)
	if err != nil {
		t.Fatal(err)
	}
	store := itest.Store(t, cfg)
	var got string
	itest.Eventually(t, timeout, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cp, err := store.Load(ctx, cfg.Name)
		if err != nil {
			return err
		}
		if cp == nil {
			return fmt.Errorf("no checkpoint yet")
		}
		if cp.Flavor != "mysql" {
			t.Fatalf("checkpoint flavor %q, want mysql", cp.Flavor)
		}
		have, err := binlog.ParseSet(cp.Flavor, cp.GTIDSet)
		if err != nil {
			return err
		}
		if !have.Contain(target) || cp.Partial != nil {
			return fmt.Errorf("checkpoint at %q (partial %v), want %q", cp.GTIDSet, cp.Partial, want)
		}
		got = cp.GTIDSet
		return nil
	})
	return got
}

// requireExact fails unless the topics hold each committed outbox row
// exactly once with its key and stored payload, nothing else, and each
// aggregate's seq in increasing order.
func requireExact(t *testing.T, k *itest.Kafka, cfg config.Config, a *app) []itest.Record {
	t.Helper()
	recs := itest.Consume(t, k.Brokers, cfg.Router.TopicPrefix)
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[string]int{}
	last := map[string]int64{}
	var problems []string
	for _, r := range recs {
		seen[r.ID]++
		agg, ok := a.rows[r.ID]
		switch {
		case !ok:
			problems = append(problems, "unexpected "+r.ID)
			continue
		case seen[r.ID] > 1:
			problems = append(problems, "duplicate "+r.ID)
		case r.Key != agg:
			problems = append(problems, fmt.Sprintf("%s key %q, want %q", r.ID, r.Key, agg))
		}
		var stored, got map[string]any
		_ = json.Unmarshal([]byte(a.value[r.ID]), &stored)
		if err := json.Unmarshal(r.Value, &got); err != nil || fmt.Sprint(got) != fmt.Sprint(stored) {
			problems = append(problems, fmt.Sprintf("%s value %s, want %s", r.ID, r.Value, a.value[r.ID]))
		}
		seq := int64(got["seq"].(float64))
		if seq <= last[r.Key] {
			problems = append(problems, fmt.Sprintf("%s: seq %d after %d", r.Key, seq, last[r.Key]))
		}
		last[r.Key] = seq
	}
	for id := range a.rows {
		if seen[id] == 0 {
			problems = append(problems, "missing "+id)
		}
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... %d in all", len(problems)))
		}
		t.Fatalf("%d committed rows, %d records: %v", len(a.rows), len(recs), problems)
	}
	return recs
}
