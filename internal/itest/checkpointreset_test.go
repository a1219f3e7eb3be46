//go:build integration

package itest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
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
