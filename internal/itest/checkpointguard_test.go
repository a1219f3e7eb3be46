//go:build integration

package itest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/clients"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/relay"
)

// The commands that change the checkpoint tell a running relay from one
// that exited by the pipeline's lock group, not by the age of the last
// checkpoint: right after a relay stopped on an error (exit 65) the
// documented recovery, `checkpoint skip`, goes through at once without
// --force.
func TestCheckpointSkipRightAfterRelayStoppedOnError(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	cfg.Kafka.CheckpointInterval = time.Minute // a stop is "recent" for a minute by the age of the checkpoint
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 3, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := env.DB.Exec("SET SESSION binlog_format = 'STATEMENT'",
		"INSERT INTO "+s.Table()+" (event_id, aggregate_type, aggregate_id, event_type, payload) VALUES ('stmt-1', 'alarm', 'dev-s', 'AlarmCreated', '{}')"); err != nil {
		t.Fatal(err)
	}
	stuck := Head(t, env.DB)
	if code, err := p.Wait(time.Minute); err != nil || code != relay.ExitData {
		t.Fatalf("relay on a statement-logged outbox insert at %s: exit %d %v\n%s", stuck, code, err, p.Output())
	}
	out, errOut, code := env.CLI(t, "checkpoint", "skip", "--gtid", stuck, "--yes", "--config", path)
	if code != 0 || !strings.Contains(out, "skipped "+stuck) {
		t.Fatalf("skip right after the relay stopped with exit 65: exit %d\n%s%s", code, out, errOut)
	}
	if cp := loadCheckpoint(t, cfg); !ContainsGTID(cp, stuck) {
		t.Fatalf("checkpoint after skip: %+v, want it to cover %s", cp, stuck)
	}
}

// A running relay that writes no checkpoint (here it waits for a source
// host to reach its checkpoint: a domain the server has not logged yet) is
// still running: set, skip and reset refuse without --force, exiting 1,
// naming the instance, and changing nothing.
func TestCheckpointCommandsRefuseRunningRelayThatWritesNoCheckpoint(t *testing.T) {
	k, _, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	ctx := context.Background()
	if err := Store(t, cfg).EnsureTopic(ctx, kadmFor(t, k), 1); err != nil {
		t.Fatal(err)
	}
	head := Head(t, env.DB)
	ahead := &checkpoint.Checkpoint{Name: cfg.Name, GTIDSet: head + ",77-9-5", Flavor: "mariadb", Time: time.Now().Add(-time.Hour).UTC()}
	if err := Store(t, cfg).Write(ctx, cfg.Name, cfg.Kafka.TransactionLanes, ahead); err != nil {
		t.Fatal(err)
	}
	p := env.StartProc(t, path)
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("the relay exited:\n%s", p.Output())
		}
		if !strings.Contains(p.Output(), "waiting for a source host to catch up") {
			return fmt.Errorf("the relay is not waiting for its source yet")
		}
		return nil
	})
	group := clients.GroupID(cfg.Name)
	for _, args := range [][]string{
		{"checkpoint", "reset", "--yes"},
		{"checkpoint", "set", "--to", "now", "--yes"},
		{"checkpoint", "skip", "--gtid", "77-9-6", "--yes"},
	} {
		out, errOut, code := env.CLI(t, append(args, "--config", path)...)
		if code != 1 || !strings.Contains(errOut, "is running") || !strings.Contains(errOut, group+" (instance ") || !strings.Contains(errOut, "--force") {
			t.Fatalf("%s on a running relay: exit %d, want 1 naming the instance in %s and --force\n%s%s", strings.Join(args, " "), code, group, out, errOut)
		}
	}
	if cp := loadCheckpoint(t, cfg); cp == nil || cp.GTIDSet != ahead.GTIDSet {
		t.Fatalf("a refused command changed the checkpoint: %+v, was %+v", cp, ahead)
	}
	if p.Exited() {
		t.Fatalf("the relay stopped:\n%s", p.Output())
	}
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
}

