//go:build integration

package itest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/config"
)

// `checkpoint reset --force` on a running relay fences it (its open
// transaction is aborted: it commits nothing more in that term), and the
// relay then starts again at source.start because an operator said so: it
// logs the reset (when, by whom, from which position) at warn level, never
// as a silent fallback, and pins the new start with a checkpoint of its
// own that replaces the reset marker.
func TestCheckpointResetForceFencesRunningRelay(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 5, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	before := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	out, errOut, code := env.CLI(t, "checkpoint", "reset", "--force", "--yes", "--config", path)
	if code != 0 || !strings.Contains(out, before.GTIDSet+" -> (none)") {
		t.Fatalf("reset --force: exit %d\n%s%s", code, out, errOut)
	}
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("the relay exited:\n%s", p.Output())
		}
		o := p.Output()
		if !strings.Contains(o, "fenced") {
			return fmt.Errorf("the relay has not noticed the fence")
		}
		if !strings.Contains(o, "checkpoint reset by the operator") {
			return fmt.Errorf("the relay has not logged the reset")
		}
		// "now" is pinned once the relay's first checkpoint after the
		// reset replaces the marker; it logs the reset before (rows
		// written in between are before "now": not published).
		if cp := loadCheckpoint(t, cfg); cp == nil || cp.Operator != nil {
			return fmt.Errorf("checkpoint %+v: not yet the relay's own", cp)
		}
		return nil
	})
	line := lineWith(p.Output(), "checkpoint reset by the operator")
	for _, want := range []string{`"level":"warn"`, before.GTIDSet, `"start":"now"`} {
		if !strings.Contains(line, want) {
			t.Fatalf("the reset's log line lacks %s:\n%s", want, line)
		}
	}
	// It goes on from source.start (now): what is written next is
	// published once, what came before is not published again.
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 3, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	cp := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if cp.Operator != nil {
		t.Fatalf("the relay's own checkpoint still carries the operator's mark: %+v", cp.Operator)
	}
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() {
		t.Fatalf("after the reset: %s", rep)
	}
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
}

// A reset while the relay is stopped leaves a marker that `checkpoint
// show` prints (who, when, from where); the relay started next logs the
// reset at warn level and starts at source.start, and its first
// checkpoint replaces the marker.
func TestRelayStartsAtSourceStartAfterResetSayingSo(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	p := env.StartProc(t, path)
	waitStarted(t, p, cfg)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 4, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	before := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
	if out, errOut, code := env.CLI(t, "checkpoint", "reset", "--yes", "--config", path); code != 0 {
		t.Fatalf("reset: exit %d\n%s%s", code, out, errOut)
	}
	out, _, code := env.CLI(t, "checkpoint", "show", "--config", path)
	if code != 0 || !strings.Contains(out, "no checkpoint") || !strings.Contains(out, "reset by ") || !strings.Contains(out, "(it was at "+before.GTIDSet+")") {
		t.Fatalf("show after reset: exit %d\n%s", code, out)
	}
	// One rule in text and --json: no checkpoint after a reset is no error.
	if out, _, code := env.CLI(t, "checkpoint", "show", "--json", "--config", path); code != 0 ||
		!strings.Contains(out, `"checkpoint":null,"state":"reset"`) || !strings.Contains(out, "(it was at "+before.GTIDSet+")") {
		t.Fatalf("show --json after reset: exit %d %s, want 0 with state reset", code, out)
	}
	p = env.StartProc(t, path)
	Eventually(t, time.Minute, func() error {
		if p.Exited() {
			t.Fatalf("the relay exited:\n%s", p.Output())
		}
		if cp := loadCheckpoint(t, cfg); cp == nil || cp.Operator != nil {
			return fmt.Errorf("checkpoint %+v: not yet the relay's own", cp)
		}
		return nil
	})
	line := lineWith(p.Output(), "checkpoint reset by the operator")
	for _, want := range []string{`"level":"warn"`, `"reset_from":"` + before.GTIDSet + `"`, `"start":"now"`} {
		if !strings.Contains(line, want) {
			t.Fatalf("the reset's log line lacks %s:\n%s", want, line)
		}
	}
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 2, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if rep := Compare(t, s, Consume(t, k.Brokers, cfg.Router.TopicPrefix)); !rep.OK() {
		t.Fatalf("after the reset: %s", rep)
	}
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
	// A restart from the relay's own checkpoint says nothing of a reset.
	p = env.StartProc(t, path)
	waitStarted(t, p, cfg)
	Eventually(t, time.Minute, func() error {
		if !strings.Contains(p.Output(), "relay started") {
			return fmt.Errorf("not started yet")
		}
		return nil
	})
	if strings.Contains(p.Output(), "checkpoint reset by the operator") {
		t.Fatalf("a restart from the relay's own checkpoint logged a reset:\n%s", lineWith(p.Output(), "checkpoint reset"))
	}
	if code, err := p.Terminate(time.Minute); code != 0 || err != nil {
		t.Fatalf("terminate: exit %d %v\n%s", code, err, p.Output())
	}
}

