//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/devdb"
	"github.com/outbox-relay/outbox-relay/internal/preflight"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func requireItem(t *testing.T, r preflight.Report, name string, want preflight.Status, detail string) {
	t.Helper()
	it, ok := r.Find(name)
	if !ok {
		t.Fatalf("no item %q in %+v", name, r)
	}
	if it.Status != want || !strings.Contains(it.Detail, detail) {
		t.Fatalf("item %q: %s %q, want %s containing %q", name, it.Status, it.Detail, want, detail)
	}
	if want == preflight.Fail && it.Fix == "" {
		t.Fatalf("failed item %q has no fix", name)
	}
	if want == preflight.Fail && r.OK() {
		t.Fatal("report OK despite a failed item")
	}
}

func TestCheckCommand(t *testing.T) {
	k := StartKafka(t)
	good := startServer(t, nil)
	if err := good.Exec("GRANT SLAVE MONITOR ON *.* TO 'relay'@'%'"); err != nil {
		t.Fatal(err)
	}
	base := func() config.Config {
		cfg := env.RelayConfig(k, "app.outbox")
		cfg.Source.Hosts = []string{good.Addr}
		return cfg
	}
	check := func(cfg config.Config) preflight.Report {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return preflight.Run(ctx, cfg)
	}
	setGlobal := func(t *testing.T, name, value, restore string) {
		if err := good.Exec("SET GLOBAL " + name + " = " + value); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = good.Exec("SET GLOBAL " + name + " = " + restore) })
	}

	t.Run("all good, through the CLI", func(t *testing.T) {
		cfg := base()
		out, errOut, code := env.CLI(t, "check", "--config", WriteConfig(t, cfg))
		if code != 0 {
			t.Fatalf("exit %d:\n%s%s", code, out, errOut)
		}
		for _, want := range []string{"PASS  kafka", "binlog_format              ROW", "table app.outbox", "grants"} {
			if !strings.Contains(out, want) {
				t.Fatalf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("compressed binlog is reported and passes", func(t *testing.T) {
		setGlobal(t, "log_bin_compress", "ON", "OFF")
		out, errOut, code := env.CLI(t, "check", "--config", WriteConfig(t, base()))
		if code != 0 || !regexp.MustCompile(`PASS .*log_bin_compress\s+ON: compressed transactions are decompressed`).MatchString(out) {
			t.Fatalf("exit %d:\n%s%s", code, out, errOut)
		}
	})
	t.Run("failures through the CLI exit 1 with fixes", func(t *testing.T) {
		setGlobal(t, "binlog_format", "'STATEMENT'", "'ROW'")
		out, _, code := env.CLI(t, "check", "--config", WriteConfig(t, base()))
		if code != 1 || !strings.Contains(out, "FAIL") || !strings.Contains(out, "fix: set binlog_format=ROW") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("binlog_row_image", func(t *testing.T) {
		setGlobal(t, "binlog_row_image", "'MINIMAL'", "'FULL'")
		requireItem(t, check(base()), "binlog_row_image", preflight.Fail, "MINIMAL")
	})
	t.Run("binlog_row_metadata", func(t *testing.T) {
		setGlobal(t, "binlog_row_metadata", "'MINIMAL'", "'FULL'")
		requireItem(t, check(base()), "binlog_row_metadata", preflight.Warn, "MINIMAL")
	})
	t.Run("binary log off", func(t *testing.T) {
		off := startServer(t, map[string]string{"log-bin": "-"})
		cfg := base()
		cfg.Source.Hosts = []string{off.Addr}
		requireItem(t, check(cfg), "log_bin", preflight.Fail, "OFF")
	})
	t.Run("unreachable host", func(t *testing.T) {
		// One usable host is enough: the check passes and reports the other.
		cfg := base()
		down := freeAddr(t)
		cfg.Source.Hosts = []string{good.Addr, down}
		r := check(cfg)
		i := slices.IndexFunc(r, func(it preflight.Item) bool { return it.Target == "source "+down && it.Name == "connect" })
		if !r.OK() || i < 0 || r[i].Status != preflight.Fail {
			t.Fatalf("second host not reported unreachable, or the check failed: %+v", r)
		}
		requireItem(t, r, "usable hosts", preflight.Pass, "1 of 2")
		cfg.Source.Hosts = []string{down}
		requireItem(t, check(cfg), "usable hosts", preflight.Fail, "none of the 1")
	})
	t.Run("grants", func(t *testing.T) {
		cfg := base()
		cfg.Source.User, cfg.Source.Password = "weak", "weak-pw"
		requireItem(t, check(cfg), "grants", preflight.Fail, "REPLICATION SLAVE")
	})
	t.Run("missing table and columns", func(t *testing.T) {
		cfg := base()
		cfg.Source.Tables = []string{"app.nope"}
		requireItem(t, check(cfg), "table app.nope", preflight.Fail, "not found")
		cfg = base()
		cfg.Router.PayloadColumn = "body"
		requireItem(t, check(cfg), "table app.outbox", preflight.Fail, "body")
	})
	t.Run("checkpoint topic layout", func(t *testing.T) {
		cfg := base()
		cl, _ := kgo.NewClient(kgo.SeedBrokers(k.Brokers...))
		adm := kadm.NewClient(cl)
		defer adm.Close()
		ctx := context.Background()
		if _, err := adm.CreateTopic(ctx, 3, 1, nil, cfg.Kafka.CheckpointTopic); err != nil {
			t.Fatal(err)
		}
		requireItem(t, check(cfg), "checkpoint topic", preflight.Fail, "3 partitions")
		cfg = base()
		if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("delete")}, cfg.Kafka.CheckpointTopic); err != nil {
			t.Fatal(err)
		}
		requireItem(t, check(cfg), "checkpoint topic", preflight.Fail, "cleanup.policy=delete")
	})
	t.Run("replica without log_slave_updates", func(t *testing.T) {
		replica := startServer(t, map[string]string{"log-slave-updates": "OFF"})
		if err := replica.Exec("GRANT SLAVE MONITOR ON *.* TO 'relay'@'%'",
			fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%d, MASTER_USER='root', MASTER_PASSWORD='%s', MASTER_USE_GTID=slave_pos",
				good.Port(), devdb.RootPassword)); err != nil {
			t.Fatal(err)
		}
		cfg := base()
		cfg.Source.Hosts = []string{replica.Addr}
		requireItem(t, check(cfg), "log_replica_updates", preflight.Fail, "replica")
		cfg.Source.Hosts = []string{good.Addr}
		requireItem(t, check(cfg), "log_replica_updates", preflight.Pass, "not a replica")
	})
	t.Run("retention and purged checkpoint", func(t *testing.T) {
		cfg := base()
		r := RunRelay(t, cfg)
		r.WaitReady(t)
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		requireItem(t, check(cfg), "checkpoint", preflight.Pass, "still has the binlogs")
		setGlobal(t, "binlog_expire_logs_seconds", "1", "0")
		Eventually(t, time.Minute, func() error {
			// WARN, never FAIL: whether anything is purged is the checkpoint
			// item's to say (below), and a check before `run` must not block a relay.
			if it, _ := check(cfg).Find("binlog retention"); it.Status != preflight.Warn || !strings.Contains(it.Detail, "retention is 1s") {
				return fmt.Errorf("retention item %+v", it)
			}
			return nil
		})
		if err := good.Exec("INSERT INTO app.outbox (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('r1', 'a', 'd', 'X', '{}')", "FLUSH BINARY LOGS"); err != nil {
			t.Fatal(err)
		}
		purgeOldBinlogs(t, good)
		requireItem(t, check(cfg), "checkpoint", preflight.Fail, "purged")
	})
}

func TestCheckpointCommands(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	out, _, code := env.CLI(t, "checkpoint", "show", "--config", path)
	if code != 0 || !strings.Contains(out, "no checkpoint") {
		t.Fatalf("show without checkpoint: exit %d %s", code, out)
	}
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	start := Head(t, env.DB)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 30}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)

	out, _, code = env.CLI(t, "checkpoint", "show", "--json", "--config", path)
	var shown struct {
		GTIDSet string `json:"gtid_set"`
		Flavor  string `json:"flavor"`
		Events  int64  `json:"events"`
	}
	if err := json.Unmarshal([]byte(out), &shown); err != nil || code != 0 || shown.Flavor != "mariadb" || shown.GTIDSet == "" || shown.Events != 30 {
		t.Fatalf("show --json: exit %d %v %q", code, err, out)
	}
	out, _, code = env.CLI(t, "checkpoint", "history", "--config", path)
	if code != 0 || strings.Count(out, "\n") < 3 || !strings.Contains(out, shown.GTIDSet) {
		t.Fatalf("history: exit %d\n%s", code, out)
	}

	// While the relay is live, writing commands refuse.
	_, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", start, "--yes", "--config", path)
	if code != 1 || !strings.Contains(errOut, "is running") {
		t.Fatalf("set on a live relay: exit %d %s", code, errOut)
	}
	// Not a terminal and no --yes: refused, nothing changed.
	_, errOut, code = env.CLI(t, "checkpoint", "set", "--gtid", start, "--force", "--config", path)
	if code != 2 || !strings.Contains(errOut, "--yes") {
		t.Fatalf("set without --yes: exit %d %s", code, errOut)
	}
	if cp := loadCheckpoint(t, cfg); cp.GTIDSet == start {
		t.Fatal("a refused command changed the checkpoint")
	}
	// --force fences the live relay, which stops with an error.
	out, errOut, code = env.CLI(t, "checkpoint", "set", "--gtid", start, "--force", "--yes", "--config", path)
	if code != 0 || !strings.Contains(out, "-> "+start) || !strings.Contains(errOut, "checkpoint set") {
		t.Fatalf("set --force: exit %d\n%s\n%s", code, out, errOut)
	}
	// The fenced relay goes back to standby, takes the lease again (it is
	// the only instance) and resumes from the new checkpoint.
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("the fenced relay exited instead of going back to standby:\n%s", p.Output())
		}
		if !strings.Contains(p.Output(), "fenced") {
			return fmt.Errorf("the relay has not noticed the fence")
		}
		return nil
	})
	// From the earlier position the relay publishes those 30 events again:
	// moving a checkpoint back is a deliberate replay.
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if n := len(Consume(t, k.Brokers, cfg.Router.TopicPrefix)); n != 60 {
		t.Fatalf("%d records after replaying from the earlier position, want 60", n)
	}
	if code, _ := p.Terminate(time.Minute); code != 0 {
		t.Fatalf("terminate: %d", code)
	}
	// set --to now, then reset.
	if err := env.DB.Exec("INSERT INTO " + s.Name + ".alarm_record (device_id, level, temp, seq) VALUES ('x', 'INFO', 1, 0)"); err != nil {
		t.Fatal(err)
	}
	head := Head(t, env.DB)
	out, errOut, code = env.CLI(t, "checkpoint", "set", "--to", "now", "--force", "--yes", "--config", path)
	if code != 0 || loadCheckpoint(t, cfg).GTIDSet != head {
		t.Fatalf("set --to now: exit %d %s %s", code, out, errOut)
	}
	out, errOut, code = env.CLI(t, "checkpoint", "reset", "--force", "--yes", "--config", path)
	if code != 0 || loadCheckpoint(t, cfg) != nil {
		t.Fatalf("reset: exit %d %s %s", code, out, errOut)
	}
	out, _, _ = env.CLI(t, "checkpoint", "show", "--config", path)
	if !strings.Contains(out, "no checkpoint") {
		t.Fatalf("show after reset: %s", out)
	}
}