// A relay killed with SIGKILL leaves no goodbye: it stays a member of the
// lock group until its session ends. Until then the commands refuse and
// say so (ha.session_timeout, SIGKILL); after it, they go through without
// --force. The member's time in the group is read from the group itself,
// not from the commands' runs (a command takes seconds to start and write
// on a loaded machine: timed by them, 11.4 s once for a 3 s session).
func TestCheckpointCommandsWaitOutKilledRelaysSession(t *testing.T) {
	_, _, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	WaitLockGroup(t, cfg.Kafka.Brokers, cfg.Name, 1, time.Minute)
	p.Kill()
	killed := time.Now()
	head := Head(t, env.DB)
	out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", head, "--yes", "--config", path)
	if time.Since(killed) < cfg.HA.SessionTimeout && (code != 1 || !strings.Contains(errOut, "SIGKILL") || !strings.Contains(errOut, "ha.session_timeout, "+cfg.HA.SessionTimeout.String())) {
		t.Fatalf("set right after the relay was killed: exit %d, want 1 naming ha.session_timeout\n%s%s", code, out, errOut)
	}
	// The coordinator ends the session ha.session_timeout after the last
	// heartbeat it handled; a loaded broker handles them late. The bound
	// tells that session from a default one (45 s) the member would keep
	// were the relay's setting not given to the group.
	lingered := waitLockGroupEmpty(t, cfg, killed, 3*cfg.HA.SessionTimeout+30*time.Second)
	t.Logf("the killed relay stayed in its lock group for %s (ha.session_timeout %s)", lingered.Round(time.Millisecond), cfg.HA.SessionTimeout)
	if bound := cfg.HA.SessionTimeout + 15*time.Second; lingered > bound {
		t.Fatalf("the killed relay stayed in its lock group for %s, ha.session_timeout is %s: want under %s", lingered, cfg.HA.SessionTimeout, bound)
	}
	if out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", head, "--yes", "--config", path); code != 0 {
		t.Fatalf("set once the killed relay's session ended: exit %d\n%s%s", code, out, errOut)
	}
}

// waitLockGroupEmpty polls cfg's lock group until it has no member and
// returns how long after since that was seen.
func waitLockGroupEmpty(t *testing.T, cfg config.Config, since time.Time, timeout time.Duration) time.Duration {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Kafka.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	Eventually(t, timeout, func() error {
		groups, err := adm.DescribeGroups(context.Background(), clients.GroupID(cfg.Name))
		if err != nil {
			return err
		}
		for _, g := range groups {
			if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
				return g.Err
			}
			if len(g.Members) > 0 {
				return fmt.Errorf("lock group %s has %d members", g.State, len(g.Members))
			}
		}
		return nil
	})
	return time.Since(since)
}

// A relay with kafka.delivery at-least-once writes no Kafka transactions:
// a command's write cannot fence it, and its next checkpoint would replace
// what the command wrote. --force does not pass it: the command refuses,
// saying why, and the relay keeps its position.
func TestCheckpointForceRefusesRunningAtLeastOnceRelay(t *testing.T) {
	_, _, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = config.AtLeastOnce
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	WaitLockGroup(t, cfg.Kafka.Brokers, cfg.Name, 1, time.Minute)
	before := loadCheckpoint(t, cfg)
	out, errOut, code := env.CLI(t, "checkpoint", "reset", "--force", "--yes", "--config", path)
	if code != 1 || !strings.Contains(errOut, "--force cannot fence it") || !strings.Contains(errOut, "at-least-once") {
		t.Fatalf("reset --force on a running at-least-once relay: exit %d, want 1 saying --force cannot fence it\n%s%s", code, out, errOut)
	}
	if cp := loadCheckpoint(t, cfg); cp == nil || cp.GTIDSet != before.GTIDSet {
		t.Fatalf("checkpoint after the refusal: %+v, was %+v", cp, before)
	}
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
	// Stopped, --force is not even needed.
	if out, errOut, code := env.CLI(t, "checkpoint", "reset", "--yes", "--config", path); code != 0 {
		t.Fatalf("reset after the relay stopped: exit %d\n%s%s", code, out, errOut)
	}
}

// nextGTID is the MariaDB GTID right after the single-domain set set.
func nextGTID(t testing.TB, set string) string {
	t.Helper()
	var d, srv, seq int
	if _, err := fmt.Sscanf(set, "%d-%d-%d", &d, &srv, &seq); err != nil || strings.Contains(set, ",") {
		t.Fatalf("want a one-domain MariaDB set, got %q (%v)", set, err)
	}
	return fmt.Sprintf("%d-%d-%d", d, srv, seq+1)
}
