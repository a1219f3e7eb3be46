//go:build integration

package itest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/ha"
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
	group := ha.GroupID(cfg.Name)
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
// --force.
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
	Eventually(t, 3*cfg.HA.SessionTimeout+10*time.Second, func() error {
		out, errOut, code := env.CLI(t, "checkpoint", "set", "--gtid", head, "--yes", "--config", path)
		if code != 0 {
			return fmt.Errorf("set: exit %d\n%s%s", code, out, errOut)
		}
		return nil
	})
	if took := time.Since(killed); took > 2*cfg.HA.SessionTimeout+5*time.Second {
		t.Fatalf("the killed relay counted as running for %s, ha.session_timeout is %s", took, cfg.HA.SessionTimeout)
	}
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