// A checkpoint set behind another pipeline's open transaction on the
// checkpoint topic is committed but not yet visible: the command says so and
// succeeds, and readers see the checkpoint once that transaction ends.
func TestCheckpointSetBehindOpenTransaction(t *testing.T) {
	k, _, cfg := env.Pipeline(t)
	cfg.Kafka.RequestTimeout = 2 * time.Second
	path := WriteConfig(t, cfg)
	store := Store(t, cfg)
	ctx := context.Background()
	if err := store.EnsureTopic(ctx, kadmFor(t, k), 1); err != nil {
		t.Fatal(err)
	}
	other, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID(cfg.Name+"-other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	held := &checkpoint.Checkpoint{Name: cfg.Name + "-other", GTIDSet: "0-1-1", Flavor: "mariadb"}
	if err := other.ProduceSync(ctx, store.Record(held)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	head := Head(t, env.DB)
	out, errOut, code := env.CLI(t, "checkpoint", "set", "--to", "now", "--yes", "--config", path)
	if code != 0 || !strings.Contains(out, "-> "+head) || !strings.Contains(errOut, "older open transaction") {
		t.Fatalf("set behind an open transaction: exit %d\n%s\n%s", code, out, errOut)
	}
	if cp := loadCheckpoint(t, cfg); cp != nil {
		t.Fatalf("checkpoint visible past an open transaction: %+v", cp)
	}
	if err := other.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		if cp := loadCheckpoint(t, cfg); cp == nil || cp.GTIDSet != head {
			return fmt.Errorf("checkpoint %+v, want %s", cp, head)
		}
		return nil
	})
}