// lineWith is the last line of out that contains s ("" when none).
func lineWith(out, s string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// With kafka.delivery at-least-once (checkpoints written without a
// transaction) the reset marker, written in one, is read as the operator's
// word too: the relay starts at source.start saying so, twice in a row when
// it is killed before its first checkpoint replaced the marker, and a
// restart from its own checkpoint after that is neither a reset nor a lost
// checkpoint.
func TestAtLeastOnceRelayStartsAtSourceStartAfterReset(t *testing.T) {
	k, s, cfg := env.Pipeline(t)
	cfg.Kafka.Delivery = config.AtLeastOnce
	path := WriteConfig(t, cfg)
	ctx := context.Background()
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 4, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := env.CLI(t, "checkpoint", "reset", "--yes", "--config", path); code != 0 {
		t.Fatalf("reset: exit %d\n%s%s", code, out, errOut)
	}
	// Killed before its first checkpoint: the marker is still the newest.
	p := env.StartProc(t, path, "OUTBOX_RELAY_FAILPOINT=after-flush:1")
	Eventually(t, time.Minute, func() error {
		if !p.Exited() {
			return fmt.Errorf("not killed yet")
		}
		return nil
	})
	if !strings.Contains(p.Output(), "checkpoint reset by the operator") {
		t.Fatalf("the relay killed before its first checkpoint did not log the reset:\n%s", p.Output())
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	if !strings.Contains(r.Logs(), "checkpoint reset by the operator") {
		t.Fatalf("the restart did not start from the reset:\n%s", tailLines(r.Logs(), 20))
	}
	if _, err := s.Write(ctx, WriteOptions{Writers: 1, Transactions: 4, Tag: "after"}); err != nil {
		t.Fatal(err)
	}
	WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	if strings.Contains(r.Logs(), "checkpoint reset") {
		t.Fatalf("a restart from the relay's own checkpoint logged a reset:\n%s", lineWith(r.Logs(), "checkpoint reset"))
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	requireAtLeastOnce(t, k, s, cfg.Router.TopicPrefix)
}

// A second `checkpoint reset` (a retried script, a second operator) keeps
// the position the first one replaced: `checkpoint show` and the relay's
// log still name it, the one the operator needs to undo the reset with
// `checkpoint set --gtid`.
func TestCheckpointResetTwiceKeepsReplacedPosition(t *testing.T) {
	_, s, cfg := env.Pipeline(t)
	path := WriteConfig(t, cfg)
	r := RunRelay(t, cfg)
	r.WaitReady(t)
	if _, err := s.Write(context.Background(), WriteOptions{Writers: 1, Transactions: 4, Tag: "before"}); err != nil {
		t.Fatal(err)
	}
	before := WaitCheckpoint(t, cfg, Head(t, env.DB), time.Minute)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if out, errOut, code := env.CLI(t, "checkpoint", "reset", "--yes", "--config", path); code != 0 {
			t.Fatalf("reset %d: exit %d\n%s%s", i+1, code, out, errOut)
		}
	}
	out, _, code := env.CLI(t, "checkpoint", "show", "--config", path)
	if code != 0 || !strings.Contains(out, "(it was at "+before.GTIDSet+")") {
		t.Fatalf("show after two resets: exit %d, want the replaced position %s named\n%s", code, before.GTIDSet, out)
	}
	r = RunRelay(t, cfg)
	r.WaitReady(t)
	if line := lineWith(r.Logs(), "checkpoint reset by the operator"); !strings.Contains(line, `"reset_from":"`+before.GTIDSet+`"`) {
		t.Fatalf("the reset's log line does not name %s:\n%s", before.GTIDSet, line)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
}