// check passes a checkpoint older than the retention setting while nothing
// after it is purged. The failure guarded against, where a supervisor
// runs `outbox-relay check` before `run` (a systemd ExecStartPre, as
// deploy/systemd/outbox-relay.service once did). check FAILs "binlog retention" (exit 1) as soon as the
// checkpoint is older than the server's retention setting, whether or not
// anything was purged (a server purges only at a rotation, and with GTIDs
// nothing is lost while the binlogs after the checkpoint are there). Its
// own fix says "start the relay now", but under such a unit that is
// impossible: ExecStartPre fails, Restart=on-failure (exit 1 is not in
// RestartPreventExitStatus) retries every 10s forever, `run` never starts,
// no /metrics is ever served (so OutboxRelayStoppedFatal never fires). Here
// `run` streams fine from the same checkpoint.
func TestCheckPassesCheckpointOlderThanRetentionWhileNothingPurged(t *testing.T) {
	BrokerOnlyAsSink(t)
	_, s, cfg := env.Pipeline(t)
	p := RunRelay(t, cfg)
	p.WaitReady(t)
	if _, err := s.Write(t.Context(), WriteOptions{Writers: 1, Transactions: 3, Devices: 2}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	// The relay was down longer than retention (here: retention ~9s).
	if err := env.DB.Exec("SET GLOBAL expire_logs_days = 0.0001"); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.DB.Exec("SET GLOBAL expire_logs_days = 0") }()
	time.Sleep(12 * time.Second)
	path := WriteConfig(t, cfg)
	out, _, code := env.CLI(t, "check", "--config", path)
	t.Logf("ExecStartPre `check`: exit %d\n%s", code, out)
	p2 := RunRelay(t, cfg)
	p2.WaitReady(t)
	if _, err := s.Write(t.Context(), WriteOptions{Writers: 1, Transactions: 2, Devices: 2, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	t.Logf("`run` from the same checkpoint streams and checkpoints the new transactions")
	if code != 0 {
		t.Fatalf("the unit's ExecStartPre exits %d (restarted every 10s forever) for a checkpoint `run` resumes from fine", code)
	}
}
